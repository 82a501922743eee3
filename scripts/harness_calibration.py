"""Calibrate `pkit eval`'s timing: its own cost per candidate and how far its speedup intervals can be believed.

Evaluates, through the harness as it ships (`pkit.harness.runner.evaluations`), a calibration problem written here
(each rank's row sums of a float32 matrix, summed over the ranks) against:
- its own reference, `--same` times: identical code, whose true speedup is 1;
- candidates that run the reference, wait for the device, then spin on the host, `--slowed` times each, made 10%
  and 25% slower than the reference by an amount known apart from the harness: in a process of their own the
  reference and the candidate are called alternately on the same inputs (`--truth-calls` times each, each call
  timed as the harness's timer does, in TRUTH_BLOCKS blocks that each draw their placement anew), the spin is set so that the candidate takes 1.1 and 1.25 times the
  reference's time there (`spin_for`: the wait and the spin's loop cost a little more than the spin's length), and
  the true speedup is what that process measures at that spin;
- with `--overhead-root DIR` (repeatable), each problem of DIR that runs at `--world-size` against its own
  reference `--overhead-runs` times, at the size `pkit eval` picks by default (`tiny` on the CPU, `large` on
  GPUs): the harness's cost on problems of the repository's own (tests/fixtures/problems_one_rank's 1 GiB input
  sets at `large`, tests/fixtures/problems' 01_sum).

Prints, and records through `pkit.results.record` under ROOT (`ROOT/<machine>/harness_calibration.csv` + `.json`
with provenance; one row per evaluation): the harness's cost per candidate (wall minus the timed calls of both
roles, and phase by phase from the records' `phase_s`; and the seconds from one record to the next, the
reference's start shared over its candidates), the fraction of identical-code intervals holding 1.0, the
statuses of the slowed candidates and whether their intervals hold the true ratio, and the reference's spread (cv:
standard deviation over mean; and its interquartile range over its median). `--report RECORD.json` prints that
summary again from a record (`recorded_summary`; docs/harness.md quotes it, tests/test_harness_calibration.py checks
the quote).

Sizes: `small` (1024 x 512, about 0.1-1 ms a call on a CPU) and `large` (12288 x 8192, 384 MiB: about 0.1 ms a
call on an H200). Usage:

    python scripts/harness_calibration.py ROOT                                    # CPU (gloo), world size 1
    python scripts/harness_calibration.py ROOT --device cuda --perf               # one GPU, size large
    python scripts/harness_calibration.py --report results/cpu/harness_calibration.json
"""
from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import statistics
import sys
import tempfile
import textwrap
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd

from pkit import results
from pkit.harness import problems, runner
from pkit.harness.records import first_line
from pkit.harness.solutions import Candidate
from pkit.harness.speedup import SLOW_CALL

PROBLEM = '''
"""Harness calibration problem: every rank's row sums of x (rows, cols) float32, summed over the ranks."""
import torch
import torch.distributed as dist

from pkit.problem_kit import cost as make_cost

META = {"name": "calibration_row_sums", "category": "collectives", "models": "harness calibration",
        "dtypes": ["float32"], "world_sizes": [1, 2, 4, 8],
        "description": "Each rank holds x (rows, cols); returns its row sums summed over the ranks (rows,)."}
SIZES = {"tiny": {"rows": 64, "cols": 32}, "small": {"rows": 1024, "cols": 512}, "large": {"rows": 12288, "cols": 8192}}


def make_inputs(rank, world_size, size, dtype, seed, device="cpu"):
    s = SIZES[size]
    gen = torch.Generator(device=device).manual_seed(int(seed) * 1_000_003 + int(rank))
    return (torch.randn((s["rows"], s["cols"]), generator=gen, device=device, dtype=torch.float32),)


def reference(x):
    out = x.sum(dim=1)
    dist.all_reduce(out)
    return out


def cost(world_size, size, dtype="float32"):
    s = SIZES[size]
    return make_cost(flops=s["rows"] * s["cols"], hbm_bytes=(s["rows"] * s["cols"] + s["rows"]) * 4,
                     link_bytes=2 * s["rows"] * 4 * (world_size - 1) // world_size)
'''

SLOWED = '''
"""The calibration problem's reference, then a host spin of DELAY_MS ms once the device is idle."""
import importlib.util
import time

import torch

_spec = importlib.util.spec_from_file_location("calibration_problem", {problem!r})
_problem = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_problem)

DELAY_MS = {delay_ms!r}


def solution(x):
    out = _problem.reference(x)
    if x.is_cuda:
        torch.cuda.synchronize()
    end = time.perf_counter() + DELAY_MS / 1e3
    while time.perf_counter() < end:
        pass
    return out
'''

CACHE_BYTES = 64 << 20
"""Input sets the true speedup's measurement rotates through: at least this many bytes (up to 32 sets)."""
TRUTH_BLOCKS = 10
"""Blocks the true speedup's calls are split into. Each builds its input sets anew behind a gap of random size and,
on a GPU, launches its calls from a core drawn at random (pkit.harness.placement), as the harness does for each
window: one placement for every call would carry its own few percent into the truth, which the harness's
intervals, drawing placements anew per window, are not meant to hold."""

SLOWDOWNS = (0.10, 0.25)
"""How much slower the slowed candidates are: each is timed apart at (1 + fraction) times the reference's median."""

TUNING_STEPS = 3
"""Most times a slowed candidate's spin is corrected by what its time measured apart missed the target by."""
TUNING_TOLERANCE = 0.02
"""A spin is kept once the candidate's time measured apart lies within this share of its target."""


def spin_for(fraction: float, ref_ms: float, measure) -> tuple[float, float]:
    """(spin in ms, true speedup) of a candidate made `fraction` slower than the reference. `measure(spin_ms)` gives
    (the reference's median ms, the candidate's median ms) measured apart; the spin starts at `fraction` of the
    reference's `ref_ms` and, until the candidate's time lies within TUNING_TOLERANCE of (1 + fraction) times the
    reference's (at most TUNING_STEPS times), is corrected by what it missed that by (waiting for the device and the
    spin's own loop cost a little more than the spin, and one measurement on a busy CPU can stray); the true
    speedup is the one measured at the spin kept.

    >>> spin_for(0.1, 1.0, lambda spin: (1.0, 1.0 + 0.03 + spin))  # the wait costs 0.03 ms: the spin is 0.07 ms
    (0.07, 0.9090909090909091)
    """
    spin, target = fraction * ref_ms, 1 + fraction
    for step in range(TUNING_STEPS + 1):
        ref, candidate = measure(spin)
        if abs(candidate / ref - target) <= TUNING_TOLERANCE * target or step == TUNING_STEPS:
            return spin, ref / candidate
        spin = round(max(0.0, spin - (candidate - target * ref)), 9)


def _alternate(problem_file: str, candidate_file: str, size: str, device: str, calls: int,
               fraction: float, ref_ms: float) -> tuple[float, float]:
    """In a process of its own: a one-rank process group, then the reference and the candidate's `solution` called
    alternately (who goes first swapped every call) on input sets rotated past the caches, each call timed by
    `pkit.harness.timer.timed_call`, in TRUTH_BLOCKS blocks of calls that each draw their placement anew, for each
    spin `spin_for` tries (the candidate's DELAY_MS); (spin ms, the reference's median time over the candidate's at
    that spin, both pooled over the blocks)."""
    import torch
    import torch.distributed as dist

    from pkit.harness import timer
    from pkit.harness.placement import own_pages_per_set, placed
    from pkit.harness.problem import load_module

    if device == "cpu":
        torch.set_num_threads(1)  # as the harness's CPU workers run
        own_pages_per_set()
    dist.init_process_group("nccl" if device == "cuda" else "gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        problem = load_module(Path(problem_file), "calibration_problem")
        candidate = load_module(Path(candidate_file), "calibration_candidate")
        where = torch.device("cuda", 0) if device == "cuda" else torch.device("cpu")
        cores = sorted(os.sched_getaffinity(0))
        nbytes = timer.input_bytes(problem.make_inputs(0, 1, size, "float32", 0, device=where))
        count = max(timer.l2_rotations(nbytes, where), min(32, -(-CACHE_BYTES // nbytes)))  # as the harness's sets

        def measure(spin_ms: float) -> tuple[float, float]:
            candidate.DELAY_MS = spin_ms
            roles = [(problem.reference, []), (candidate.solution, [])]
            for block in range(TRUTH_BLOCKS):
                sets = placed(lambda: [problem.make_inputs(0, 1, size, "float32", seed, device=where)
                                       for seed in range(count)], where, cores)
                for fn, _ in roles * 3 if block == 0 else ():  # warm-up
                    timer.timed_call(fn, sets[0], where, 1)
                for i in range(-(-calls // TRUTH_BLOCKS)):
                    for fn, times in (roles if i % 2 == 0 else roles[::-1]):
                        times.append(timer.timed_call(fn, sets[i % len(sets)], where, 1)[1])
                del sets
            return statistics.median(roles[0][1]), statistics.median(roles[1][1])

        return spin_for(fraction, ref_ms, measure)
    finally:
        dist.destroy_process_group()


def measured_spin(problem_file: Path, candidate_file: Path, size: str, device: str, calls: int, fraction: float,
                  ref_ms: float) -> tuple[float, float]:
    """(spin ms, true speedup) of the slowed candidate `fraction` slower than the reference, measured apart from
    the harness (`_alternate`, in a spawned process)."""
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(_alternate, (str(problem_file), str(candidate_file), size, device, calls,
                                       fraction, ref_ms))


def evaluate(candidates: list[tuple[str, object, Candidate, float, float]], options: runner.EvalOptions
             ) -> list[dict]:
    """One row per (kind, problem, candidate, spin ms, true speedup): its record's verdict, times and phases, and
    `elapsed_s`, the seconds since the record before it (for the first, since the evaluations began: its
    reference's start included)."""
    rows = []
    stream = runner.evaluations([(problem, c) for _, problem, c, _, _ in candidates], options, log=lambda line: None)
    last = time.monotonic()
    for (kind, _, _, spin_ms, true), record in zip(candidates, stream):
        now, last = last, time.monotonic()
        rows.append(row_of(kind, record, spin_ms, true, elapsed_s=last - now))
        low, high = record["speedup_low"], record["speedup_high"]
        print(f"  {kind}: {record['status']} {record['speedup'] or 0:.3f}x [{low or 0:.3f}, {high or 0:.3f}]"
              f" (true {true or 0:.3f}), {record['timing_rounds']} rounds, {record['wall_s']:.1f} s",
              file=sys.stderr, flush=True)
    return rows


def row_of(kind: str, record: dict, spin_ms: float, true: float | None, elapsed_s: float) -> dict:
    """The row of one evaluation's record."""
    phases = record.get("phase_s") or {}
    timed = phases.get("parent: timed calls")
    ref_ms = record["ref_time_ms"]
    low, high = record["speedup_low"], record["speedup_high"]
    return {"kind": kind, "problem": record["problem"], "size": record["size"], "spin_ms": spin_ms,
            "true_speedup": true, "spin_speedup": ref_ms / (ref_ms + spin_ms) if ref_ms else None,
            "status": record["status"], "error": first_line(record["error"]) or None, "speedup": record["speedup"],
            "speedup_low": low, "speedup_high": high,
            "holds_true": None if low is None or true is None else low <= true <= high,
            "timing_rounds": record["timing_rounds"], "ref_time_ms": ref_ms, "sol_time_ms": record["sol_time_ms"],
            "ref_time_cv": record["ref_time_cv"], "sol_time_cv": record["sol_time_cv"],
            "ref_time_cv_rounds": record.get("ref_time_cv_rounds"),
            "sol_time_cv_rounds": record.get("sol_time_cv_rounds"),
            "ref_time_iqr_ms": record["ref_time_iqr_ms"], "sol_time_iqr_ms": record["sol_time_iqr_ms"],
            "ref_time_max_ms": record.get("ref_time_max_ms"), "sol_time_max_ms": record.get("sol_time_max_ms"),
            "ref_time_slow_calls": record.get("ref_time_slow_calls"),
            "ref_time_cv_calm": record.get("ref_time_cv_calm"),
            "wall_s": record["wall_s"], "timed_calls_s": timed,
            "overhead_s": None if timed is None else record["wall_s"] - timed, "elapsed_s": elapsed_s,
            **{f"phase: {name}": seconds for name, seconds in phases.items()}}


def summary(frame: pd.DataFrame) -> dict:
    """What the rows say: the harness's cost per candidate (medians, s), coverage and verdicts per kind."""
    out = {"overhead_s_median": float(frame["overhead_s"].median()),
           "overhead_s_max": float(frame["overhead_s"].max()),
           "wall_s_median": float(frame["wall_s"].median()),
           "phases_s_median": {c.removeprefix("phase: "): round(float(frame[c].median()), 3)
                               for c in frame.columns if c.startswith("phase: ") and frame[c].notna().any()}}
    for kind, rows in frame.groupby("kind", sort=False):
        out[kind] = {"n": len(rows), "statuses": dict(sorted(rows["status"].value_counts().to_dict().items())),
                     "interval_holds_true": float(rows["holds_true"].dropna().astype(bool).mean()),
                     "true_speedup_median": float(rows["true_speedup"].median()),
                     "spin_speedup_median": float(rows["spin_speedup"].median()),
                     "speedup_median": float(rows["speedup"].median()),
                     "rounds_median": float(rows["timing_rounds"].median()),
                     "rounds_max": int(rows["timing_rounds"].max()),
                     "ref_time_ms_median": float(rows["ref_time_ms"].median()),
                     "ref_time_cv_median": float(rows["ref_time_cv"].median()),
                     "ref_time_iqr_over_median": float((rows["ref_time_iqr_ms"] / rows["ref_time_ms"]).median()),
                     "overhead_s_median": float(rows["overhead_s"].median()),
                     "overhead_s_max": float(rows["overhead_s"].max()),
                     "wall_s_median": float(rows["wall_s"].median()),
                     "elapsed_s_mean": float(rows["elapsed_s"].mean()),
                     "size": str(rows["size"].iloc[0])}
        within = pd.to_numeric(rows["ref_time_cv_rounds"])
        if within.notna().any():  # records of an older harness lack it
            out[kind]["ref_time_cv_rounds_median"] = float(within.median())
        slowest = pd.to_numeric(rows["ref_time_max_ms"])
        if slowest.notna().any():  # likewise
            ratio = slowest / rows["ref_time_ms"]
            out[kind]["ref_time_max_over_median"] = float(ratio.median())
            out[kind]["slow_call_share"] = float((ratio > SLOW_CALL).mean())
            calm = rows["ref_time_cv"][ratio <= SLOW_CALL]
            if len(calm):
                out[kind]["ref_time_cv_median_calm"] = float(calm.median())
        if "ref_time_cv_calm" in rows and rows["ref_time_cv_calm"].notna().any():  # likewise
            out[kind]["ref_slow_calls_median"] = float(pd.to_numeric(rows["ref_time_slow_calls"]).median())
            out[kind]["ref_time_cv_calm_median"] = float(pd.to_numeric(rows["ref_time_cv_calm"]).median())
    return out


def recorded_summary(path: Path, recorded: dict) -> dict:
    """The summary of the record at `path` (its JSON, `recorded`): from its rows (the CSV beside it) where they carry
    the slowest call, so a record gets what this script says of such rows now; else the summary it was recorded with."""
    rows = path.with_suffix(".csv")
    frame = pd.read_csv(rows) if rows.exists() else None
    return summary(frame) if frame is not None and "ref_time_max_ms" in frame else recorded["parameters"]["summary"]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", type=Path, nargs="?",
                        help="results root: writes ROOT/<machine>/harness_calibration.{csv,json}")
    parser.add_argument("--report", type=Path, default=None, metavar="RECORD.json",
                        help="print the summary of a recorded calibration and exit (runs nothing)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--world-size", type=int, default=1)
    parser.add_argument("--size", choices=("tiny", "small", "large"), default=None,
                        help="default: small on the CPU, large on the GPU")
    parser.add_argument("--same", type=int, default=40, help="evaluations of the reference against itself")
    parser.add_argument("--slowed", type=int, default=8, help="evaluations of each slowed candidate")
    parser.add_argument("--overhead-root", type=Path, action="append", default=[], metavar="DIR",
                        help="a problems root whose problems' references are evaluated against themselves too")
    parser.add_argument("--overhead-runs", type=int, default=3, help="evaluations of each --overhead-root problem")
    parser.add_argument("--perf", action="store_true", help="full timing (--warmup, --iters), as pkit eval --perf")
    parser.add_argument("--warmup", type=int, default=25)
    parser.add_argument("--iters", type=int, default=100)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--truth-calls", type=int, default=1000,
                        help="calls of each role when a slowed candidate's true speedup is measured")
    args = parser.parse_args(argv)
    if (args.root is None) == (args.report is None):
        parser.error("expected ROOT (to measure) or --report RECORD.json (to print a record), one of them")
    for name in ("same", "slowed", "overhead_runs"):
        if getattr(args, name) < 0:
            parser.error(f"--{name.replace('_', '-')}: expected a count of 0 or more, got {getattr(args, name)}")
    if args.slowed and not args.same:
        parser.error("--slowed: expected --same of 1 or more with it (a slowed candidate's spin is set from identical "
                     "code's reference time), or --slowed 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.report is not None:
        recorded = json.loads(args.report.read_text())
        print(report(recorded_summary(args.report, recorded), recorded))
        return 0
    size = args.size or ("large" if args.device == "cuda" else "small")
    options = runner.EvalOptions(world_size=args.world_size, size=size, device=args.device, trials=1,
                                 perf=args.perf, warmup=args.warmup, iters=args.iters, timeout_s=args.timeout)
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="pkit-calibration-") as tmp:
        rows = calibrate(Path(tmp), args, options)
    rows += overhead_rows(args.overhead_root, args.overhead_runs, replace(options, size="auto"))
    frame = pd.DataFrame(rows)
    said = summary(frame)
    parameters = {"device": args.device, "world_size": args.world_size, "size": size, "perf": args.perf,
                  "warmup": args.warmup, "iters": args.iters, "same": args.same, "slowed": args.slowed,
                  "slowdowns": list(SLOWDOWNS), "truth_calls": args.truth_calls, "tuning_steps": TUNING_STEPS,
                  "tuning_tolerance": TUNING_TOLERANCE,
                  "overhead_roots": [str(r) for r in args.overhead_root], "overhead_runs": args.overhead_runs,
                  "minutes": round((time.monotonic() - began) / 60, 2),
                  "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
                  "summary": said}
    recorded = results.record("harness_calibration", frame, parameters, root=args.root)
    print(report(said, recorded.provenance))
    print(f"→ {recorded.csv_path} (+ .json)")
    return 0


def calibrate(tmp: Path, args: argparse.Namespace, options: runner.EvalOptions) -> list[dict]:
    """The rows of the calibration problem (written under `tmp`): identical code, then the slowed candidates (none
    with --same 0: the harness's cost on --overhead-root problems alone)."""
    if not args.same:
        return []
    folder = tmp / "01_calibration"
    folder.mkdir()
    (folder / "problem.py").write_text(textwrap.dedent(PROBLEM).lstrip())
    problem = problems.discover(tmp)[0]
    own = runner.reference_candidate(problem)
    print(f"{args.same} evaluations of identical code ({options.size}, {args.device}, world size {args.world_size})",
          file=sys.stderr)
    rows = evaluate([("same", problem, own, 0.0, 1.0)] * args.same, options)
    ref_ms = statistics.median(r["ref_time_ms"] for r in rows if r["ref_time_ms"])
    slowed = []
    for fraction in SLOWDOWNS:
        path = folder / f"slowed_{round(fraction * 100)}.py"
        source = textwrap.dedent(SLOWED).lstrip()
        path.write_text(source.format(delay_ms=fraction * ref_ms, problem=str(folder / "problem.py")))
        spin_ms, true = measured_spin(folder / "problem.py", path, options.size, args.device, args.truth_calls,
                                      fraction, ref_ms)
        path.write_text(source.format(delay_ms=spin_ms, problem=str(folder / "problem.py")))
        candidate = Candidate(path, f"01_calibration/{path.name}", problem.name)
        slowed += [(f"slowed {round(fraction * 100)}%", problem, candidate, spin_ms, true)] * args.slowed
    print(f"{len(slowed)} evaluations of slowed candidates (reference median {ref_ms:.4g} ms)", file=sys.stderr)
    return rows + evaluate(slowed, options)


def overhead_rows(roots: list[Path], runs: int, options: runner.EvalOptions) -> list[dict]:
    """The rows of each problem under `roots` that runs at the options' world size, its reference against itself
    `runs` times (kind 'overhead <problem>')."""
    pairs = []
    for root in roots:
        for problem in problems.discover(root):
            if runner.unsupported(problem, options) is None:
                pairs += [(f"overhead {problem.name}", problem, runner.reference_candidate(problem), 0.0, 1.0)] * runs
    if pairs:
        print(f"{len(pairs)} evaluations of the references of {', '.join(map(str, roots))}", file=sys.stderr)
    return evaluate(pairs, options) if pairs else []


def report(said: dict, provenance: dict) -> str:
    """The summary in a few lines, as docs/harness.md quotes it (what a record's summary lacks, an older script's,
    is left out)."""
    lines = [f"{provenance['utc_time'][:10]}, {results.describe(provenance)}",
             f"harness cost per candidate (wall - timed calls): median {said['overhead_s_median']:.2f} s "
             + (f"(max {said['overhead_s_max']:.2f} s) " if "overhead_s_max" in said else "")
             + f"of {said['wall_s_median']:.2f} s wall; median phases (s): "
             + ", ".join(f"{k} {v:g}" for k, v in sorted(said["phases_s_median"].items(),
                                                         key=lambda kv: (-kv[1], kv[0])))]
    order = ("same", "slowed", "overhead")  # then by name: a record's JSON keeps its keys sorted
    kinds = sorted((k for k in said if isinstance(said[k], dict) and "n" in said[k]),
                   key=lambda k: (next((i for i, w in enumerate(order) if k.startswith(w)), len(order)), k))
    for kind in kinds:
        k = {name: "none" if isinstance(v, float) and math.isnan(v) else v for name, v in said[kind].items()}
        iqr, within = k.get("ref_time_iqr_over_median"), k.get("ref_time_cv_rounds_median")
        slowest, calm = k.get("ref_time_max_over_median"), k.get("ref_time_cv_median_calm")
        spread = f"reference {k['ref_time_ms_median']:.4g} ms at cv {k['ref_time_cv_median']:.2f}" + (
            "" if within is None else f" ({_number(within, 2)} within a round)") + (
            "" if iqr is None else f", IQR {iqr:.3f} of the median") + (
            "" if slowest is None else f", slowest call {slowest:.2f} times the median") + (
            "" if "slow_call_share" not in k else f"; a call over {SLOW_CALL:g} times the median in "
            f"{_share(k['slow_call_share'])} of evaluations"
            + ("" if calm is None else f", the others at cv {calm:.2f}")) + (
            "" if "ref_time_cv_calm_median" not in k else f"; per evaluation {k['ref_slow_calls_median']:g} such "
            f"calls (median), the rest at cv {k['ref_time_cv_calm_median']:.3f}")
        if kind.startswith("overhead "):
            lines.append(f"{kind} ({k['size']}): n={k['n']}, statuses {k['statuses']}, cost median "
                         f"{k['overhead_s_median']:.2f} s (max {k['overhead_s_max']:.2f} s) of "
                         f"{k['wall_s_median']:.2f} s wall, {k['elapsed_s_mean']:.2f} s a candidate with the "
                         f"reference's start; interval holds 1.0 in {_share(k['interval_holds_true'])}; median "
                         f"speedup {_number(k['speedup_median'])}, "
                         f"rounds median {k['rounds_median']:g} (max {k['rounds_max']}); {spread}")
            continue
        lines.append(f"{kind}: n={k['n']}, statuses {k['statuses']}, interval holds the true speedup "
                     f"({k['true_speedup_median']:.3f} measured apart; {k['spin_speedup_median']:.3f} by the "
                     f"spin alone) in {_share(k['interval_holds_true'])}; median speedup "
                     f"{_number(k['speedup_median'])}, rounds median {k['rounds_median']:g} (max {k['rounds_max']}); "
                     + spread)
    return "\n".join(lines)


def _share(value) -> str:
    """A fraction as a percentage ('none' stays: no evaluation had an interval)."""
    return value if isinstance(value, str) else f"{value:.0%}"


def _number(value, digits: int = 3) -> str:
    return value if isinstance(value, str) else f"{value:.{digits}f}"


if __name__ == "__main__":
    sys.exit(main())
