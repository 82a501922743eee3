"""The compute half of the overlap schedules: pkit's GEMM (pkit.ops.gemm) against cuBLAS on every GEMM shape the
schedules and the fused problems run, in bf16 and in FP8, and the sweep of plans behind `pkit.ops.gemm_plans.plan`.

The shapes come from the registries, never from a hand-kept list: each overlap pattern's per-rank GEMM over the
overlap sweep's sizes (AG+GEMM's over all M rows and over one chunk's rows, as chunked schedules launch it;
GEMM+RS's and GEMM+AR's over each K slice), and each fused problem's (its META["pattern"]) per-rank GEMM at size
`large` for every world size it runs at. Inputs are fresh random data; small shapes rotate input sets past the L2.

Example:
    >>> shapes = schedule_shapes()
    >>> (8192, 256, 8192) in shapes, (1024, 256, 8192) in shapes, (8192, 8192, 256) in shapes
    (True, True, True)
    >>> (4096, 28672 // 8, 8192) in problem_shapes()     # all-gather + GEMM's per-rank GEMM at W = 8
    True
    >>> len(study_shapes()) == len(set(study_shapes()))
    True
"""
from __future__ import annotations

from dataclasses import astuple, fields
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from ...ops.gemm import ITEMSIZES, gemm
from ...ops.gemm_plans import BLOCK_M, RULE_FILE, Plan, PlanRule, cheapest, k_slices, plan, plan_options
from ...ops.overlap_patterns import PATTERNS
from ...timing import BenchResult, bench, rotations_past_l2
from ...tolerance import fp8_fast_accum_bound, fp8_scale_matches
from .checks import bf16_match
from .shapes import DEFAULT_N_LOCALS

ROUNDS = 4  # each shape's implementations alternate this many times


def reps_per_round(reps: int) -> int:
    """Timed calls per implementation and round when the study is measured at the overlap studies' `reps` (twice
    theirs: a GEMM is short beside a schedule)."""
    return 2 * reps


def calls_per_shape(reps: int) -> int:
    """Timed calls pooled per implementation and shape when the study is measured at the overlap studies' `reps`.

    >>> calls_per_shape(10)
    80
    """
    return ROUNDS * reps_per_round(reps)


IMPLEMENTATIONS = {"bfloat16": ("pkit_gemm", "pkit_gemm_flags", "cublas"), "float8_e4m3fn": ("pkit_gemm", "cublas")}
"""What each dtype's study times: pkit's GEMM, pkit's GEMM waiting on ready flags that are all set already (as the
overlap schedules run it), and cuBLAS (torch.matmul; FP8: torch._scaled_mm, cuBLASLt, fast accumulation as
pkit's)."""
STUDY_IMPLEMENTATIONS = tuple(dict.fromkeys(name for names in IMPLEMENTATIONS.values() for name in names))
"""Every implementation name the study records."""
SPLIT_GRID = (1, 2, 3, 4, 6, 8, 12, 16)  # the split-K counts the plan sweep times


def schedule_shapes(sizes: Sequence[int] = DEFAULT_N_LOCALS, m: int = 8192, k: int = 8192, n: int = 8192,
                    chunk_rows: int | None = None) -> list[tuple[int, int, int]]:
    """(M, N, K) of one rank's GEMM in every overlap pattern (pkit.ops.overlap_patterns) over the sweep's sizes:
    a pattern whose weight is N-sharded runs M × N_local × K over all rows and over `chunk_rows` rows (default
    the schedules' chunk, pkit.ops.overlap.CHUNK_ROWS); a K-sharded one runs M × N × K_local."""
    if chunk_rows is None:
        from ...ops.overlap import CHUNK_ROWS as chunk_rows
    shapes = []
    for pattern in PATTERNS.values():
        for size in sizes:
            if pattern.sharded == "n":
                shapes += [(m, size, k), (chunk_rows, size, k)]
            else:
                shapes.append((m, n, size))
    return list(dict.fromkeys(shapes))


def problem_shapes(size: str = "large", root: Path | None = None) -> list[tuple[int, int, int]]:
    """(M, N, K) of one rank's GEMM in each problem that names its overlap pattern (META["pattern"]), at `size`
    for each of its world sizes: tokens × out_features/W × in_features where the weight is N-sharded,
    tokens × out_features × in_features/W where it is K-sharded."""
    from ...harness.problem import load_module
    from ...harness.problems import default_root

    shapes = []
    for path in sorted((Path(root) if root else default_root()).glob("*/problem.py")):
        module = load_module(path, f"pkit_problem_{path.parent.name}")
        pattern = module.META.get("pattern")
        if pattern is None or size not in module.SIZES:
            continue
        s = module.SIZES[size]
        for w in module.META["world_sizes"]:
            if PATTERNS[pattern].sharded == "n":
                shapes.append((s["tokens"], s["out_features"] // w, s["in_features"]))
            else:
                shapes.append((s["tokens"], s["out_features"], s["in_features"] // w))
    return list(dict.fromkeys(shapes))


def study_shapes() -> list[tuple[int, int, int]]:
    """The study's shapes: the schedules', then the problems' not among them."""
    return list(dict.fromkeys(schedule_shapes() + problem_shapes()))


class _Inputs:
    """Input sets of one shape and dtype on `device`: fresh random A (M × K), B (N × K), FP8's scales, a
    NaN-poisoned C, enough sets to rotate past the L2, and the float32 product of the first set."""

    def __init__(self, m: int, n: int, k: int, dtype: str, device: int, seed: int):
        import torch

        import pkit

        self.m, self.n, self.k, self.dtype, self.device = m, n, k, dtype, device
        gen = torch.Generator(device=f"cuda:{device}").manual_seed(seed)
        itemsize = ITEMSIZES[dtype]
        per_set = (m * k + n * k) * itemsize + m * n * 2
        count = rotations_past_l2(per_set, pkit.devices()[device].l2_bytes)
        self.sets = [self._draw(gen) for _ in range(count)]
        a, b, scale_a, scale_b, _ = self.sets[0]
        self.want = a.float() @ b.float().T * (1.0 if scale_a is None else float(scale_a * scale_b))

    def _draw(self, gen):
        import torch

        kw = dict(device=self.device, generator=gen)
        a = torch.randn(self.m, self.k, **kw)
        b = torch.randn(self.n, self.k, **kw)
        c = torch.full((self.m, self.n), float("nan"), device=self.device, dtype=torch.bfloat16)
        if self.dtype == "bfloat16":
            return a.bfloat16(), b.bfloat16(), None, None, c
        scales = 0.5 + torch.rand(2, **kw)
        return (a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn), scales[0:1].clone(), scales[1:2].clone(), c)


def _calls(inputs: _Inputs) -> dict:
    """Each implementation of the study for `inputs`' dtype, as a function of one input set."""
    import torch

    from ...gpus import torch_stream

    device = inputs.device
    rows_per_flag = 1024 if inputs.m % 1024 == 0 else BLOCK_M
    flags = torch.ones(-(-inputs.m // rows_per_flag), dtype=torch.int32, device=device)  # every row ready (epoch 1)

    def pkit_gemm(a, b, scale_a, scale_b, c):
        gemm(a, b, c, scale_a=scale_a, scale_b=scale_b)

    def pkit_gemm_flags(a, b, scale_a, scale_b, c):
        gemm(a, b, c, ready=flags.data_ptr(), epoch=1, rows_per_flag=rows_per_flag)

    def cublas(a, b, scale_a, scale_b, c):
        with torch_stream(device):
            if scale_a is None:
                torch.matmul(a, b.T, out=c)
            else:
                c.copy_(torch._scaled_mm(a, b.T, scale_a, scale_b, out_dtype=torch.bfloat16, use_fast_accum=True))

    every = {"pkit_gemm": pkit_gemm, "pkit_gemm_flags": pkit_gemm_flags, "cublas": cublas}
    return {name: every[name] for name in IMPLEMENTATIONS[inputs.dtype]}


def gemm_rates(shapes: Sequence[tuple[int, int, int]] | None = None, dtype: str = "bfloat16", device: int = 0,
               reps: int = 20, warmup: int = 5) -> pd.DataFrame:
    """pkit's GEMM against cuBLAS on the same inputs (`dtype` 'bfloat16' or 'float8_e4m3fn'; IMPLEMENTATIONS says
    which are timed) at each (M, N, K) of `shapes` (default `study_shapes()`), C = A · Bᵀ. Each is checked on a
    NaN-poisoned C first (`_check`), then timed in ROUNDS alternating rounds of `reps` calls rotating input sets past
    the L2, queued behind a held stream so that the host's launch path stays out (`pkit.bench(hide_launch=True)`:
    the GPU's time, as inside a schedule), the samples pooled, so a clock that drifts as the GPU warms weighs on all alike.

    Rows: implementation, dtype, m, n, k, block_n, splits, stages, cluster and alternate (pkit's plan; 0 and False
    for cuBLAS), time_median_us,
    time_min_us, time_max_us, cv, tflops, verified (within bf16 rounding of the float32 product), max_abs_err
    and ratio_to_cublas (TFLOP/s over cuBLAS's at the same shape).
    """
    if dtype not in IMPLEMENTATIONS:
        raise ValueError(f"dtype: expected one of {list(IMPLEMENTATIONS)}, got {dtype!r}")
    rows = [row for i, (m, n, k) in enumerate(tqdm(shapes or study_shapes(), desc=f"GEMM shapes ({dtype})",
                                                  leave=False))
            for row in _rates_of_shape(m, n, k, dtype, device, reps, warmup, seed=i)]
    frame = pd.DataFrame(rows)
    cublas = frame[frame["implementation"] == "cublas"].set_index(["m", "n", "k"])["tflops"]
    frame["ratio_to_cublas"] = frame["tflops"].to_numpy() / cublas.loc[
        list(zip(frame["m"], frame["n"], frame["k"]))].to_numpy()
    return frame


def _rates_of_shape(m: int, n: int, k: int, dtype: str, device: int, reps: int, warmup: int, seed: int) -> list[dict]:
    """gemm_rates' rows for one shape, but ratio_to_cublas."""
    import torch

    import pkit

    inputs = _Inputs(m, n, k, dtype, device, seed)
    calls = _calls(inputs)
    checks = {name: _check(inputs, call) for name, call in calls.items()}
    timings = _timed_in_rounds(calls, inputs, device, reps, warmup)
    chosen = plan(m, n, k, pkit.devices()[device].sms, ITEMSIZES[dtype])
    rows = []
    for name, (verified, err) in checks.items():
        timing = timings[name]
        ours = name.startswith("pkit")
        rows.append({"implementation": name, "dtype": dtype, "m": m, "n": n, "k": k,
                     "block_n": chosen.block_n if ours else 0, "splits": chosen.splits if ours else 0,
                     "stages": chosen.stages if ours else 0, "cluster": chosen.cluster if ours else 0,
                     "alternate": chosen.alternate if ours else False,
                     **timing.times_us(), "tflops": 2 * m * n * k / (timing.median_ms * 1e-3) / 1e12,
                     "verified": verified, "max_abs_err": err})
    del inputs
    torch.cuda.empty_cache()
    return rows


def _timed_in_rounds(calls: dict, inputs: _Inputs, device: int, reps: int, warmup: int) -> dict:
    """Each of `calls` (name → call on an input set) timed in ROUNDS rounds taking them in turn, `reps` calls a
    round on input sets rotating past the L2, queued behind a held stream; name → the pooled BenchResult."""
    samples = {name: [] for name in calls}
    for _ in range(ROUNDS):
        for name, call in calls.items():
            samples[name].append(bench(call, devices=[device], warmup=warmup, reps=reps, rotate=inputs.sets,
                                       hide_launch=True).samples_ms)
    return {name: BenchResult(np.concatenate(taken)) for name, taken in samples.items()}


def _check(inputs: _Inputs, call) -> tuple[bool, float]:
    """(`call` on the first input set gives a right C, its largest error against the float32 product); C is
    poisoned with NaN first, so a tile never written fails. bf16: within bf16 rounding of the float32 product.
    FP8: Hopper's FP8 MMA accumulates with fewer bits than fp32 (fast accumulation, as cuBLASLt's), so C is
    right when every element is within the accumulator's bound (`pkit.tolerance.fp8_fast_accum_bound`) and it
    follows the float32 product at slope 1 (`fp8_scale_matches`): a wrong scale, tile or K slice is off by far
    more."""
    import torch

    a, b, scale_a, scale_b, c = inputs.sets[0]
    c.fill_(float("nan"))
    call(a, b, scale_a, scale_b, c)
    torch.cuda.synchronize(inputs.device)
    if inputs.dtype == "bfloat16":
        return bf16_match(c, inputs.want, terms=inputs.k)
    err = (c.float() - inputs.want).abs()
    ok = bool(torch.isfinite(c).all()) and fp8_scale_matches(c, inputs.want) and bool(
        (err <= fp8_fast_accum_bound(a, b, float(scale_a * scale_b), inputs.want)).all())
    return ok, float(err.max())


def plan_sweep(shapes: Sequence[tuple[int, int, int]] | None = None, dtypes: Sequence[str] = tuple(IMPLEMENTATIONS),
               device: int = 0, reps: int = 10, warmup: int = 3) -> pd.DataFrame:
    """Every plan of pkit's GEMM (`pkit.ops.gemm_plans.plan_options` with splits from SPLIT_GRID: each kernel variant,
    split while the units stay few) at each shape and dtype, each checked against float32 and timed in ROUNDS
    rounds that take the plans in turn (`reps` calls a round, input sets rotating past the L2, the samples pooled, so
    a clock that drifts weighs on all plans alike): the measurements that say whether `pkit.ops.gemm_plans.plan` picks
    well.

    Rows: dtype, m, n, k, block_n, splits, stages, cluster, alternate, share_a, rows, split_tail, time_median_us,
    time_min_us, time_max_us, cv, tflops,
    verified,
    chosen (the plan `plan` picks), ratio_to_best (TFLOP/s over the best plan's at this shape and dtype).
    """
    rows = [row for dtype in dtypes
            for i, (m, n, k) in enumerate(tqdm(shapes or study_shapes(), desc=f"GEMM plans ({dtype})", leave=False))
            for row in _plans_of_shape(m, n, k, dtype, device, reps, warmup, seed=i)]
    frame = pd.DataFrame(rows)
    best = frame.groupby(["dtype", "m", "n", "k"])["tflops"].transform("max")
    frame["ratio_to_best"] = frame["tflops"] / best
    return frame


def _plans_of_shape(m: int, n: int, k: int, dtype: str, device: int, reps: int, warmup: int, seed: int) -> list[dict]:
    """plan_sweep's rows for one shape and dtype, but ratio_to_best."""
    import torch

    import pkit

    inputs = _Inputs(m, n, k, dtype, device, seed)
    sms = pkit.devices()[device].sms
    chosen = plan(m, n, k, sms, ITEMSIZES[dtype])
    calls = {how: lambda a, b, scale_a, scale_b, c, how=how: gemm(a, b, c, scale_a=scale_a, scale_b=scale_b, how=how)
             for how in plan_options(m, n, k, sms, ITEMSIZES[dtype], splits=SPLIT_GRID)}
    checks = {how: _check(inputs, call)[0] for how, call in calls.items()}
    timings = _timed_in_rounds(calls, inputs, device, reps, warmup)
    rows = []
    for how, verified in checks.items():
        timing = timings[how]
        rows.append({"dtype": dtype, "m": m, "n": n, "k": k, "block_n": how.block_n, "splits": how.splits,
                     "stages": how.stages, "cluster": how.cluster, "alternate": how.alternate, "share_a": how.share_a,
                     "rows": how.rows, "split_tail": how.split_tail, **timing.times_us(),
                     "tflops": 2 * m * n * k / (timing.median_ms * 1e-3) / 1e12,
                     "verified": verified, "chosen": how == chosen})
    del inputs
    torch.cuda.empty_cache()
    return rows


RULE_GRID = {"narrow_slice": np.arange(0.5, 1.01, 0.02), "unit_overhead": np.arange(0.0, 8.01, 0.5),
             "slim_slice": np.r_[1.0, np.arange(0.25, 1.01, 0.02)],
             "short_slice": np.r_[1.0, np.arange(0.3, 1.01, 0.02)],
             "split_overhead": np.arange(0.0, 6.01, 0.25), "shallow_slice": np.arange(1.0, 1.51, 0.02),
             "waiting_epilogue": np.arange(0.0, 8.01, 0.5), "paired_slice": np.r_[1.0, np.arange(0.7, 1.21, 0.02)],
             "shared_a_slice": np.r_[1.0, np.arange(0.7, 1.21, 0.02)],
             "alternate_overhead": np.r_[8.0, np.arange(0.0, 8.01, 0.5)],
             "tail_overhead": np.r_[np.inf, np.arange(0.0, 8.01, 0.5)]}
"""The values fit_plan_rule tries for each of PlanRule's constants; each's first is where every search starts (a
constant the sweep cannot tell stays there: 1.0 for paired_slice, shared_a_slice, slim_slice and short_slice,
8.0 for alternate_overhead and infinity for tail_overhead, so a sweep without pairs, 64-wide or 64-row tiles,
alternate tiles or split tails never favours them)."""
RULE_STARTS = 12  # fit_plan_rule's starting points beyond the grid's first values


def fit_plan_rule(frame: pd.DataFrame, sms: int, grid: dict | None = None) -> tuple[dict, float]:
    """PlanRule's constants (each from its values in `grid`, default RULE_GRID) whose choices do best on a recorded
    plan sweep (`plan_sweep`'s rows, measured on `sms` SMs): the greatest geometric mean over its shapes and dtypes
    of the chosen plan's rate over the best plan's, searched one constant at a time (each over all its values, the
    others held) until no change helps, from the first value of each and from RULE_STARTS other points drawn from
    the grid (a fixed seed). Returns (constants, that geometric mean).

    >>> frame = pd.DataFrame([{"dtype": "bfloat16", "m": 1024, "n": 512, "k": 512, "block_n": w, "splits": s,
    ...                        "stages": st, "tflops": t} for w, s, st, t in [(256, 1, 4, 500.0), (128, 1, 6, 700.0),
    ...                                                                       (128, 2, 6, 300.0)]])
    >>> rule, fit = fit_plan_rule(frame, sms=132, grid={"narrow_slice": [0.5, 0.9], "unit_overhead": [2.0],
    ...                                                 "split_overhead": [1.0, 3.0], "shallow_slice": [1.0],
    ...                                                 "waiting_epilogue": [0.0]})
    >>> rule["narrow_slice"], fit
    (0.5, 1.0)
    """
    grid = {name: [round(float(v), 4) for v in values] for name, values in (grid or RULE_GRID).items()}
    plans = [f.name for f in fields(Plan)]  # a plan's columns, in the order Plan(*key) takes them
    older = [("cluster", 1), ("alternate", False), ("share_a", False), ("rows", BLOCK_M), ("split_tail", False)]
    frame = frame.assign(**{c: v for c, v in older if c not in frame})  # columns older sweeps lack
    shapes = [(key, g.set_index(plans)["tflops"]) for key, g in frame.groupby(["dtype", "m", "n", "k"], sort=False)]

    def score(constants: dict) -> float:
        rule = PlanRule(**constants)
        total = 0.0
        for (dtype, m, n, k), rates in shapes:
            chosen = cheapest([Plan(*key) for key in rates.index], m, n, k_slices(k, ITEMSIZES[dtype]), sms, rule)
            total += np.log(rates[astuple(chosen)] / rates.max())
        return total

    def descend(start: dict) -> tuple[float, dict]:
        here, here_score, improved = start, score(start), True
        while improved:
            improved = False
            for name, values in grid.items():
                for value in values:
                    trial = {**here, name: value}
                    trial_score = score(trial)
                    if trial_score > here_score + 1e-12:
                        here, here_score, improved = trial, trial_score, True
        return here_score, here

    draw = np.random.default_rng(0)
    starts = [{name: values[0] for name, values in grid.items()}] + [
        {name: values[draw.integers(len(values))] for name, values in grid.items()} for _ in range(RULE_STARTS)]
    best_score, best = max((descend(start) for start in starts), key=lambda found: found[0])
    return best, round(float(np.exp(best_score / len(shapes))), 4)


def write_plan_rule(machine: str = "h200x1") -> Path:
    """Fit PlanRule to `machine`'s recorded plan sweep (results/<machine>/overlap_gemm_plans) and write it, with
    where it came from, to pkit.ops.gemm_plans.RULE_FILE, which `plan` reads."""
    import json

    from ... import results
    from ...hardware import GPUS

    sweep = results.load("overlap_gemm_plans", machine)
    gpu = sweep.provenance["gpus"][0]
    sms = next(g.sms for name, g in GPUS.items() if name in gpu)  # the datasheet's SMs of the GPU it ran on
    rule, fit = fit_plan_rule(sweep.frame, sms)
    RULE_FILE.write_text(json.dumps({"rule": rule, "geomean_chosen_over_best": fit, "sms": sms,
                                     "fitted_to": f"results/{machine}/overlap_gemm_plans",
                                     "measured_at_commit": sweep.provenance.get("pkit_commit"),
                                     "measured_utc": sweep.provenance.get("utc_time")}, indent=1) + "\n")
    return RULE_FILE


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] != ["fit"] or len(sys.argv) > 3:
        sys.exit("usage: python -m pkit.experiments.overlap.gemm fit [MACHINE]   (fits pkit.ops.gemm's plan rule "
                 "to results/MACHINE/overlap_gemm_plans; default h200x1)")
    print(write_plan_rule(*sys.argv[2:]).read_text())
