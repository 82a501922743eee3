"""Evaluate candidates: reference workers per problem, fresh candidate workers per candidate, one JSONL
record each.

For each problem `evaluate` starts the reference's workers once (pkit.harness.reference: trial outputs,
in-place contract, reference timing), then runs every candidate of that problem in fresh worker processes
(pkit.harness.launch). This process checks each trial's outputs as they arrive and answers go or stop;
it times nothing itself but measures the timed window from outside; after the candidate's processes are
gone it asks the reference for the outputs of the input sets the candidate was timed on and checks the
sampled timed outputs. Records are written as soon as they are known, so a crash, hang or wedged GPU
context of one candidate costs only that candidate.

Example:
    >>> from pkit.harness import problems, runner, solutions                 # doctest: +SKIP
    >>> probs = problems.discover()                                          # doctest: +SKIP
    >>> cand = runner.reference_candidate(probs[0])                          # doctest: +SKIP
    >>> runner.evaluate_one(probs[0], cand, runner.EvalOptions(trials=2))["status"]  # doctest: +SKIP
    'correct_slower'
"""
from __future__ import annotations

import math
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

from .checks import FingerprintCheck, RankCheck, compare
from .contain import become_subreaper, interruptible
from .launch import RankState, RunFailed, RunTimeout, WorkerSet
from .problems import Problem
from .records import CORRECT, excerpt, leading_lines, new_record, speed_status, write_line
from .reference import Reference, ReferenceFailed, Timing, timed_phase
from .snapshot import SnapshotError, load
from .solutions import Candidate
from .timer import input_bytes
from .versions import stamp
from .zygote import Zygote

QUICK_TIMING = {"warmup": 2, "iters": 10}
"""Timing without --perf: just enough to call a correct candidate faster or slower."""

REFERENCE_PHASES = ("load_problem", "inputs")
"""Phases of a candidate worker in which only the problem's own code runs (a failure there is the problem's)."""
MISMATCH_SLACK_S = 0.05
"""Wall time (s) a timed window may exceed its explained time by before `timing_mismatch` (plus 25% of the
reference's overhead and the candidate's own reported time: see `timing_mismatch`)."""
BUILD_SLACK_S = 0.5
"""Seconds the candidate's input-set building may take beyond 1.5x the reference's (see `timing_mismatch`)."""
ROUNDS = 3
"""Interleaved timing rounds: each times the reference and the candidate once on fresh input sets, in turn (the
reference first in even rounds, the candidate first in odd ones, so drift and warm-up fall on both)."""
BOOTSTRAP = 2000
"""Resamples of the speedup's confidence interval (`speedup_interval`)."""
CONFIDENCE = 0.95
"""Coverage of the speedup's confidence interval."""
REUSE_RATIO = 0.5
"""The candidate's calls on reused input sets, relative to their sets' first calls, may not be faster than this
fraction of the same ratio of the reference's (see `timing_mismatch`)."""


@dataclass
class EvalOptions:
    """How to evaluate. Times in seconds; `size`/`device` 'auto' pick tiny+cpu without enough GPUs,
    large+cuda with them; `dtype` None takes each problem's first dtype; `atol`/`rtol` None use the
    dtype table of pkit.harness.checks (or the problem's own tolerance)."""

    world_size: int = 2
    size: str = "auto"
    dtype: str | None = None
    trials: int = 5
    seed: int = 0
    perf: bool = False
    warmup: int = 25
    iters: int = 100
    timeout_s: float = 300.0
    atol: float | None = None
    rtol: float | None = None
    device: str = "auto"
    ceilings: str = "H200"

    def validate(self, spell: Callable[[str], str] = str) -> None:
        """Raise ValueError naming the first option out of range; `spell` turns a field name into the name the
        message uses (the command line passes its option names: 'timeout_s' -> '--timeout').

        >>> EvalOptions(atol=-1).validate(lambda field: "--" + field)
        Traceback (most recent call last):
        ...
        ValueError: --atol: expected a number >= 0, got -1
        """
        from ..hardware import GPUS

        rules = (("world_size", self.world_size >= 1, "an integer >= 1"),
                 ("trials", self.trials >= 1, "an integer >= 1"),
                 ("warmup", self.warmup >= 0, "an integer >= 0"),
                 ("iters", self.iters >= 1, "an integer >= 1"),
                 ("timeout_s", self.timeout_s > 0, "seconds > 0"),
                 ("atol", self.atol is None or self.atol >= 0, "a number >= 0"),
                 ("rtol", self.rtol is None or self.rtol >= 0, "a number >= 0"),
                 ("device", self.device in ("auto", "cpu", "cuda"), "one of auto, cpu, cuda"),
                 ("ceilings", self.ceilings in GPUS, f"a GPU of pkit.hardware.GPUS ({', '.join(GPUS)})"))
        for name, ok, expected in rules:
            if not ok:
                value = getattr(self, name)
                raise ValueError(f"{spell(name)}: expected {expected}, got "
                                 + (f"{value:g}" if isinstance(value, float) else repr(value)))


def pick_device(requested: str, world_size: int) -> str:
    """'cuda' when asked for or when 'auto' finds at least `world_size` GPUs, else 'cpu'."""
    import torch

    if requested == "cuda" and torch.cuda.device_count() < world_size:
        raise ValueError(f"device: 'cuda' needs {world_size} GPUs, found {torch.cuda.device_count()}")
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() and torch.cuda.device_count() >= world_size else "cpu"
    return requested


def reference_candidate(problem: Problem) -> Candidate:
    """The problem's own reference, evaluated as if it were a candidate (a self-check of the harness)."""
    path = problem.reference_path
    return Candidate(path, f"{problem.name}/{path.name}:{problem.reference_function}", problem.name,
                     function=problem.reference_function)


def unsupported(problem: Problem, options: EvalOptions) -> str | None:
    """Why `problem` cannot run under `options` (world size or dtype), or None when it can."""
    if problem.world_sizes and options.world_size not in problem.world_sizes:
        return f"world size {options.world_size} not in {list(problem.world_sizes)}"
    if options.dtype and options.dtype not in problem.dtypes:
        return f"dtype {options.dtype} not in {list(problem.dtypes)}"
    return None


def problem_dtype(problem: Problem, dtype: str | None) -> str:
    """`dtype`, or the problem's first dtype; checks the problem supports it."""
    dtype = dtype or problem.dtypes[0]
    if dtype not in problem.dtypes:
        raise ValueError(f"dtype: problem {problem.name} supports {list(problem.dtypes)}, got {dtype!r}")
    return dtype


def roofline_ms(problem: Problem, world_size: int, size: str, dtype: str, ceilings: str) -> tuple:
    """(roofline time in ms, bound) of the problem's cost model in `dtype` (FLOPs at that dtype's rate,
    `pkit.harness.problems.roofline_floor`) under a GPU's datasheet; (None, None) without a cost model."""
    from ..roofline import Ceilings
    from .problems import roofline_floor

    cost = problem.cost(world_size, size, dtype)
    if cost is None:
        return None, None
    f = roofline_floor(cost, dtype, Ceilings.datasheet(ceilings))
    return f.time_s * 1e3, f.bound



def spec_for(problem: Problem, options: EvalOptions, device: str) -> dict:
    """The part of a worker's spec shared by reference and candidate workers."""
    size = problem.resolve_size(options.size, device)
    dtype = problem_dtype(problem, options.dtype)
    return {"source": problem.source, "world_size": options.world_size, "device": device, "size": size,
            "dtype": dtype, "pg_timeout_s": options.timeout_s + 60}


def timing_counts(options: EvalOptions) -> dict:
    return {"warmup": options.warmup, "iters": options.iters} if options.perf else dict(QUICK_TIMING)


def tolerances(problem: Problem, options: EvalOptions) -> dict:
    """The tolerance keywords of `checks.compare` for `problem` under `options`: `atol`, `rtol` (None: the dtype
    table) and `summands`, the world size for a problem whose outputs are sums over the ranks (META['rank_sums']),
    else 1."""
    atol, rtol = options.atol, options.rtol
    if problem.tolerance is not None:
        atol = problem.tolerance[0] if atol is None else atol
        rtol = problem.tolerance[1] if rtol is None else rtol
    return {"atol": atol, "rtol": rtol, "summands": options.world_size if problem.rank_sums else 1}


def start_reference(problem: Problem, options: EvalOptions, device: str, folder: Path,
                    log: Callable[[str], None] | None = None, zygote: Zygote | None = None) -> Reference:
    """The problem's reference workers with their trials and timing done (ReferenceFailed otherwise)."""
    counts = timing_counts(options)
    ref = Reference(spec_for(problem, options, device), folder, options.timeout_s, log=log, zygote=zygote)
    return ref.start([options.seed + t for t in range(options.trials)], problem.inplace_inputs,
                     counts["warmup"], counts["iters"])


def reuse_ratio(timing: Timing) -> float | None:
    """Median time of the calls on reused input sets over the median of the sets' first calls (None without
    reuse). The calls rotate over the sets, so the first len(seeds) calls are the first uses."""
    sets, slowest = len(timing.seeds), timing.slowest_ms
    if sets >= len(slowest):
        return None
    first = statistics.median(slowest[:sets])
    return statistics.median(slowest[sets:]) / first if first > 0 else None


def timing_mismatch(ref: Timing, sol: Timing) -> str | None:
    """Why the candidate's reported times cannot be believed, from what this process saw (None: they can).

    Four checks, all against the reference's own timed phase, which does the same harness work:
    - reused sets (when there are fewer sets than calls and the candidate would be called faster): the median
      call on a reused set over the median first call of a set must not fall below REUSE_RATIO times the
      reference's (answers kept from the first use and looked up show here);
    - building the input sets: the candidate's must not take longer than 1.5x the reference's plus
      BUILD_SLACK_S (outputs computed ahead while the sets are built show here, when they cost that much);
    - per call: the time between answering call i-1 and hearing of call i, minus the reported time of call i,
      is the harness's work around a call; the candidate's median must not exceed the reference's median by
      more than half the candidate's reported median, a quarter of the reference's median, three median
      absolute deviations (the larger of the two roles') and 20 µs (work hidden from a patched timer shows
      here, call after call; it must stand out of this noise to be seen);
    - per window (from the sets being built to the last call): the candidate's window minus the reference's
      overhead (window minus reported times) must not exceed twice its reported total plus 25% of that
      overhead plus MISMATCH_SLACK_S.
    """
    mine_reuse, theirs_reuse = reuse_ratio(sol), reuse_ratio(ref)
    faster = statistics.median(sol.slowest_ms) < statistics.median(ref.slowest_ms)
    if faster and mine_reuse is not None and theirs_reuse is not None and mine_reuse < REUSE_RATIO * theirs_reuse:
        return (f"calls on reused input sets took {mine_reuse:.2g}x the time of their sets' first calls (the "
                f"reference: {theirs_reuse:.2g}x): answers remembered, not computed")
    if sol.build_s and ref.build_s and max(sol.build_s) > 1.5 * max(ref.build_s) + BUILD_SLACK_S:
        return (f"building its timed input sets took {max(sol.build_s):.3g} s here, the reference's "
                f"{max(ref.build_s):.3g} s (allowed: 1.5x + {BUILD_SLACK_S:g} s)")
    mine, theirs = sol.unexplained_ms, ref.unexplained_ms
    if mine and theirs:
        usual, own = statistics.median(theirs), statistics.median(mine)
        spread = max(statistics.median(abs(v - usual) for v in theirs), statistics.median(abs(v - own) for v in mine))
        allowed = 0.5 * statistics.median(sol.slowest_ms) + 0.25 * usual + 3 * spread + 0.02
        extra = statistics.median(mine) - usual
        if extra > allowed:
            return (f"per call, {extra:.3g} ms more passed around each timed call than the reference's harness work "
                    f"({usual:.3g} ms; allowed {allowed:.3g} ms more) while the candidate reported a median of "
                    f"{statistics.median(sol.slowest_ms):.3g} ms")
    overhead = max(0.0, max(ref.window_s) - sum(ref.slowest_ms) / 1e3)
    reported = sum(sol.slowest_ms) / 1e3
    if max(sol.window_s) - overhead > 2 * reported + 0.25 * overhead + MISMATCH_SLACK_S:
        return (f"the candidate reported {reported * 1e3:.3g} ms over its timed calls, but its timed window took "
                f"{max(sol.window_s) * 1e3:.3g} ms here (the reference's overhead: {overhead * 1e3:.3g} ms)")
    return None


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


def record_for(problem, candidate, options, device, provenance, fields: dict, wall_s: float) -> dict:
    spec = spec_for(problem, options, device)
    roof_ms, bound = roofline_ms(problem, options.world_size, spec["size"], spec["dtype"], options.ceilings)
    if fields.get("sol_time_ms") and roof_ms is not None:
        fields["roofline_fraction"] = roof_ms / fields["sol_time_ms"]
    fields = roofline_wall(fields, roof_ms, bound, device, options.ceilings)
    prov = dict(provenance or {}, seed=options.seed, **stamp(problem, candidate, options))
    return new_record(
        problem=problem.name, category=problem.category, solution=candidate.relpath, model=candidate.model,
        sample=candidate.sample, backend=candidate.backend, world_size=options.world_size, size=spec["size"],
        dtype=spec["dtype"], device=device, roofline_time_ms=roof_ms, roofline_bound=bound, seed=options.seed,
        timing="full" if options.perf else "quick", wall_s=round(wall_s, 3), provenance=prov, **fields)


def slowest_phases(phase_s: dict, most: int = 3) -> str:
    """The `most` longest phases of `phase_s` (seconds by phase), longest first, for a progress line.

    >>> slowest_phases({"startup": 2.04, "inputs, trial": 0.31, "plan": 0.01, "load_problem": 0.5})
    'startup 2.0 s, load_problem 0.5 s, inputs, trial 0.3 s'
    """
    top = sorted(phase_s.items(), key=lambda kv: -kv[1])[:most]
    return ", ".join(f"{name} {seconds:.1f} s" for name, seconds in top)


def reference_failure(e: ReferenceFailed) -> dict:
    """Record fields for a candidate whose problem's reference failed."""
    cause = _root_cause(e.ranks)
    text = _describe_failure(cause) if cause is not None else str(e)
    return {"status": "runtime_error", "flags": {"reference_error"},
            "error": excerpt(f"the reference failed: {text}", head=1000), "per_rank": [], "trials": 0,
            "trials_passed": 0}


class CandidateRun:
    """One candidate's workers, driven through trials and timing, checked here as outputs arrive."""

    def __init__(self, problem: Problem, candidate: Candidate, reference: Reference, options: EvalOptions,
                 device: str, folder: Path, log):
        self.reference, self.options = reference, options
        self.tolerance = tolerances(problem, options)
        spec = dict(spec_for(problem, options, device), role="candidate",
                    candidate={"path": str(candidate.path), "function": candidate.function})
        self.folder = folder / f"candidate-{os.urandom(4).hex()}"
        self.workers = WorkerSet(spec, self.folder, log=log, zygote=reference.zygote)
        self.checks: list[list[RankCheck]] = []
        self.rounds: list[tuple[Timing, Timing]] = []  # (reference, candidate) per interleaved round
        self.retime_s: float | None = None
        self.out_cap = 4 * reference.out_bytes + (1 << 20)

    def file(self, rank: int, tag: str) -> str:
        return str(self.folder / f"candidate{rank}_{tag}.pt")

    def drive(self) -> None:
        """Trials (stop at the first failing one), then warm-up and timing when all passed."""
        ws, ref = self.workers, self.reference
        deadline = time.monotonic() + self.options.timeout_s
        ws.gather("ready", deadline)
        ws.send({"op": "trials", "seeds": [self.options.seed + t for t in range(len(ref.trials))]})
        for t, row in enumerate(ref.trials):
            messages = ws.gather("trial", deadline)
            checks = [self.check_trial(t, rank, row[rank], m) for rank, m in enumerate(messages)]
            self.checks.append(checks)
            passed = all(c.ok for c in checks)
            ws.send({"op": "verdict", "go": passed})
            if not passed:
                break
        ws.gather("trials_done", deadline)
        if self.passed:
            counts = timing_counts(self.options)
            ws.send({"op": "warmup", "n": counts["warmup"]})
            ws.gather("warm", deadline)
            self.rounds = [self.timed_round(k, counts["iters"], deadline) for k in range(ROUNDS)]
            bad = sum(timing_mismatch(r, s) is not None for r, s in self.rounds)
            if bad:
                # a load spike on this machine or a lie: as many rounds again, each window under a --timeout of its
                # own (an honest candidate near its limit does not time out); a lie repeats, a spike does not
                again = time.monotonic()
                self.rounds += [self.timed_round(ROUNDS + k, counts["iters"], time.monotonic() + self.options.timeout_s)
                                for k in range(bad)]
                self.retime_s = time.monotonic() - again
        ws.send({"op": "quit"})
        ws.wait_exit(2.0)

    def timed_round(self, k: int, iters: int, deadline: float) -> tuple[Timing, Timing]:
        """(reference, candidate) timings of round `k`, each on fresh sets; the reference first when k is even."""
        ref = self.reference

        def mine():
            return timed_phase(self.workers, ref.sets, iters, ref.inplace, deadline, ref.out_bytes)

        if k % 2 == 0:
            theirs = ref.retime(iters)
            return theirs, mine()
        own = mine()
        return ref.retime(iters), own

    def judged(self) -> tuple[list[tuple[Timing, Timing]], str | None]:
        """(the rounds the verdict comes from, why the candidate's times are not believed or None): rounds whose
        timing checks pass; all rounds, with the first round's reason, when those are fewer than the failing ones."""
        whys = [timing_mismatch(r, s) for r, s in self.rounds]
        clean = [pair for pair, why in zip(self.rounds, whys) if why is None]
        if len(clean) < len(self.rounds) - len(clean):
            return self.rounds, next(w for w in whys if w)
        return clean, None

    @property
    def passed(self) -> bool:
        return len(self.checks) == len(self.reference.trials) and all(c.ok for row in self.checks for c in row)

    def check_trial(self, t: int, rank: int, ref, message: dict) -> RankCheck:
        try:
            out = load(self.file(rank, f"trial{t}_out"), self.out_cap, "out")
            after = load(self.file(rank, f"trial{t}_after"), self.out_cap + 4 * input_bytes(ref.before.value), "input")
        except SnapshotError as e:
            return RankCheck(ok=False, note=f"unreadable output: {e}", flags=["unreadable_output"])
        aliases = [a for a in message.get("aliases", []) if isinstance(a, str)]
        check = compare(ref.out, out, pristine=ref.before, ref_inputs=ref.after, sol_inputs=after,
                        inplace=self.reference.inplace, ref_aliases=ref.aliases, sol_aliases=aliases,
                        **self.tolerance)
        if message.get("side_stream") is True:
            check.ok = False
            check.flags = sorted({*check.flags, "side_stream"})
            check.note = _join(check.note, "output still changed after the current stream finished: work on a "
                                           "side stream not joined back")
        return check

    def check_timed(self) -> list[str]:
        """Notes on timed calls of every candidate window whose outputs differ from the reference's for the same
        inputs, each call's fresh change included (empty: all right): every call by its fingerprint, the kept
        calls of the last window element by element (each window's saved outputs replace the one's before)."""
        notes, last = [], len(self.rounds) - 1
        for k, (_, timing) in enumerate(self.rounds):
            notes += [f"window {k + 1}, {note}" for note in self.check_window(timing, k == last)]
        return notes

    def check_window(self, timing: Timing, saved: bool) -> list[str]:
        kept = timing.kept if saved else set()
        summaries, expected = self.reference.expected(timing.seeds, timing.fresh, kept, self.tolerance)
        prints = [[FingerprintCheck(summary) for summary in row] for row in summaries]
        notes = []
        for rank, calls in enumerate(timing.fingerprints):
            for i, got in enumerate(calls):
                why = prints[i][rank].mismatch(got)
                if why:
                    notes.append(f"rank {rank}, timed call {i}: {why}")
        for i in sorted(kept):
            for rank in range(self.options.world_size):
                try:
                    got = load(self.file(rank, f"timed{i}"), self.out_cap, "out")
                except SnapshotError as e:
                    notes.append(f"rank {rank}, timed call {i}: {e}")
                    continue
                check = compare(expected[i][rank], got, **self.tolerance)
                if not check.ok:
                    notes.append(f"rank {rank}, timed call {i}: {check.note}")
        return notes


def run_candidate(problem: Problem, candidate: Candidate, reference: Reference, options: EvalOptions, device: str,
                  folder: Path, log=None) -> tuple[dict, float]:
    """(record fields, wall seconds) of one candidate against a started reference."""
    start = time.monotonic()
    run = CandidateRun(problem, candidate, reference, options, device, folder, log)
    failure = reference_failed = None
    try:
        run.drive()
    except (RunFailed, RunTimeout) as e:
        failure = e
    except ReferenceFailed as e:  # timing the reference again, after a mismatch
        reference_failed = e
    finally:
        ranks = run.workers.close()
    wall = time.monotonic() - start
    fields = dict(_trial_fields(run.checks), phase_s={k: round(v, 3) for k, v in ranks[0].phase_s.items()})
    if reference_failed is not None:
        return dict(fields, **reference_failure(reference_failed)), wall
    if failure is not None:
        return _failed(fields, failure, ranks, options.timeout_s), wall
    if not run.passed:
        last = run.checks[-1]
        return dict(fields, status="wrong_result",
                    error=excerpt("; ".join(f"rank {r}: {c.note}" for r, c in enumerate(last) if c.note))), wall
    checking = time.monotonic()
    try:
        notes = run.check_timed()
    except ReferenceFailed as e:
        return dict(fields, **reference_failure(e)), time.monotonic() - start
    fields["phase_s"]["parent: check timed outputs"] = round(time.monotonic() - checking, 3)
    if run.retime_s is not None:
        fields["phase_s"]["parent: both timed again after a mismatch"] = round(run.retime_s, 3)
    wall = time.monotonic() - start
    if notes:
        fields["flags"].add("timed_output")
        return dict(fields, status="wrong_result", error=excerpt(
            f"{len(notes)} timed output(s) differ from the reference's for the same fresh inputs: "
            + "; ".join(notes), head=600)), wall
    rounds, why = run.judged()
    times = _times(rounds)
    if why:
        fields["flags"].add("timing_mismatch")
        times.update(status="correct_slower", speedup=None, speedup_low=None, speedup_high=None)
        fields["error"] = f"timing_mismatch: {why}; not called faster"
    return dict(fields, error=fields.get("error"), **times), wall


def _trial_fields(checks: list[list[RankCheck]]) -> dict:
    flat = [c for row in checks for c in row]
    last = checks[-1] if checks else []
    return {
        "per_rank": [c.to_dict(rank) for rank, c in enumerate(last)],
        "max_abs_err": max((c.max_abs_err for c in flat if c.max_abs_err is not None), default=None),
        "max_rel_err": max((c.max_rel_err for c in flat if c.max_rel_err is not None), default=None),
        "trials": len(checks), "trials_passed": sum(all(c.ok for c in row) for row in checks),
        "flags": {f for c in flat for f in c.flags},
    }


def _failed(fields: dict, failure: Exception, ranks: list[RankState], timeout_s: float) -> dict:
    """Status and error of a run that stopped early: a rank's own error or death, a timeout, or a broken protocol."""
    first = _root_cause(ranks)
    if first is not None:
        status = "compile_error" if first.error and first.error.get("kind") == "compile_error" else "runtime_error"
        if first.error and str(first.error.get("phase", "")).startswith(REFERENCE_PHASES):
            fields["flags"].add("reference_error")
        return dict(fields, status=status, error=excerpt(_describe_failure(first), head=1000))
    tails = "\n".join(f"--- rank {r.rank} output ---\n{r.log_tail[-600:]}" for r in ranks if r.log_tail.strip())
    if isinstance(failure, RunTimeout):
        where = "; ".join(f"rank {r.rank} in phase {r.phase}" for r in ranks)
        return dict(fields, status="timeout",
                    error=excerpt(f"no result within {timeout_s:g} s; all ranks killed ({where})\n{tails}", head=400))
    return dict(fields, status="runtime_error", error=excerpt(f"{failure}\n{tails}", head=400))


def _root_cause(ranks: list[RankState]) -> RankState | None:
    """The rank whose failure explains the run, or None when no rank failed.

    In order: a compile error; the earliest error of the rank's own (not the echo of a peer's death, such
    as gloo's 'Connection closed by peer'); the first rank seen to die on its own (not killed by us); the
    earliest echo.
    """
    errored = sorted((r for r in ranks if r.error), key=lambda r: r.error.get("time", 0))
    crashed = sorted((r for r in ranks if not r.error and r.exit_order is not None and r.returncode not in (0, -9)),
                     key=lambda r: r.exit_order)
    own = [r for r in errored if not r.error.get("peer_failure")]
    compiled = [r for r in own if r.error.get("kind") == "compile_error"]
    for group in (compiled, own, crashed, errored):
        if group:
            return group[0]
    return None


def _times(rounds: list[tuple[Timing, Timing]]) -> dict:
    """Timing fields of a correct candidate from interleaved (reference, candidate) rounds: medians and spread of
    the pooled per-call times (slowest rank), `speedup` = reference median / candidate median, its confidence
    interval (`speedup_interval`) and the status that interval gives (`records.speed_status`)."""
    from ..timing import summarize

    refs, sols = [r.slowest_ms for r, _ in rounds], [s.slowest_ms for _, s in rounds]
    r, s = summarize([v for x in refs for v in x]), summarize([v for x in sols for v in x])
    speedup = r.median_ms / s.median_ms if s.median_ms > 0 else math.inf
    low, high = speedup_interval(refs, sols)
    return {"status": speed_status(low, high), "ref_time_ms": r.median_ms, "sol_time_ms": s.median_ms,
            "ref_time_cv": r.cv, "sol_time_cv": s.cv, "ref_time_min_ms": r.min_ms, "sol_time_min_ms": s.min_ms,
            "ref_time_iqr_ms": r.iqr_ms, "sol_time_iqr_ms": s.iqr_ms, "speedup": speedup, "speedup_low": low,
            "speedup_high": high, "timing_rounds": len(rounds), "rotations": len(rounds[0][1].seeds)}


def speedup_interval(refs: list[list[float]], sols: list[list[float]], resamples: int = BOOTSTRAP,
                     confidence: float = CONFIDENCE, seed: int = 0) -> tuple[float, float]:
    """Percentile interval of the speedup (median reference time / median candidate time, ms per call) by a
    two-level bootstrap over interleaved rounds (`refs[k]`, `sols[k]`: round k's per-call times): each resample
    draws the rounds with replacement (drift between rounds widens the interval), then within each drawn round the
    reference's and the candidate's calls with replacement (noise between calls), and takes the ratio of the pooled
    medians. Deterministic (`seed`).

    >>> low, high = speedup_interval([[2.0, 2.1, 1.9]] * 3, [[1.0, 1.05, 0.95]] * 3)
    >>> 1.7 < low < 2.0 < high < 2.3
    True
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    refs_a, sols_a = [np.asarray(x, dtype=float) for x in refs], [np.asarray(x, dtype=float) for x in sols]
    n = len(refs_a)
    ratios = np.empty(resamples)
    for b in range(resamples):
        picked = rng.integers(0, n, n)
        ref = np.concatenate([rng.choice(refs_a[k], refs_a[k].size) for k in picked])
        sol = np.concatenate([rng.choice(sols_a[k], sols_a[k].size) for k in picked])
        mid = np.median(sol)
        ratios[b] = np.median(ref) / mid if mid > 0 else math.inf
    tail = (1 - confidence) / 2
    low, high = np.quantile(ratios, [tail, 1 - tail])
    return float(low), float(high)


def roofline_wall(fields: dict, roof_ms: float | None, bound: str | None, device: str, ceilings: str) -> dict:
    """`fields` of a correct candidate whose median time lies below the problem's roofline (`roof_ms`, the cost
    model's floor under the measuring GPU's ceilings): flag `beyond_roofline`, status `correct_slower` with no
    speedup, and a reason naming the bound; no time can beat the floor, so such a time is a defect of the timing
    or the check, not a speedup. Only on 'cuda': gloo timings on the CPU have nothing to do with GPU ceilings."""
    sol = fields.get("sol_time_ms")
    if device != "cuda" or roof_ms is None or not sol or fields.get("status") not in CORRECT or sol >= roof_ms:
        return fields
    flags = set(fields.get("flags") or ())
    flags.add("beyond_roofline")
    why = (f"beyond_roofline: median time {sol:.4g} ms is below the {bound or 'roofline'} bound of "
           f"{roof_ms:.4g} ms ({ceilings} ceilings); not called faster")
    return dict(fields, flags=flags, status="correct_slower", speedup=None, speedup_low=None, speedup_high=None,
                error=_join(fields.get("error"), why))


def _describe_failure(rank: RankState) -> str:
    if rank.error:
        e = rank.error
        return (f"rank {rank.rank}, phase {e.get('phase')}: {e.get('type')}: {e.get('message')}\n"
                f"{e.get('traceback', '')}")
    code = rank.returncode
    how = f"signal {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit code {code}"
    return f"rank {rank.rank} died ({how}) in phase {rank.phase} without a result\n{rank.log_tail}"


def _join(a: str | None, b: str) -> str:
    return f"{a}; {b}" if a else b


def by_problem(pairs: list[tuple[Problem, Candidate]]) -> list[tuple[Problem, list[Candidate]]]:
    """Pairs grouped by problem, problems in order of first appearance, candidates in their order."""
    groups: dict[str, tuple[Problem, list[Candidate]]] = {}
    for problem, candidate in pairs:
        groups.setdefault(problem.name, (problem, []))[1].append(candidate)
    return list(groups.values())


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
    zygote = Zygote()
    with interruptible(), closing(zygote):
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
