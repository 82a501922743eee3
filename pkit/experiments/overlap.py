"""Overlap study: the tensor-parallel GEMM schedules of pkit.ops.overlap timed side by side over shape sweeps,
each checked against float32, beside PyTorch's (torchrun), with the communication-aware roofline per point.

- `gemm_rates`: pkit's GEMM against cuBLAS (one GPU), the gate of the fused schedules;
- `sweep` (AG+GEMM over N_local), `sweep_partial` (GEMM+RS or GEMM+AR over K_local), `torch_sweep`;
- `with_bounds`: each row against max(T_c, T_l, T_m) + α and the serial time; `timeline`: one ce_chunks run;
- tables of the recorded frames for notebook 05: `gemm_gate`, `shape_bounds`, `compare`, `timeline_summary`,
  and the figure `draw` (each schedule's time and fraction of the bound, per pattern).

On 2 GPUs the link time of AG+GEMM over its compute time is about 1000 / N_local (bf16, H200), so N_local from
256 to 16384 at M = K = 8192 sweeps from link-bound to compute-bound through the balanced shape.
`python -m pkit.experiments.overlap STUDY... [--record]` measures (and records) from a shell.

Example:
    >>> import pkit; from pkit.experiments import overlap                                   # doctest: +SKIP
    >>> frame = overlap.sweep(pkit.Team(pkit.team.team_devices()), n_locals=[1024, 4096])     # doctest: +SKIP
    >>> overlap.with_bounds(frame)                                                           # doctest: +SKIP
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from ..ops.overlap import PARTIAL_SCHEDULES, SCHEDULES, AllGatherGemm, PartialGemm
from ..roofline import PATTERNS, Ceilings, floor, overlap_efficiency
from ..timing import BenchResult, bench
from ..team import team_devices
from .torchrun import gpu_processes, torchrun

DEFAULT_N_LOCALS = (256, 512, 1024, 2048, 4096, 8192, 16384)
NEEDS = "(one GPU per rank: the serial schedules run NCCL)"  # why the studies of two or more ranks need their GPUs


GEMM_IMPLEMENTATIONS = ("pkit_gemm", "cublas")  # gemm_rates' implementation names
# 8192³ (the gate), AG+GEMM's output shapes around its balanced point (N_local 1024-16384 at M = K = 8192), GEMM+RS
# and GEMM+AR's partial products around theirs (K_local 256-1024 at M = N = 8192), 4096³
GEMM_SHAPES = ((8192, 8192, 8192), (8192, 1024, 8192), (8192, 2048, 8192), (8192, 4096, 8192), (8192, 16384, 8192),
               (8192, 8192, 256), (8192, 8192, 1024), (4096, 4096, 4096))
GEMM_ROUNDS = 4  # gemm_rates alternates the two implementations this many times per shape
GEMM_GATE = 0.7  # pkit's GEMM over cuBLAS (TFLOP/s at 8192³) below which the fused schedules' numbers mean little
TORCH_SCHEDULES = ("torch_serial", "torch_async_tp")  # torch_sweep's schedule names (pkit.experiments.torch_overlap)


def gemm_rates(shapes: Sequence[tuple[int, int, int]] = GEMM_SHAPES, device: int = 0, reps: int = 20,
               warmup: int = 5) -> pd.DataFrame:
    """pkit's GEMM (pkit.ops.gemm) against cuBLAS (torch.matmul) on the same bf16 inputs, C = A · Bᵀ for each
    (M, N, K): the gate of the fused schedules (pkit's GEMM should reach 70% of cuBLAS at 8192³ before its
    overlap numbers mean anything). Inputs of these sizes exceed the L2, so calls repeat on one set. The two are
    timed in GEMM_ROUNDS alternating rounds of `reps` calls each, their samples pooled, so a clock that drifts as
    the GPU warms weighs on both alike.

    Rows: implementation ('pkit_gemm', 'cublas'), m, n, k, time_median_us, time_min_us, time_max_us, cv,
    tflops, verified (within bf16 rounding of a float32 product), max_abs_err, and ratio_to_cublas.
    """
    rows = [row for m, n, k in tqdm(shapes, desc="GEMM shapes", leave=False)
            for row in _gemm_pair(m, n, k, device, reps, warmup)]
    frame = pd.DataFrame(rows)
    cublas_tflops = frame[frame["implementation"] == "cublas"].set_index(["m", "n", "k"])["tflops"]
    frame["ratio_to_cublas"] = [t / cublas_tflops[(m, n, k)] for t, m, n, k in
                                zip(frame["tflops"], frame["m"], frame["n"], frame["k"])]
    return frame


def _gemm_pair(m: int, n: int, k: int, device: int, reps: int, warmup: int) -> list[dict]:
    """gemm_rates' two rows for one shape, on fresh random inputs with a NaN-poisoned output."""
    import torch

    from ..gpus import torch_stream
    from ..ops.gemm import gemm

    gen = torch.Generator(device=f"cuda:{device}").manual_seed(m + n + k)
    with torch.cuda.device(device):
        a = torch.randn(m, k, device=device, generator=gen).bfloat16()
        b = torch.randn(n, k, device=device, generator=gen).bfloat16()
        want = a.float() @ b.float().T
        out = torch.empty((m, n), device=device, dtype=torch.bfloat16)

    def pkit_gemm():
        gemm(a, b, out)

    def cublas():
        with torch_stream(device):
            torch.matmul(a, b.T, out=out)

    calls = dict(zip(GEMM_IMPLEMENTATIONS, (pkit_gemm, cublas)))
    checks = {}
    for name, call in calls.items():
        out.fill_(float("nan"))
        call()
        torch.cuda.synchronize(device)
        checks[name] = bf16_match(out, want, terms=k)
    samples = {name: [] for name in calls}
    for _ in range(GEMM_ROUNDS):
        for name, call in calls.items():
            samples[name].append(bench(call, devices=[device], warmup=warmup, reps=reps).samples_ms)
    rows = []
    for name, (verified, err) in checks.items():
        timing = BenchResult(np.concatenate(samples[name]))
        rows.append({"implementation": name, "m": m, "n": n, "k": k, "time_median_us": timing.median_us,
                     "time_min_us": timing.min_ms * 1e3, "time_max_us": timing.max_ms * 1e3, "cv": timing.cv,
                     "tflops": 2 * m * n * k / (timing.median_ms * 1e-3) / 1e12, "verified": verified,
                     "max_abs_err": err})
    return rows


def variants(schedules: Sequence[str], comm_sms: Sequence[int]) -> list[tuple[str, dict]]:
    """(schedule, options) pairs to time: every schedule once, sm_pull once per communication SM count.

    >>> variants(["serial", "sm_pull"], [8, 16])
    [('serial', {}), ('sm_pull', {'comm_sms': 8}), ('sm_pull', {'comm_sms': 16})]
    """
    unknown = [s for s in schedules if s not in SCHEDULES]
    if unknown:
        raise ValueError(f"schedules: expected names from {list(SCHEDULES)}, got {unknown}")
    return [pair for s in schedules
            for pair in ([(s, {"comm_sms": int(k)}) for k in comm_sms] if s == "sm_pull" else [(s, {})])]


def fill(op: AllGatherGemm, seed: int) -> list:
    """Fresh random shards and weights on every rank (peers' rows and outputs poisoned with NaN); returns each
    rank's float32 reference output, computed on its GPU."""
    import torch

    team = op.team
    gen = torch.Generator(device="cpu").manual_seed(seed)
    shards = [torch.randn(op.shard_rows, op.k, generator=gen).bfloat16() for _ in range(team.size)]
    want = []
    for r in range(team.size):
        device = team.devices[r]
        with torch.cuda.device(device):
            op.gathered.torch(r).fill_(float("nan"))
            op.shard(r).copy_(shards[r])
            op.weight(r).copy_(torch.randn(op.n_local, op.k, generator=gen).bfloat16())
            op.out(r).fill_(float("nan"))
            want.append(torch.cat(shards).to(device).float() @ op.weight(r).float().T)
    team.synchronize()
    return want


def fill_partial(op: PartialGemm, seed: int) -> tuple[list, list]:
    """Fresh random K slices on every rank (outputs poisoned with NaN); returns (each rank's float32 reference
    output: its rows of the sum for reduce-scatter, the whole sum for all-reduce; the sum of the partial products'
    magnitudes over the same elements, the scale their bf16 roundings are relative to), computed on its GPU."""
    import torch

    team = op.team
    gen = torch.Generator(device="cpu").manual_seed(seed)
    lhs = [torch.randn(op.m, op.k_local, generator=gen).bfloat16() for _ in range(team.size)]
    rhs = [torch.randn(op.n, op.k_local, generator=gen).bfloat16() for _ in range(team.size)]
    want, scales = [], []
    for r in range(team.size):
        device = team.devices[r]
        with torch.cuda.device(device):
            op.lhs(r).copy_(lhs[r])
            op.weight(r).copy_(rhs[r])
            op.out(r).fill_(float("nan"))
            rows = slice(r * op.out_rows, (r + 1) * op.out_rows) if op.scatter else slice(None)
            parts = [(x.to(device).float() @ w.to(device).float().T)[rows] for x, w in zip(lhs, rhs)]
            want.append(sum(parts))
            scales.append(sum(p.abs() for p in parts))
    team.synchronize()
    return want, scales


def bf16_match(got, want, terms: int, roundings: int = 1, scale=None) -> tuple[bool, float]:
    """(`got`, a bf16 GEMM output, is finite and within bf16 tolerance of its float32 reference `want`, largest
    absolute error). `terms`: products summed per output element; `roundings`: bf16 roundings on the way (2 when
    partial products are rounded, then summed in bf16); `scale`: what those roundings are relative to, elementwise
    (default |want|; for a sum of partial products the sum of their magnitudes, since partials that cancel leave
    |want| far below the rounding errors they carry).

    >>> import torch
    >>> parts = torch.tensor([[96.3, -96.2]])   # two partial products that cancel: the sum is 0.1
    >>> got, want, scale = parts.bfloat16().sum(dim=1, dtype=torch.bfloat16), parts.sum(1), parts.abs().sum(1)
    >>> bf16_match(got, want, terms=1, roundings=2)[0], bf16_match(got, want, terms=1, roundings=2, scale=scale)[0]
    (False, True)
    """
    import torch

    got = got.float()
    err = (got - want).abs()
    bound = roundings * (2 ** -7 * (want.abs() if scale is None else scale) + 1e-3 * terms ** 0.5)
    return bool(torch.isfinite(got).all()) and bool((err <= bound).all()), float(err.max())


def check(op, want: list, terms: int, roundings: int = 1, scales: list | None = None) -> tuple[bool, float]:
    """(every rank's output matches its float32 reference, `bf16_match` with that rank's scale; largest absolute
    error over the ranks)."""
    scales = scales or [None] * len(want)
    verdicts = [bf16_match(op.out(r), expected, terms, roundings, scale)
                for r, (expected, scale) in enumerate(zip(want, scales))]
    return all(ok for ok, _ in verdicts), max(err for _, err in verdicts)


def _row(team, op, pattern: str, schedule: str, options: dict, shape: dict, verdict: tuple, reps: int,
         warmup: int) -> dict:
    """One timed variant as a row: the schedule timed with pkit.bench on every GPU after its check."""
    timing = bench(lambda: op.run(schedule, **options), devices=team.devices, warmup=warmup, reps=reps)
    flops = 2 * shape["m"] * shape["k"] * shape["n"] / (team.size if pattern != "ag_gemm" else 1)
    return {"pattern": pattern, "schedule": schedule, "comm_sms": options.get("comm_sms", 0), "gpus": team.size,
            **shape, "time_median_us": timing.median_ms * 1e3, "time_min_us": float(np.min(timing.samples_ms)) * 1e3,
            "time_max_us": float(np.max(timing.samples_ms)) * 1e3, "cv": timing.cv,
            "tflops_per_gpu": flops / (timing.median_ms * 1e-3) / 1e12, "verified": verdict[0],
            "max_abs_err": verdict[1]}


def sweep(team, n_locals: Sequence[int] = DEFAULT_N_LOCALS, m: int = 8192, k: int = 8192,
          schedules: Sequence[str] = tuple(SCHEDULES), comm_sms: Sequence[int] = (16,), chunk_rows: int = 1024,
          reps: int = 10, warmup: int = 3) -> pd.DataFrame:
    """AG+GEMM: time every schedule at every N_local (one process driving `team`), each checked once first.

    Rows: pattern ('ag_gemm'), schedule, comm_sms (0 where none), gpus, m, k, n (= N_local), time_median_us,
    time_min_us, time_max_us, cv, tflops_per_gpu (2·M·K·N_local / time), verified, max_abs_err.
    """
    pairs, rows = variants(schedules, comm_sms), []
    for n_local in tqdm(n_locals, desc="N_local", leave=False):
        op = AllGatherGemm(team, m=m, k=k, n_local=int(n_local), chunk_rows=chunk_rows)
        for schedule, options in pairs:
            want = fill(op, seed=len(rows))
            op.run(schedule, **options)
            team.synchronize()
            verdict = check(op, want, terms=k)
            del want
            rows.append(_row(team, op, "ag_gemm", schedule, options, {"m": m, "k": k, "n": int(n_local)}, verdict,
                             reps, warmup))
    return pd.DataFrame(rows)


def sweep_partial(team, k_locals: Sequence[int] = DEFAULT_N_LOCALS, m: int = 8192, n: int = 8192,
                  scatter: bool = True, schedules: Sequence[str] = tuple(PARTIAL_SCHEDULES), reps: int = 10,
                  warmup: int = 3) -> pd.DataFrame:
    """GEMM+RS (`scatter`) or GEMM+AR: time every schedule at every K_local (each GPU's slice of K), each checked
    once first. `sweep`'s columns, with pattern 'gemm_rs' or 'gemm_ar', k = K_local × GPUs and n = N."""
    unknown = [s for s in schedules if s not in PARTIAL_SCHEDULES]
    if unknown:
        raise ValueError(f"schedules: expected names from {list(PARTIAL_SCHEDULES)}, got {unknown}")
    pattern, rows = ("gemm_rs" if scatter else "gemm_ar"), []
    for k_local in tqdm(k_locals, desc="K_local", leave=False):
        op = PartialGemm(team, m=m, k_local=int(k_local), n=n, scatter=scatter)
        for schedule in schedules:
            want, scales = fill_partial(op, seed=len(rows))
            op.run(schedule)
            team.synchronize()
            verdict = check(op, want, terms=int(k_local), roundings=2, scales=scales)
            del want, scales
            rows.append(_row(team, op, pattern, schedule, {}, {"m": m, "k": int(k_local) * team.size, "n": n},
                             verdict, reps, warmup))
    return pd.DataFrame(rows)


def torch_sweep(inner: Sequence[int] = DEFAULT_N_LOCALS, pattern: str = "ag_gemm", m: int = 8192, k: int = 8192,
                n: int = 8192, nproc: int | None = None, reps: int = 10, timeout_s: float = 600) -> pd.DataFrame:
    """PyTorch's schedules under torchrun, one process per GPU (`nproc` of them, default every GPU of this machine;
    torch_serial: the NCCL collective and matmul one after the other; torch_async_tp: fused_all_gather_matmul or
    fused_matmul_reduce_scatter on symmetric memory), each checked once against float32 on every rank. `inner`:
    N_local for 'ag_gemm' (K = `k`), K_local for 'gemm_rs' (N = `n`). `sweep`'s columns."""
    if pattern not in ("ag_gemm", "gemm_rs"):
        raise ValueError(f"pattern: expected 'ag_gemm' or 'gemm_rs' (PyTorch has no fused GEMM+AR), got {pattern!r}")
    return torchrun("pkit.experiments.torch_overlap", ["--pattern", pattern, "--shape", m, k, n, "--reps", reps,
                                                       "--inner", *inner],
                    nproc=gpu_processes(nproc, NEEDS), timeout_s=timeout_s)


def timeline(team, n_local: int = 4096, m: int = 8192, k: int = 8192, chunk_rows: int = 1024) -> pd.DataFrame:
    """One warm ce_chunks run with CUDA events around every chunk's copy and GEMM.

    Rows: rank, kind ('copy' or 'gemm'), row (first row of the chunk), start_us, end_us, times from the rank's
    first event (events of different GPUs are not compared).
    """
    op = AllGatherGemm(team, m=m, k=k, n_local=n_local, chunk_rows=chunk_rows)
    fill(op, seed=0)
    op.run("ce_chunks")
    events: list = []
    op.run("ce_chunks", timeline=events)
    team.synchronize()
    import cupy as cp

    zero = {}
    for rank, _, _, start, _ in events:
        zero.setdefault(rank, start)
    return pd.DataFrame([{"rank": rank, "kind": kind, "row": row,
                          "start_us": cp.cuda.get_elapsed_time(zero[rank], start) * 1e3,
                          "end_us": cp.cuda.get_elapsed_time(zero[rank], end) * 1e3}
                         for rank, kind, row, start, end in events])


def with_bounds(frame: pd.DataFrame, ceilings: Ceilings | None = None) -> pd.DataFrame:
    """`sweep`'s (or `sweep_partial`'s) rows with the communication-aware roofline of each shape (the pattern's
    cost in `pkit.roofline.PATTERNS` under `ceilings`, default the H200 datasheet) and how each schedule fares.

    Added: compute_us, link_us, hbm_us, sync_us (T_c, T_l, T_m, α·steps), bound_us (max(T_c, T_l, T_m) + α·steps),
    serial_bound_us (T_c + T_l + α·steps), bound (the term that sets the bound), fraction_of_bound
    (bound / time), speedup_vs_serial (the serial schedule's time at that shape / time) and
    overlap_efficiency ((serial − time) / (serial − bound), from the measured serial time), ceilings (origin).

    >>> row = {"pattern": "ag_gemm", "schedule": "serial", "comm_sms": 0, "gpus": 2, "m": 8192, "k": 8192,
    ...        "n": 1024, "time_median_us": 1000.0}
    >>> out = with_bounds(pd.DataFrame([row]))
    >>> out[["bound", "speedup_vs_serial"]].values.tolist()
    [['link', 1.0]]
    """
    need = {"pattern", "schedule", "gpus", "m", "k", "n", "time_median_us"}
    if not need <= set(frame.columns):
        raise ValueError(f"frame: expected sweep's columns {sorted(need)}, missing {sorted(need - set(frame.columns))}")
    c = ceilings or Ceilings.datasheet()
    shape = ["pattern", "gpus", "m", "k", "n"]
    serial = frame[frame["schedule"] == "serial"].set_index(shape)["time_median_us"]
    rows = []
    for row in frame.to_dict("records"):
        f = floor(PATTERNS[row["pattern"]](row["m"], row["k"], row["n"], row["gpus"]), c, "bfloat16")
        key = tuple(row[s] for s in shape)
        serial_us = float(serial[key]) if key in serial.index else np.nan
        bound_us = f.time_s * 1e6
        rows.append({**row, "compute_us": f.compute_s * 1e6, "link_us": f.link_s * 1e6, "hbm_us": f.hbm_s * 1e6,
                     "sync_us": f.sync_s * 1e6, "bound_us": bound_us, "serial_bound_us": f.serial_s * 1e6,
                     "bound": f.bound, "fraction_of_bound": bound_us / row["time_median_us"],
                     "speedup_vs_serial": serial_us / row["time_median_us"],
                     "overlap_efficiency": (overlap_efficiency(row["time_median_us"], serial_us, bound_us)
                                            if serial_us > bound_us else np.nan),
                     "ceilings": c.origin})
    return pd.DataFrame(rows)


SHAPE = ["pattern", "gpus", "m", "k", "n"]  # the columns that name one shape of a pattern in sweep's rows
TERMS = ["compute_us", "link_us", "hbm_us", "sync_us", "bound_us", "serial_bound_us", "bound"]  # with_bounds' terms


def gemm_gate(frame: pd.DataFrame, target: float = GEMM_GATE) -> pd.DataFrame:
    """`gemm_rates`' rows side by side, one row per shape in the recorded order: shape ('M×N×K'), m, n, k,
    pkit_tflops, cublas_tflops (10¹² FLOP/s at the median), ratio_to_cublas, verified (both outputs within bf16
    rounding of float32) and passes (verified and ratio_to_cublas ≥ `target`).

    >>> rows = pd.DataFrame({"implementation": ["pkit_gemm", "cublas"], "m": 8192, "n": 8192, "k": 8192,
    ...                      "tflops": [600.0, 750.0], "verified": True, "ratio_to_cublas": [0.8, 1.0]})
    >>> gemm_gate(rows)[["shape", "pkit_tflops", "ratio_to_cublas", "passes"]].values.tolist()
    [['8192×8192×8192', 600.0, 0.8, True]]
    """
    need = {"implementation", "m", "n", "k", "tflops", "verified", "ratio_to_cublas"}
    if not need <= set(frame.columns):
        raise ValueError(f"frame: expected gemm_rates' columns, missing {sorted(need - set(frame.columns))}")
    dims = ["m", "n", "k"]
    by = frame.set_index([*dims, "implementation"])
    tflops = by["tflops"].unstack("implementation")
    out = frame[dims].drop_duplicates().reset_index(drop=True)
    keys = list(out.itertuples(index=False, name=None))
    out.insert(0, "shape", [f"{m}×{n}×{k}" for m, n, k in keys])
    out["pkit_tflops"] = tflops.loc[keys, "pkit_gemm"].to_numpy()
    out["cublas_tflops"] = tflops.loc[keys, "cublas"].to_numpy()
    out["ratio_to_cublas"] = by["ratio_to_cublas"].xs("pkit_gemm", level="implementation").loc[keys].to_numpy()
    out["verified"] = by["verified"].astype(bool).groupby(level=dims).all().loc[keys].to_numpy()
    out["passes"] = out["verified"] & (out["ratio_to_cublas"] >= target)
    return out


def shape_bounds(bounded: pd.DataFrame) -> pd.DataFrame:
    """The roofline of each shape of a `with_bounds` frame, one row per (pattern, gpus, m, k, n): T_c, T_l, T_m
    and α·steps (compute_us, link_us, hbm_us, sync_us), bound_us (overlapped), serial_bound_us (one after the
    other) and the bounding term.

    >>> row = {"pattern": "ag_gemm", "schedule": "serial", "gpus": 2, "m": 8192, "k": 8192, "n": 1024,
    ...        "time_median_us": 400.0}
    >>> b = shape_bounds(with_bounds(pd.DataFrame([row, dict(row, schedule="ce_chunks", time_median_us=300.0)])))
    >>> len(b), b.loc[0, "bound"], bool(b.loc[0, "bound_us"] < b.loc[0, "serial_bound_us"])
    (1, 'link', True)
    """
    missing = set(SHAPE + TERMS) - set(bounded.columns)
    if missing:
        raise ValueError(f"bounded: expected with_bounds' columns, missing {sorted(missing)}")
    return bounded.drop_duplicates(SHAPE)[SHAPE + TERMS].reset_index(drop=True)


def compare(bounded: pd.DataFrame) -> pd.DataFrame:
    """Per shape of a `with_bounds` frame (pkit's rows, optionally with torch_sweep's): the bound (term and
    bound_us), serial_us (the serial schedule: NCCL and cuBLAS one after the other), pkit's fastest verified
    overlapped schedule (best_schedule, best_comm_sms, best_us, best_fraction_of_bound, best_speedup_vs_serial,
    best_overlap_efficiency), where the frame has PyTorch's rows its torch_serial_us and torch_async_tp_us (NaN
    at shapes it did not run) and best_over_torch_async_tp (PyTorch's fused time / pkit's best: above 1, pkit is
    faster), and unverified (the schedules whose output failed its check at that shape, left out of the best).
    Times in µs.

    >>> rows = [{"pattern": "ag_gemm", "schedule": s, "comm_sms": 0, "gpus": 2, "m": 8192, "k": 8192, "n": 4096,
    ...          "time_median_us": t, "verified": True}
    ...         for s, t in (("serial", 1500.0), ("ce_chunks", 1300.0), ("sm_pull", 1200.0), ("torch_async_tp", 1400.0))]
    >>> rows[2]["verified"] = False
    >>> c = compare(with_bounds(pd.DataFrame(rows)))
    >>> c[["n", "best_schedule", "best_us", "torch_async_tp_us", "unverified"]].values.tolist()
    [[4096, 'ce_chunks', 1300.0, 1400.0, 'sm_pull']]
    """
    missing = {"schedule", "comm_sms", "time_median_us", "verified", "fraction_of_bound", "speedup_vs_serial",
               "overlap_efficiency"} - set(bounded.columns)
    if missing:
        raise ValueError(f"bounded: expected with_bounds' columns, missing {sorted(missing)}")
    out = shape_bounds(bounded)[[*SHAPE, "bound", "bound_us"]].set_index(SHAPE)
    times = bounded.pivot_table(index=SHAPE, columns="schedule", values="time_median_us", aggfunc="min")
    out["serial_us"] = times["serial"] if "serial" in times.columns else np.nan
    verified = bounded["verified"].astype(bool)
    ours = bounded[verified & ~bounded["schedule"].isin(["serial", *TORCH_SCHEDULES])]
    best = ours.sort_values("time_median_us").drop_duplicates(SHAPE).set_index(SHAPE)
    for column, name in (("schedule", "best_schedule"), ("comm_sms", "best_comm_sms"), ("time_median_us", "best_us"),
                         ("fraction_of_bound", "best_fraction_of_bound"),
                         ("speedup_vs_serial", "best_speedup_vs_serial"),
                         ("overlap_efficiency", "best_overlap_efficiency")):
        out[name] = best[column]
    for name in TORCH_SCHEDULES:  # only where the frame has PyTorch's rows
        if name in times.columns:
            out[f"{name}_us"] = times[name]
    if "torch_async_tp" in times.columns:
        out["best_over_torch_async_tp"] = out["torch_async_tp_us"] / out["best_us"]
    out["unverified"] = bounded[~verified].groupby(SHAPE)["schedule"].agg(", ".join)
    out["unverified"] = out["unverified"].fillna("")
    return out.reset_index()


def _union(spans: list) -> list:
    """Sorted (start, end) spans merged where they touch or overlap."""
    merged: list = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return merged


def _length(spans: list) -> float:
    return float(sum(end - start for start, end in spans))


def timeline_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per rank of a `timeline` frame: copies and gemms (chunks of each), copy_us and gemm_us (time with at
    least one copy, or one GEMM, in flight), both_us (time with both), span_us (first event to last), and
    copy_hidden (both_us / copy_us: the share of copy time spent under a GEMM). Times in µs from the rank's
    first event.

    >>> t = pd.DataFrame({"rank": 0, "kind": ["gemm", "copy", "gemm"], "row": [0, 4096, 4096],
    ...                   "start_us": [0.0, 0.0, 10.0], "end_us": [10.0, 8.0, 20.0]})
    >>> timeline_summary(t)[["rank", "copies", "copy_us", "both_us", "span_us", "copy_hidden"]].values.tolist()
    [[0.0, 1.0, 8.0, 8.0, 20.0, 1.0]]
    """
    missing = {"rank", "kind", "start_us", "end_us"} - set(frame.columns)
    if missing:
        raise ValueError(f"frame: expected timeline's columns, missing {sorted(missing)}")
    rows = []
    for rank, events in frame.groupby("rank", sort=True):
        spans = {kind: _union(list(zip(events.loc[events["kind"] == kind, "start_us"],
                                       events.loc[events["kind"] == kind, "end_us"]))) for kind in ("copy", "gemm")}
        both = _length([(max(a, c), min(b, d)) for a, b in spans["copy"] for c, d in spans["gemm"]
                        if min(b, d) > max(a, c)])
        copy_us = _length(spans["copy"])
        rows.append({"rank": rank, "copies": int((events["kind"] == "copy").sum()),
                     "gemms": int((events["kind"] == "gemm").sum()), "copy_us": copy_us,
                     "gemm_us": _length(spans["gemm"]), "both_us": both,
                     "span_us": float(events["end_us"].max() - events["start_us"].min()),
                     "copy_hidden": both / copy_us if copy_us > 0 else np.nan})
    return pd.DataFrame(rows)


SWEPT = {"ag_gemm": "N_local (columns of each GPU's weight shard)", "gemm_rs": "K_local (each GPU's slice of K)",
         "gemm_ar": "K_local (each GPU's slice of K)"}
"""What each pattern's sweep varies (sweep: N_local = n; sweep_partial: K_local = k / gpus), as `draw` labels it."""


def draw(bounded: pd.DataFrame, schedules: Sequence[str] | None = None):
    """A `with_bounds` frame as small multiples, one column of panels per pattern, against the dimension its
    sweep varies (`SWEPT`): on top each schedule's time per call with the bound max(T_c, T_l, T_m) + α (dashed)
    and the serial bound T_c + T_l + α (dotted); below, each schedule's fraction of the bound (1: at the bound).
    `schedules`: the ones to draw (default all, in the frame's order). Colours, markers and labels are pkit's
    (`pkit.figures`); one legend, right of the panels. Returns the figure.

    >>> import matplotlib; matplotlib.use("Agg")
    >>> rows = [{"pattern": p, "schedule": s, "gpus": 2, "m": 8192, "k": 8192, "n": n, "time_median_us": t * n / 1024}
    ...         for p in ("ag_gemm", "gemm_rs") for n in (1024, 4096) for s, t in (("serial", 300.0), ("ce_flags", 200.0))]
    >>> fig = draw(with_bounds(pd.DataFrame(rows)))
    >>> [t.get_text() for t in fig.legends[0].get_texts()]
    ['serial (NCCL + cuBLAS)', 'copy engine + flags', 'bound: max(T_c, T_l, T_m) + α', 'serial bound: T_c + T_l + α']
    >>> [ax.get_xlabel().split()[0] for ax in fig.axes[2:]], [t.get_text() for t in fig.axes[3].get_xticklabels()]
    (['N_local', 'K_local'], ['4096'])
    """
    from .. import figures

    missing = {"schedule", "time_median_us", "fraction_of_bound", *SHAPE, *TERMS} - set(bounded.columns)
    if missing:
        raise ValueError(f"bounded: expected with_bounds' columns, missing {sorted(missing)}")
    names = list(dict.fromkeys(bounded["schedule"] if schedules is None else schedules))
    colours = figures.colors_for(names)
    patterns = list(dict.fromkeys(bounded["pattern"]))
    fig, axes = figures.subplots(2, len(patterns), figsize=(5.2 * len(patterns) + 2.8, 7.0), sharex="col",
                                 squeeze=False)
    for col, pattern in enumerate(patterns):
        rows = bounded[bounded["pattern"] == pattern]
        rows = rows.assign(swept=rows["n"] if pattern == "ag_gemm" else rows["k"] // rows["gpus"]).sort_values("swept")
        top, bottom = axes[0, col], axes[1, col]
        for name in names:
            mine = rows[rows["schedule"] == name]
            look = dict(color=colours[name], marker=figures.marker(name), ls=figures.LINESTYLES.get(name, "-"),
                        label=figures.label(name))
            top.plot(mine["swept"], mine["time_median_us"], **look)
            bottom.plot(mine["swept"], mine["fraction_of_bound"], **look)
        bounds = rows.drop_duplicates("swept")
        top.plot(bounds["swept"], bounds["bound_us"], color="0.2", ls="--", lw=1.2,
                 label="bound: max(T_c, T_l, T_m) + α")
        top.plot(bounds["swept"], bounds["serial_bound_us"], color="0.45", ls=":", lw=1.2,
                 label="serial bound: T_c + T_l + α")
        bottom.axhline(1.0, color="0.2", ls="--", lw=1.0)
        top.set(title=figures.label(pattern), yscale="log", ylabel="time per call (µs, log scale)")
        bottom.set(xlabel=SWEPT.get(pattern, "swept dimension"), ylabel="fraction of the bound (bound / time)",
                   ylim=(0, max(1.1, 1.05 * float(rows["fraction_of_bound"].max()))))
        bottom.set_xscale("log", base=2)
        bottom.set_xticks(list(bounds["swept"]), [str(v) for v in bounds["swept"]])
        bottom.minorticks_off()
        bottom.yaxis.set_major_formatter(lambda v, _: f"{v:.0%}")
    handles = {h.get_label(): h for ax in axes[0] for h in ax.get_legend_handles_labels()[0]}  # each name once
    fig.legend(handles=list(handles.values()), loc="outside right center", fontsize=8)
    return fig


STUDIES = ("gemm", "ag_gemm", "gemm_rs", "gemm_ar", "torch_ag_gemm", "torch_gemm_rs", "timeline")


def measure(study: str, gpus: Sequence[int] | None = None, reps: int = 10) -> pd.DataFrame:
    """One of STUDIES at its default shapes on `gpus` (default: every GPU of this machine): 'gemm' (gemm_rates, on
    the first), the three patterns' sweeps, PyTorch's two fused schedules (torchrun), or the ce_chunks timeline
    (one rank per GPU, at least two)."""
    import pkit

    if study not in STUDIES:
        raise ValueError(f"study: expected one of {STUDIES}, got {study!r}")
    if study == "gemm":
        return gemm_rates(device=team_devices(gpus, arg="gpus")[0], reps=reps)
    gpus = team_devices(gpus, need=2, arg="gpus", what=NEEDS)
    if study.startswith("torch_"):
        return torch_sweep(pattern=study.removeprefix("torch_"), nproc=len(gpus), reps=reps)
    team = pkit.Team(gpus)
    if study == "timeline":
        return timeline(team)
    if study == "ag_gemm":
        return sweep(team, reps=reps)
    return sweep_partial(team, scatter=study == "gemm_rs", reps=reps)


def parameters(gpus: Sequence[int] | None, reps: int) -> dict:
    """The parameters recorded with each study (`main --record` and `recorded` write the same ones); `gpus` None
    is every GPU of this machine.

    >>> parameters((0, 1), 10)
    {'gpus': [0, 1], 'reps': 10}
    """
    return {"gpus": [int(g) for g in team_devices(gpus, need=0, arg="gpus")], "reps": int(reps)}


def recorded(study: str, *, mode: str, machine: str, gpus: Sequence[int] | None = None, reps: int = 10):
    """One of STUDIES as experiment 'overlap_<study>' through `pkit.studies.measure_or_replay`: measured by
    `measure(study, gpus, reps)` and recorded (mode 'measure'), or read back (mode 'replay'), with the
    `parameters` the command line records, so studies recorded by `main` and by notebook 05 are
    interchangeable. Returns the `pkit.results.Recorded`, or None after one line saying why where this machine
    cannot measure it (it needs two GPUs) or it is not recorded for `machine`."""
    from ..studies import measure_or_replay

    if study not in STUDIES:
        raise ValueError(f"study: expected one of {STUDIES}, got {study!r}")
    return measure_or_replay(f"overlap_{study}", lambda: measure(study, gpus, reps), mode=mode, machine=machine,
                             parameters=parameters(gpus, reps) if mode == "measure" else None)


def calibration(experiment: str, measure, *, mode: str, machine: str, calibration_machine: str, parameters=None):
    """A one-GPU experiment the overlap model is calibrated on (the GEMM gate, the interference study): measured
    here (mode 'measure'), else replayed from `machine` where recorded there, else from `calibration_machine`.
    Returns the `pkit.results.Recorded` (its provenance says which machine), or None after a line saying why."""
    from .. import results
    from ..studies import measure_or_replay

    if mode != "measure" and not results.is_recorded(experiment, machine):
        machine = calibration_machine
    return measure_or_replay(experiment, measure, mode=mode, machine=machine, parameters=parameters)


def main(argv=None) -> None:
    """Measure studies, print them; --record writes results/<machine>/overlap_<study>.{csv,json}."""
    import argparse

    import pkit

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("studies", nargs="+", choices=STUDIES)
    parser.add_argument("--gpus", type=int, nargs="+", default=None, help="GPU ids (default: every GPU here)")
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--record", action="store_true", help="write results/<machine>/overlap_<study>.{csv,json}")
    args = parser.parse_args(argv)
    if args.gpus is None:  # every GPU here: each study says at once what it needs that this machine lacks
        from ..studies import require_part

        for study in args.studies:
            require_part(f"overlap_{study}", prog="python -m pkit.experiments.overlap")
    for study in args.studies:
        frame = measure(study, args.gpus, args.reps)
        with pd.option_context("display.width", 200, "display.max_columns", None):
            print(frame, flush=True)
        if args.record:
            recorded_as = pkit.results.record(f"overlap_{study}", frame, parameters(args.gpus, args.reps))
            print(f"recorded {recorded_as.csv_path}", flush=True)


if __name__ == "__main__":
    main()
