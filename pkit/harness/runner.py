"""Evaluate candidates: one fresh set of worker processes per candidate, one JSONL record each.

`evaluate_one` runs a candidate (pkit.harness.launch) and turns what the ranks left behind into a record
(pkit.harness.records); `evaluate` loops over candidates, writing each record as soon as it is known, so
a crash, hang or wedged GPU context of one candidate costs only that candidate.

Example:
    >>> from pkit.harness import problems, runner, solutions                 # doctest: +SKIP
    >>> probs = problems.discover()                                          # doctest: +SKIP
    >>> cand = runner.reference_candidate(probs[0])                          # doctest: +SKIP
    >>> runner.evaluate_one(probs[0], cand, runner.EvalOptions(trials=2))["status"]  # doctest: +SKIP
    'correct_slower'
"""
from __future__ import annotations

import hashlib
import math
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from .launch import RankOutcome, RunOutcome, run_workers
from .problems import Problem
from .records import excerpt, new_record, speed_status, write_line
from .solutions import Candidate

QUICK_TIMING = {"warmup": 2, "iters": 10}
"""Timing without --perf: just enough to call a correct candidate faster or slower."""

REFERENCE_PHASES = ("load_problem", "inputs", "reference", "timing_reference")


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

    def validate(self) -> None:
        """Raise ValueError naming the first option out of range."""
        rules = (("world_size", self.world_size >= 1, ">= 1"), ("trials", self.trials >= 1, ">= 1"),
                 ("warmup", self.warmup >= 0, ">= 0"), ("iters", self.iters >= 1, ">= 1"),
                 ("timeout_s", self.timeout_s > 0, "> 0"), ("device", self.device in ("auto", "cpu", "cuda"),
                                                            "one of auto, cpu, cuda"))
        for name, ok, expected in rules:
            if not ok:
                raise ValueError(f"{name}: expected {expected}, got {getattr(self, name)!r}")


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
    """(roofline time in ms, bound) of the problem's cost model under a GPU's datasheet; (None, None) without one."""
    from ..roofline import Ceilings, floor

    cost = problem.cost(world_size, size, dtype)
    if cost is None:
        return None, None
    f = floor(cost, Ceilings.datasheet(ceilings))
    return f.time_s * 1e3, f.bound


def evaluate_one(problem: Problem, candidate: Candidate, options: EvalOptions, *, device: str | None = None,
                 provenance: dict | None = None) -> dict:
    """Run one candidate on `options.world_size` fresh worker processes; returns its record."""
    device = device or pick_device(options.device, options.world_size)
    size = problem.resolve_size(options.size, device)
    dtype = problem_dtype(problem, options.dtype)
    atol, rtol = (options.atol, options.rtol)
    if problem.tolerance is not None:
        atol = problem.tolerance[0] if atol is None else atol
        rtol = problem.tolerance[1] if rtol is None else rtol
    timing = {"warmup": options.warmup, "iters": options.iters} if options.perf else dict(QUICK_TIMING)
    spec = {"source": problem.source, "candidate": {"path": str(candidate.path), "function": candidate.function},
            "world_size": options.world_size, "device": device, "size": size, "dtype": dtype,
            "trials": options.trials, "seed": options.seed, "atol": atol, "rtol": rtol, "timing": timing,
            "pg_timeout_s": options.timeout_s + 60}
    outcome = run_workers(spec, timeout_s=options.timeout_s)
    roof_ms, bound = roofline_ms(problem, options.world_size, size, dtype, options.ceilings)
    fields = _judge(outcome, options.timeout_s)
    if fields.get("sol_time_ms") and roof_ms is not None:
        fields["roofline_fraction"] = roof_ms / fields["sol_time_ms"]
    prov = dict(provenance or {}, solution_sha256=_sha256(candidate.path), seed=options.seed)
    return new_record(
        problem=problem.name, category=problem.category, solution=candidate.relpath, model=candidate.model,
        sample=candidate.sample, backend=candidate.backend, world_size=options.world_size, size=size, dtype=dtype,
        device=device, roofline_time_ms=roof_ms, roofline_bound=bound, seed=options.seed,
        timing="full" if options.perf else "quick", wall_s=round(outcome.wall_s, 3), provenance=prov, **fields)


def _judge(outcome: RunOutcome, timeout_s: float) -> dict:
    """Status, error excerpt, errors, per-rank checks, flags and times from what the ranks left behind."""
    ranks = outcome.ranks
    trials = [r.result["trials"] if r.result else [] for r in ranks]
    checks = [t["check"] for ts in trials for t in ts]
    last = [ts[-1]["check"] for ts in trials if ts]
    flags = {f for c in checks for f in c["flags"]}
    fields = {
        "per_rank": [{k: c[k] for k in ("rank", "ok", "max_abs_err", "max_rel_err", "mismatch_fraction",
                                        "first_bad_index", "note")} for c in last],
        "max_abs_err": max((c["max_abs_err"] for c in checks if c["max_abs_err"] is not None), default=None),
        "max_rel_err": max((c["max_rel_err"] for c in checks if c["max_rel_err"] is not None), default=None),
        "trials": min((len(ts) for ts in trials), default=0),
        "trials_passed": min((sum(t["check"]["ok"] for t in ts) for ts in trials), default=0),
    }
    first = _root_cause(ranks)
    if first is not None:
        status = "compile_error" if first.result and first.result["error"]["kind"] == "compile_error" else "runtime_error"
        if first.result and first.result["error"]["phase"] in REFERENCE_PHASES:
            flags.add("reference_error")
        return dict(fields, status=status, error=excerpt(_describe_failure(first), head=1000), flags=flags)
    if outcome.timed_out:
        where = "; ".join(f"rank {r.rank} in phase {r.phase or 'startup'}" for r in ranks)
        tails = "\n".join(f"--- rank {r.rank} output ---\n{r.log_tail[-600:]}" for r in ranks if r.log_tail.strip())
        return dict(fields, status="timeout", flags=flags,
                    error=excerpt(f"no result within {timeout_s:g} s; all ranks killed ({where})\n{tails}", head=400))
    missing = [r for r in ranks if r.result is None]
    if missing:
        return dict(fields, status="runtime_error", flags=flags, error=excerpt(
            f"rank {missing[0].rank} exited (code {missing[0].returncode}) without a result\n{missing[0].log_tail}"))
    if not all(r.result["passed"] for r in ranks):
        return dict(fields, status="wrong_result", flags=flags,
                    error=excerpt("; ".join(f"rank {c['rank']}: {c['note']}" for c in last if c["note"])))
    return dict(fields, error=None, flags=flags, **_times(ranks[0].result["timing"]))


def _root_cause(ranks: list[RankOutcome]) -> RankOutcome | None:
    """The rank whose failure explains the run, or None when no rank failed.

    In order: a compile error; the earliest error of the rank's own (not the echo of a peer's death, such
    as gloo's 'Connection closed by peer'); the first rank seen to die without a result; the earliest echo.
    """
    errored = sorted((r for r in ranks if r.result and r.result["error"]), key=lambda r: r.result["error"]["time"])
    crashed = sorted((r for r in ranks if r.result is None and r.exit_order is not None and r.returncode != 0),
                     key=lambda r: r.exit_order)
    own = [r for r in errored if not r.result["error"]["peer_failure"]]
    compiled = [r for r in own if r.result["error"]["kind"] == "compile_error"]
    for group in (compiled, own, crashed, errored):
        if group:
            return group[0]
    return None


def _times(timing: dict) -> dict:
    from ..timing import summarize

    ref, sol = summarize(timing["ref_ms"]), summarize(timing["sol_ms"])
    speedup = ref.median_ms / sol.median_ms if sol.median_ms > 0 else math.inf
    return {"status": speed_status(speedup), "ref_time_ms": ref.median_ms, "sol_time_ms": sol.median_ms,
            "ref_time_cv": ref.cv, "sol_time_cv": sol.cv, "ref_time_min_ms": ref.min_ms, "sol_time_min_ms": sol.min_ms,
            "ref_time_iqr_ms": ref.iqr_ms, "sol_time_iqr_ms": sol.iqr_ms, "speedup": speedup,
            "rotations": timing["rotations"]}


def _describe_failure(rank: RankOutcome) -> str:
    if rank.result and rank.result["error"]:
        e = rank.result["error"]
        return f"rank {rank.rank}, phase {e['phase']}: {e['type']}: {e['message']}\n{e['traceback']}"
    code = rank.returncode
    how = f"signal {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit code {code}"
    return f"rank {rank.rank} died ({how}) in phase {rank.phase or 'startup'} without a result\n{rank.log_tail}"


def _sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def evaluate(pairs: Iterable[tuple[Problem, Candidate]], options: EvalOptions, out_path: str | Path, *,
             provenance: dict | None = None, log: Callable[[str], None] | None = None) -> list[dict]:
    """Evaluate every (problem, candidate) pair in turn, writing one JSONL line each to `out_path`.

    Pairs whose problem cannot run under `options` (see `unsupported`) are skipped with a log line.
    """
    options.validate()
    log = log or (lambda line: print(line, file=sys.stderr, flush=True))
    device = pick_device(options.device, options.world_size)
    pairs = list(pairs)
    for problem in {p.name: p for p, _ in pairs}.values():
        reason = unsupported(problem, options)
        if reason:
            log(f"skipping {problem.name}: {reason}")
    pairs = [(p, c) for p, c in pairs if not unsupported(p, options)]
    records = []
    Path(out_path).parent.mkdir(parents=True, exist_ok=True)
    with open(out_path, "w", encoding="utf-8") as out:
        for i, (problem, candidate) in enumerate(pairs, 1):
            record = evaluate_one(problem, candidate, options, device=device, provenance=provenance)
            write_line(out, record)
            records.append(record)
            speed = f" {record['speedup']:.2f}x" if record["speedup"] is not None else ""
            log(f"[{i}/{len(pairs)}] {problem.name} {candidate.relpath}: {record['status']}{speed}")
    return records
