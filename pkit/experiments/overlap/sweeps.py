"""Measuring the overlap study: the schedules of pkit.ops.overlap timed side by side over shape sweeps, each checked
against float32 first (`pkit.experiments.overlap.checks`), PyTorch's under torchrun, pkit's GEMM against cuBLAS,
one ce_chunks run's timeline, and each study measured or replayed by name (`MEASUREMENTS`).

Patterns, schedules and their option grids come from the registry, `pkit.ops.overlap_patterns`.

Example:
    >>> MEASUREMENTS[:len(GEMM_STUDIES)] == GEMM_STUDIES and set(PATTERNS) <= set(MEASUREMENTS)  # then each pattern
    True
    >>> [m for m in MEASUREMENTS if m.startswith("torch_")] == [f"torch_{p}" for p in TORCH_PATTERNS]
    True
    >>> import pkit; frame = sweep(pkit.Team(pkit.team.team_devices()), n_locals=[1024, 4096])   # doctest: +SKIP
"""
from __future__ import annotations

from typing import Sequence

import pandas as pd
from tqdm.auto import tqdm

from ...ops.overlap import make
from ...ops.overlap_patterns import GEMMS, OPTIONS, PATTERNS
from ...studies import part_devices
from ...team import team_devices
from ...timing import bench
from .checks import check, fill, fill_partial
from ..torchrun import gpu_processes, torchrun
from .shapes import DEFAULT_N_LOCALS


GEMM_IMPLEMENTATIONS = GEMMS  # the implementations the overlap schedules run (pkit's GEMM and cuBLAS)
GEMM_STUDIES = ("gemm", "gemm_fp8", "gemm_plans")  # one GPU's: pkit's GEMM against cuBLAS (bf16, FP8), its plans

TORCH_PATTERNS = tuple(p.name for p in PATTERNS.values() if p.torch_fused)  # the ones torch_sweep times
MEASUREMENTS = (*GEMM_STUDIES, *PATTERNS, *(f"torch_{p}" for p in TORCH_PATTERNS), "timeline")
"""What `measure` and `recorded` take, each recorded as experiment 'overlap_<study>'."""


def variants(schedules: Sequence[str], pattern: str = "ag_gemm", **grids) -> list[tuple[str, dict]]:
    """(schedule, options) pairs to time: each of `pattern`'s `schedules` once per point of its option grid, the
    registry's (pkit.ops.overlap_patterns) or `grids`' (option name → values).

    >>> variants(["serial", "sm_pull"], comm_sms=[8, 16])
    [('serial', {}), ('sm_pull', {'comm_sms': 8}), ('sm_pull', {'comm_sms': 16})]
    """
    entry = PATTERNS[pattern]
    unknown = [s for s in schedules if s not in entry.names]
    if unknown:
        raise ValueError(f"schedules: expected names from {list(entry.names)}, got {unknown}")
    taken = {o for s in entry.schedules for o in s.options}
    if set(grids) - taken:
        raise ValueError(f"grids: expected options of {pattern}'s schedules {sorted(taken)}, got {sorted(grids)}")
    return [(s, options) for s in schedules for options in entry.schedule(s).variants(**grids)]


def _row(team, op, pattern: str, schedule: str, options: dict, shape: dict, verdict: tuple, reps: int,
         warmup: int) -> dict:
    """One timed variant as a row: the schedule timed with pkit.bench on every GPU after its check."""
    timing = bench(lambda: op.run(schedule, **options), devices=team.devices, warmup=warmup, reps=reps)
    flops = PATTERNS[pattern].flops(shape["m"], shape["k"], shape["n"], team.size)
    return {"pattern": pattern, "schedule": schedule, **{o: options.get(o, 0) for o in OPTIONS}, "gpus": team.size,
            **shape, **timing.times_us(), "tflops_per_gpu": flops / (timing.median_ms * 1e-3) / 1e12, "verified": verdict[0],
            "max_abs_err": verdict[1]}


def sweep(team, n_locals: Sequence[int] = DEFAULT_N_LOCALS, m: int = 8192, k: int = 8192,
          schedules: Sequence[str] | None = None, chunk_rows: int = 1024, reps: int = 10, warmup: int = 3,
          **grids) -> pd.DataFrame:
    """AG+GEMM: time every schedule (default all of the pattern's), each variant of its options (`grids`, e.g.
    comm_sms=[8, 16]; default the registry's grid), at every N_local (one process driving `team`), each checked
    once first.

    Rows: pattern ('ag_gemm'), schedule, comm_sms (0 where none), gpus, m, k, n (= N_local), time_median_us,
    time_min_us, time_max_us, cv, tflops_per_gpu (2·M·K·N_local / time), verified, max_abs_err.
    """
    pattern = PATTERNS["ag_gemm"]
    pairs, rows = variants(schedules or pattern.names, pattern.name, **grids), []
    for n_local in tqdm(n_locals, desc="N_local", leave=False):
        op = make(pattern, team, m=m, k=k, n_local=int(n_local), chunk_rows=chunk_rows)
        for schedule, options in pairs:
            want = fill(op, seed=len(rows))
            op.run(schedule, **options)
            team.synchronize()
            verdict = check(op, want, terms=k)
            del want
            rows.append(_row(team, op, pattern.name, schedule, options, {"m": m, "k": k, "n": int(n_local)},
                             verdict, reps, warmup))
    return pd.DataFrame(rows)


def sweep_partial(team, k_locals: Sequence[int] = DEFAULT_N_LOCALS, m: int = 8192, n: int = 8192,
                  scatter: bool = True, schedules: Sequence[str] | None = None, reps: int = 10, warmup: int = 3,
                  **grids) -> pd.DataFrame:
    """GEMM+RS (`scatter`) or GEMM+AR: time every schedule (default all of the pattern's; `grids` as `sweep`'s) at
    every K_local (each GPU's slice of K), each checked once first. `sweep`'s columns, with pattern 'gemm_rs' or
    'gemm_ar', k = K_local × GPUs and n = N."""
    pattern = PATTERNS["gemm_rs" if scatter else "gemm_ar"]
    pairs, rows = variants(schedules or pattern.names, pattern.name, **grids), []
    for k_local in tqdm(k_locals, desc="K_local", leave=False):
        op = make(pattern, team, m=m, k_local=int(k_local), n=n)
        for schedule, options in pairs:
            want, scales = fill_partial(op, seed=len(rows))
            op.run(schedule, **options)
            team.synchronize()
            verdict = check(op, want, terms=int(k_local), roundings=2, scales=scales)
            del want, scales
            rows.append(_row(team, op, pattern.name, schedule, options,
                             {"m": m, "k": int(k_local) * team.size, "n": n}, verdict, reps, warmup))
    return pd.DataFrame(rows)


def torch_sweep(inner: Sequence[int] = DEFAULT_N_LOCALS, pattern: str = "ag_gemm", m: int = 8192, k: int = 8192,
                n: int = 8192, nproc: int | None = None, reps: int = 10, timeout_s: float = 600) -> pd.DataFrame:
    """PyTorch's schedules under torchrun, one process per GPU (`nproc` of them, default every GPU of this machine;
    torch_serial: the NCCL collective and matmul one after the other; torch_async_tp: fused_all_gather_matmul or
    fused_matmul_reduce_scatter on symmetric memory), each checked once against float32 on every rank. `inner`:
    N_local for 'ag_gemm' (K = `k`), K_local for 'gemm_rs' (N = `n`). `sweep`'s columns."""
    if pattern not in TORCH_PATTERNS:
        raise ValueError(f"pattern: expected one of {list(TORCH_PATTERNS)} (the patterns PyTorch fuses), got "
                         f"{pattern!r}")
    return torchrun("pkit.experiments.overlap.pytorch", ["--pattern", pattern, "--shape", m, k, n, "--reps", reps,
                                                       "--inner", *inner],
                    nproc=gpu_processes(nproc, f"overlap_torch_{pattern}"), timeout_s=timeout_s)


def timeline(team, n_local: int = 4096, m: int = 8192, k: int = 8192, chunk_rows: int = 1024) -> pd.DataFrame:
    """One warm ce_chunks run with CUDA events around every chunk's copy and GEMM.

    Rows: rank, kind ('copy' or 'gemm'), row (first row of the chunk), start_us, end_us, times from the rank's
    first event (events of different GPUs are not compared).
    """
    op = make(PATTERNS["ag_gemm"], team, m=m, k=k, n_local=n_local, chunk_rows=chunk_rows)
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


def measure(study: str, gpus: Sequence[int] | None = None, reps: int = 10) -> pd.DataFrame:
    """One of MEASUREMENTS at its default shapes on `gpus` (default: every GPU of this machine): 'gemm' and 'gemm_fp8'
    (gemm.gemm_rates in bf16 and FP8, on the first), 'gemm_plans' (gemm.plan_sweep, on the first), the three patterns' sweeps, PyTorch's two fused schedules (torchrun), or the ce_chunks timeline
    (one rank per GPU, at least two)."""
    import pkit

    if study not in MEASUREMENTS:
        raise ValueError(f"study: expected one of {MEASUREMENTS}, got {study!r}")
    if study in GEMM_STUDIES:
        from .gemm import gemm_rates, plan_sweep, reps_per_round

        device = part_devices(f"overlap_{study}", gpus, arg="gpus")[0]
        if study == "gemm_plans":
            return plan_sweep(device=device)
        return gemm_rates(dtype="float8_e4m3fn" if study == "gemm_fp8" else "bfloat16", device=device,
                          reps=reps_per_round(reps))
    gpus = part_devices(f"overlap_{study}", gpus, arg="gpus")
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
    """One of MEASUREMENTS as experiment 'overlap_<study>' through `pkit.studies.measure_or_replay`: measured by
    `measure(study, gpus, reps)` and recorded (mode 'measure'), or read back (mode 'replay'), with the
    `parameters` the command line records, so studies recorded by `main` and by notebook 05 are
    interchangeable. Returns the `pkit.results.Recorded`, or None after one line saying why where this machine
    cannot measure it (it needs two GPUs) or it is not recorded for `machine`."""
    from ...studies import measure_or_replay

    if study not in MEASUREMENTS:
        raise ValueError(f"study: expected one of {MEASUREMENTS}, got {study!r}")
    return measure_or_replay(f"overlap_{study}", lambda: measure(study, gpus, reps), mode=mode, machine=machine,
                             parameters=parameters(gpus, reps) if mode == "measure" else None)


def calibration(experiment: str, measure, *, mode: str, machine: str, calibration_machine: str, parameters=None):
    """A one-GPU experiment the overlap model is calibrated on (the GEMM gate, the interference study): measured
    here (mode 'measure'), else replayed from `machine` where recorded there, else from `calibration_machine`.
    Returns the `pkit.results.Recorded` (its provenance says which machine), or None after a line saying why."""
    from ... import results
    from ...studies import measure_or_replay

    if mode != "measure" and not results.is_recorded(experiment, machine):
        machine = calibration_machine
    return measure_or_replay(experiment, measure, mode=mode, machine=machine, parameters=parameters)

