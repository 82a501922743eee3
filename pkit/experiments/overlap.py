"""Overlap study: the tensor-parallel GEMM schedules of pkit.ops.overlap timed side by side over shape sweeps,
each checked against float32, beside PyTorch's (torchrun), with the communication-aware roofline per point.

- `gemm_rates`: pkit's GEMM against cuBLAS (one GPU), the gate of the fused schedules;
- `sweep` (AG+GEMM over N_local), `sweep_partial` (GEMM+RS or GEMM+AR over K_local), `torch_sweep`;
- `with_bounds`: each row against max(T_c, T_l, T_m) + α and the serial time; `timeline`: one ce_chunks run.

On 2 GPUs the link time of AG+GEMM over its compute time is about 1000 / N_local (bf16, H200), so N_local from
256 to 16384 at M = K = 8192 sweeps from link-bound to compute-bound through the balanced shape.
`python -m pkit.experiments.overlap STUDY... [--record]` measures (and records) from a shell.

Example:
    >>> import pkit; from pkit.experiments import overlap                                   # doctest: +SKIP
    >>> frame = overlap.sweep(pkit.Team([0, 1]), n_locals=[1024, 4096])                       # doctest: +SKIP
    >>> overlap.with_bounds(frame)                                                           # doctest: +SKIP
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from ..ops.overlap import PARTIAL_SCHEDULES, SCHEDULES, AllGatherGemm, PartialGemm
from ..roofline import PATTERNS, Ceilings, floor, overlap_efficiency
from ..timing import bench
from .torchrun import torchrun

DEFAULT_N_LOCALS = (256, 512, 1024, 2048, 4096, 8192, 16384)


GEMM_IMPLEMENTATIONS = ("pkit_gemm", "cublas")  # gemm_rates' implementation names
GEMM_SHAPES = ((8192, 8192, 8192), (8192, 4096, 8192), (8192, 16384, 8192), (4096, 4096, 4096))


def gemm_rates(shapes: Sequence[tuple[int, int, int]] = GEMM_SHAPES, device: int = 0, reps: int = 20,
               warmup: int = 5) -> pd.DataFrame:
    """pkit's GEMM (pkit.ops.gemm) against cuBLAS (torch.matmul) on the same bf16 inputs, C = A · Bᵀ for each
    (M, N, K): the gate of the fused schedules (pkit's GEMM should reach 70% of cuBLAS at 8192³ before its
    overlap numbers mean anything). Inputs of these sizes exceed the L2, so calls repeat on one set.

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

    rows = []
    for name, call in zip(GEMM_IMPLEMENTATIONS, (pkit_gemm, cublas)):
        out.fill_(float("nan"))
        call()
        torch.cuda.synchronize(device)
        verified, err = bf16_match(out, want, terms=k)
        timing = bench(call, devices=[device], warmup=warmup, reps=reps)
        rows.append({"implementation": name, "m": m, "n": n, "k": k, "time_median_us": timing.median_ms * 1e3,
                     "time_min_us": float(np.min(timing.samples_ms)) * 1e3,
                     "time_max_us": float(np.max(timing.samples_ms)) * 1e3, "cv": timing.cv,
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


def fill_partial(op: PartialGemm, seed: int) -> list:
    """Fresh random K slices on every rank (outputs poisoned with NaN); returns each rank's float32 reference
    output (its rows of the sum for reduce-scatter, the whole sum for all-reduce), computed on its GPU."""
    import torch

    team = op.team
    gen = torch.Generator(device="cpu").manual_seed(seed)
    lhs = [torch.randn(op.m, op.k_local, generator=gen).bfloat16() for _ in range(team.size)]
    rhs = [torch.randn(op.n, op.k_local, generator=gen).bfloat16() for _ in range(team.size)]
    want = []
    for r in range(team.size):
        device = team.devices[r]
        with torch.cuda.device(device):
            op.lhs(r).copy_(lhs[r])
            op.weight(r).copy_(rhs[r])
            op.out(r).fill_(float("nan"))
            total = sum(x.to(device).float() @ w.to(device).float().T for x, w in zip(lhs, rhs))
            want.append(total[r * op.out_rows:(r + 1) * op.out_rows] if op.scatter else total)
    team.synchronize()
    return want


def bf16_match(got, want, terms: int, roundings: int = 1) -> tuple[bool, float]:
    """(`got`, a bf16 GEMM output, is finite and within bf16 tolerance of its float32 reference `want`, largest
    absolute error). `terms`: products summed per output element; `roundings`: bf16 roundings on the way (2 when
    partial products are rounded, then summed in bf16)."""
    import torch

    got = got.float()
    err = (got - want).abs()
    bound = roundings * (2 ** -7 * want.abs() + 1e-3 * terms ** 0.5)
    return bool(torch.isfinite(got).all()) and bool((err <= bound).all()), float(err.max())


def check(op, want: list, terms: int, roundings: int = 1) -> tuple[bool, float]:
    """(every rank's output matches its float32 reference, `bf16_match`; largest absolute error over the ranks)."""
    verdicts = [bf16_match(op.out(r), expected, terms, roundings) for r, expected in enumerate(want)]
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
            want = fill_partial(op, seed=len(rows))
            op.run(schedule)
            team.synchronize()
            verdict = check(op, want, terms=int(k_local), roundings=2)
            del want
            rows.append(_row(team, op, pattern, schedule, {}, {"m": m, "k": int(k_local) * team.size, "n": n},
                             verdict, reps, warmup))
    return pd.DataFrame(rows)


def torch_sweep(inner: Sequence[int] = DEFAULT_N_LOCALS, pattern: str = "ag_gemm", m: int = 8192, k: int = 8192,
                n: int = 8192, nproc: int = 2, reps: int = 10, timeout_s: float = 600) -> pd.DataFrame:
    """PyTorch's schedules under torchrun, one process per GPU (torch_serial: the NCCL collective and matmul one
    after the other; torch_async_tp: fused_all_gather_matmul or fused_matmul_reduce_scatter on symmetric
    memory), each checked once against float32 on every rank. `inner`: N_local for 'ag_gemm' (K = `k`),
    K_local for 'gemm_rs' (N = `n`). `sweep`'s columns."""
    if pattern not in ("ag_gemm", "gemm_rs"):
        raise ValueError(f"pattern: expected 'ag_gemm' or 'gemm_rs' (PyTorch has no fused GEMM+AR), got {pattern!r}")
    return torchrun("pkit.experiments.torch_overlap", ["--pattern", pattern, "--shape", m, k, n, "--reps", reps,
                                                       "--inner", *inner],
                    nproc=nproc, timeout_s=timeout_s)


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


STUDIES = ("gemm", "ag_gemm", "gemm_rs", "gemm_ar", "torch_ag_gemm", "torch_gemm_rs", "timeline")


def measure(study: str, gpus: Sequence[int] = (0, 1), reps: int = 10) -> pd.DataFrame:
    """One of STUDIES at its default shapes: 'gemm' (gemm_rates, one GPU), the three patterns' sweeps, PyTorch's
    two fused schedules (torchrun), or the ce_chunks timeline."""
    import pkit

    if study not in STUDIES:
        raise ValueError(f"study: expected one of {STUDIES}, got {study!r}")
    if study == "gemm":
        return gemm_rates(device=gpus[0], reps=reps)
    if study.startswith("torch_"):
        return torch_sweep(pattern=study.removeprefix("torch_"), nproc=len(gpus), reps=reps)
    team = pkit.Team(list(gpus))
    if study == "timeline":
        return timeline(team)
    if study == "ag_gemm":
        return sweep(team, reps=reps)
    return sweep_partial(team, scatter=study == "gemm_rs", reps=reps)


def main(argv=None) -> None:
    """Measure studies, print them; --record writes results/<machine>/overlap_<study>.{csv,json}."""
    import argparse

    import pkit

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("studies", nargs="+", choices=STUDIES)
    parser.add_argument("--gpus", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--record", action="store_true", help="write results/<machine>/overlap_<study>.{csv,json}")
    args = parser.parse_args(argv)
    for study in args.studies:
        frame = measure(study, args.gpus, args.reps)
        with pd.option_context("display.width", 200, "display.max_columns", None):
            print(frame, flush=True)
        if args.record:
            parameters = {"gpus": args.gpus, "reps": args.reps}
            print(f"recorded {pkit.results.record(f'overlap_{study}', frame, parameters).csv_path}", flush=True)


if __name__ == "__main__":
    main()
