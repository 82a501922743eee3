"""Tables of the overlap study's recorded frames for notebook 05: each row against its communication-aware roofline
(`with_bounds`), the GEMM gate (`gemm_gate`, with each shape's roofline under `gemm_ceilings`), each shape's bound
(`shape_bounds`), pkit's best schedule beside serial and PyTorch's (`compare`), and how much of a ce_chunks run's
copy time hid under GEMMs (`timeline_summary`).

On 2 GPUs the link time of AG+GEMM over its compute time is about 1000 / N_local (bf16, H200), so N_local from
256 to 16384 at M = K = 8192 sweeps from link-bound to compute-bound through the balanced shape.

Example:
    >>> row = {"pattern": "gemm_rs", "schedule": "serial", "gpus": 2, "m": 8192, "k": 512, "n": 8192,
    ...        "time_median_us": 500.0}
    >>> shape_bounds(with_bounds(pd.DataFrame([row])))[["pattern", "bound"]].values.tolist()
    [['gemm_rs', 'link']]
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ...hardware import datasheet_of
from ...ops.gemm import ITEMSIZES
from ...ops.overlap_patterns import PATTERNS, TORCH
from ...roofline import Ceilings, floor, gemm_cost, overlap_efficiency

GEMM_GATE = 0.7  # pkit's GEMM over cuBLAS (TFLOP/s at 8192³) below which the fused schedules' numbers mean little
TORCH_SCHEDULES = tuple(s.name for s in TORCH)  # torch_sweep's schedule names (pkit.experiments.overlap.pytorch)
SHAPE = ["pattern", "gpus", "m", "k", "n"]  # the columns that name one shape of a pattern in sweep's rows
TERMS = ["compute_us", "link_us", "hbm_us", "sync_us", "bound_us", "serial_bound_us", "bound"]  # with_bounds' terms


def with_bounds(frame: pd.DataFrame, ceilings: Ceilings | None = None) -> pd.DataFrame:
    """`sweep`'s (or `sweep_partial`'s) rows with the communication-aware roofline of each shape (the pattern's
    cost in `pkit.ops.overlap_patterns.PATTERNS` under `ceilings`, default the H200 datasheet) and how each
    schedule fares.

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
    serial = frame[frame["schedule"] == "serial"].set_index(SHAPE)["time_median_us"]
    rows = []
    for row in frame.to_dict("records"):
        f = floor(PATTERNS[row["pattern"]].cost(row["m"], row["k"], row["n"], row["gpus"]), c, "bfloat16")
        key = tuple(row[s] for s in SHAPE)
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


def gemm_gate(frame: pd.DataFrame, target: float = GEMM_GATE, ceilings: Ceilings | None = None) -> pd.DataFrame:
    """`gemm_rates`' rows side by side, one row per shape in the recorded order: shape ('M×N×K'), m, n, k,
    pkit_tflops, cublas_tflops (10¹² FLOP/s at the median), ratio_to_cublas, verified (both outputs within bf16
    rounding of float32) and passes (verified and ratio_to_cublas ≥ `target`); then each shape's roofline under
    `ceilings` (default the H200 datasheet): roofline_tflops (its FLOPs over `roofline.floor` of `gemm_cost`,
    max(T_c, T_m)), bound ('compute' or 'hbm'), pkit_of_roofline and cublas_of_roofline (NaN where the ceilings
    have no rate for the inputs' dtype, FP8 on a datasheet).

    >>> rows = pd.DataFrame({"implementation": ["pkit_gemm", "cublas"], "m": 8192, "n": 8192, "k": 8192,
    ...                      "tflops": [600.0, 750.0], "verified": True, "ratio_to_cublas": [0.8, 1.0]})
    >>> gemm_gate(rows)[["shape", "pkit_tflops", "ratio_to_cublas", "passes", "bound"]].values.tolist()
    [['8192×8192×8192', 600.0, 0.8, True, 'compute']]
    >>> gemm_gate(rows)[["pkit_of_roofline", "cublas_of_roofline"]].round(3).values.tolist()  # of 989.4 TFLOP/s
    [[0.606, 0.758]]
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
    return _with_gemm_roofline(out, str(frame["dtype"].iloc[0]) if "dtype" in frame else "bfloat16", ceilings)


def gemm_ceilings(provenance: dict) -> Ceilings:
    """The datasheet ceilings of the GPU a recorded GEMM study ran on (its provenance's first GPU), the H200's where
    pkit has no datasheet of it.

    >>> gemm_ceilings({"gpus": ["NVIDIA H100 80GB HBM3"]}).origin.split(":")[0]
    'H100 datasheet'
    """
    gpus = provenance.get("gpus") or []
    return Ceilings.datasheet((datasheet_of(gpus[0]) if gpus else None) or "H200")


def _with_gemm_roofline(gate: pd.DataFrame, dtype: str, ceilings: Ceilings | None) -> pd.DataFrame:
    """`gemm_gate`'s table with each shape's roofline columns (NaN, bound None, where `ceilings` has no rate for
    `dtype`)."""
    c = ceilings or Ceilings.datasheet()
    try:
        c.flops_rate(dtype)
    except ValueError:
        return gate.assign(roofline_tflops=np.nan, bound=None, pkit_of_roofline=np.nan, cublas_of_roofline=np.nan)
    costs = [gemm_cost(m, k, n, ITEMSIZES[dtype]) for m, n, k in gate[["m", "n", "k"]].itertuples(index=False,
                                                                                                   name=None)]
    floors = [floor(cost, c, dtype) for cost in costs]
    roofline = np.array([cost["flops"] / f.time_s / 1e12 for cost, f in zip(costs, floors)])
    return gate.assign(roofline_tflops=roofline, bound=[f.bound for f in floors],
                       pkit_of_roofline=gate["pkit_tflops"] / roofline,
                       cublas_of_roofline=gate["cublas_tflops"] / roofline)


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

