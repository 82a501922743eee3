"""Evaluate candidates: reference workers per problem, fresh candidate workers per candidate, one JSONL
record each.

For each problem `evaluations` starts the reference's workers once (pkit.harness.reference: trial outputs,
in-place contract, warm-up), then runs every candidate of that problem in fresh worker processes
(pkit.harness.candidate), and yields each record as soon as it is known (pkit.harness.outcome); `evaluate`
writes them, so a crash, hang or wedged GPU context of one candidate costs only that candidate.

The evaluation's other names stay importable from here: the options (pkit.harness.options), the timing checks
(pkit.harness.integrity) and the speedup's interval (pkit.harness.speedup).

Example:
    >>> from pkit.harness import problems, runner, solutions                 # doctest: +SKIP
    >>> probs = problems.discover()                                          # doctest: +SKIP
    >>> cand = runner.reference_candidate(probs[0])                          # doctest: +SKIP
    >>> runner.evaluate_one(probs[0], cand, runner.EvalOptions(trials=2))["status"]  # doctest: +SKIP
    'correct_slower'
"""
from __future__ import annotations

import shutil
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path
from typing import Callable, Iterable, Iterator

from .candidate import MAX_ROUNDS, MIN_ROUNDS, run_candidate
from .contain import become_subreaper, interruptible
from .failures import reference_failure
from .integrity import reuse_ratio, roofline_wall, timing_mismatch
from .options import (QUICK_TIMING, EvalOptions, pick_device, problem_dtype, spec_for, timing_counts, tolerances,
                      unsupported)
from .outcome import record_for, roofline_ms
from .problems import Problem
from .records import leading_lines, write_line
from .reference import Reference, ReferenceFailed
from .solutions import Candidate, by_problem, reference_candidate
from .speedup import speedup_interval
from .zygote import Zygote, for_evaluation

__all__ = ["COMPILER_LINES", "MAX_ROUNDS", "MIN_ROUNDS", "QUICK_TIMING", "EvalOptions", "by_problem", "evaluate",
           "evaluate_one", "evaluations", "pick_device", "problem_dtype", "progress_line", "reference_candidate", "reuse_ratio",
           "roofline_ms", "roofline_wall", "slowest_phases", "spec_for", "speedup_interval", "start_reference",
           "timing_mismatch", "tolerances", "unsupported"]


def start_reference(problem: Problem, options: EvalOptions, device: str, folder: Path,
                    log: Callable[[str], None] | None = None, zygote: Zygote | None = None) -> Reference:
    """The problem's reference workers with their trials and warm-up done (ReferenceFailed otherwise)."""
    counts = timing_counts(options)
    ref = Reference(spec_for(problem, options, device), folder, options.timeout_s, log=log, zygote=zygote)
    return ref.start([options.seed + t for t in range(options.trials)], problem.inplace_inputs,
                     counts["warmup"], counts["iters"])


def evaluate_one(problem: Problem, candidate: Candidate, options: EvalOptions, *, device: str | None = None,
                 provenance: dict | None = None, reference: Reference | None = None,
                 log: Callable[[str], None] | None = None) -> dict:
    """Run one candidate in fresh worker processes; returns its record.

    `reference` (from `start_reference`) is reused when given, else started and stopped here.
    """
    device = device or pick_device(options.device, options.world_size)
    own = reference is None
    folder = Path(tempfile.mkdtemp(prefix="pkit-eval-"))
    try:
        if own:
            try:
                reference = start_reference(problem, options, device, folder, log)
            except ReferenceFailed as e:
                return record_for(problem, candidate, options, device, provenance, reference_failure(e), 0.0)
        fields, wall = run_candidate(problem, candidate, reference, options, device, folder, log)
        return record_for(problem, candidate, options, device, provenance, fields, wall)
    finally:
        if own and reference is not None:
            reference.close()
        shutil.rmtree(folder, ignore_errors=True)


def slowest_phases(phase_s: dict, most: int = 3) -> str:
    """The `most` longest phases of `phase_s` (seconds by phase), longest first, for a progress line.

    >>> slowest_phases({"startup": 2.04, "inputs, trial": 0.31, "plan": 0.01, "load_problem": 0.5})
    'startup 2.0 s, load_problem 0.5 s, inputs, trial 0.3 s'
    """
    top = sorted(phase_s.items(), key=lambda kv: -kv[1])[:most]
    return ", ".join(f"{name} {seconds:.1f} s" for name, seconds in top)


def evaluate(pairs: Iterable[tuple[Problem, Candidate]], options: EvalOptions, out_path: str | Path, *,
             provenance: dict | None = None, log: Callable[[str], None] | None = None,
             append: bool = False) -> list[dict]:
    """Evaluate every (problem, candidate) pair, writing one JSONL line each to `out_path` as it is known
    (`append`: after the lines the file holds, as a resumed run does; else the file is started anew).

    Pairs whose problem cannot run under `options` (see `unsupported`) are skipped with a log line. SIGINT,
    SIGTERM and SIGHUP stop the run after killing every worker and removing the temp folders
    (`pkit.harness.contain.Interrupted` is raised).
    """
    options.validate()
    log = log or (lambda line: print(line, file=sys.stderr, flush=True))
    pairs = list(pairs)
    for problem in {p.name: p for p, _ in pairs}.values():
        reason = unsupported(problem, options)
        if reason:
            log(f"skipping {problem.name}: {reason}")
    pairs = [(p, c) for p, c in pairs if not unsupported(p, options)]
    records: list[dict] = []
    Path(out_path).parent.mkdir(parents=True, exist_ok=True)
    with open(out_path, "a" if append else "w", encoding="utf-8") as out, \
            closing(evaluations(pairs, options, provenance=provenance, log=log)) as stream:
        for record in stream:
            write_line(out, record)
            records.append(record)
            log(progress_line(len(records), len(pairs), record))
    return records


def evaluations(pairs: list[tuple[Problem, Candidate]], options: EvalOptions, *, provenance: dict | None = None,
                log: Callable[[str], None]) -> Iterator[dict]:
    """The record of each pair, yielded as it is known: per problem its reference workers once, then each of its
    candidates in fresh workers. Every pair must run under `options` (`unsupported` says None)."""
    device = pick_device(options.device, options.world_size)
    become_subreaper()
    with interruptible(), for_evaluation() as zygote:
        for problem, candidates in by_problem(pairs):
            folder = Path(tempfile.mkdtemp(prefix="pkit-eval-"))
            reference = failure = None
            try:
                try:
                    began = time.monotonic()
                    reference = start_reference(problem, options, device, folder, log, zygote)
                    log(f"{problem.name}: reference ready in {time.monotonic() - began:.1f} s "
                        f"({reference.sets} timed input sets; {slowest_phases(reference.workers.ranks[0].phase_s)})")
                except ReferenceFailed as e:
                    failure = reference_failure(e)
                for candidate in candidates:
                    if failure is not None:
                        yield record_for(problem, candidate, options, device, provenance, dict(failure), 0.0)
                    else:
                        yield evaluate_one(problem, candidate, options, device=device, provenance=provenance,
                                           reference=reference, log=log)
            finally:
                if reference is not None:
                    reference.close()
                shutil.rmtree(folder, ignore_errors=True)


COMPILER_LINES = 8
"""Lines of a compile_error's message the console shows (its first line, then the compiler's log and source)."""


def progress_line(i: int, total: int, record: dict) -> str:
    r"""The console line of one record: status, speedup, and the first line of the reason when it failed; for a
    compile_error, up to `COMPILER_LINES` lines of the message, the compiler's own below the first (indented).

    >>> print(progress_line(1, 1, {"problem": "p", "solution": "s.py", "status": "compile_error", "speedup": None,
    ...                            "error": "CompileError: compiling 'k.cu' failed:\nk.cu(3): error: x"}))
    [1/1] p s.py: compile_error — CompileError: compiling 'k.cu' failed:
        k.cu(3): error: x
    """
    speed = f" {record['speedup']:.2f}x" if record["speedup"] is not None else ""
    lines = leading_lines(record["error"], COMPILER_LINES if record["status"] == "compile_error" else 1)
    reason = "".join([f" — {lines[0].strip()}", *(f"\n    {line}" for line in lines[1:])]) if lines else ""
    return f"[{i}/{total}] {record['problem']} {record['solution']}: {record['status']}{speed}{reason}"
