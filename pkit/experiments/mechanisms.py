"""Transfer mechanisms study: copy engine vs register-level vs TMA, by SMs given and by message size.

Example:
    >>> from pkit.experiments import mechanisms
    >>> sweep = mechanisms.sm_sweep(nbytes=256 << 20)                  # doctest: +SKIP
    >>> mechanisms.sms_to_reach(sweep, fraction=0.9)                  # doctest: +SKIP
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from ..ops.transfers import MECHANISMS, peer_copy, worker

SM_MECHANISMS = tuple(m for m in MECHANISMS if m != "copy_engine")


def _check(sizes: Sequence[int], mechanisms: Sequence[str], src: int, dst: int) -> list[int]:
    sizes = [int(s) for s in sizes]
    if not sizes or any(s <= 0 or s % 16 for s in sizes):
        raise ValueError(f"sizes: expected positive multiples of 16 bytes, got {sizes}")
    unknown = [m for m in mechanisms if m not in MECHANISMS]
    if unknown:
        raise ValueError(f"mechanisms: unknown {unknown}; expected names from {MECHANISMS}")
    if src == dst:
        raise ValueError(f"src, dst: expected two different GPUs, got {src} and {dst}")
    return sizes


def _measure(team, size: int, mechanism: str, blocks: int | None, src: int, dst: int, reps: int) -> dict:
    """Verify one copy byte for byte, then time it with buffers rotated past the L2."""
    import cupy as cp

    import pkit

    copies = pkit.timing.rotations_past_l2(size, pkit.devices()[src].l2_bytes)
    srcs = [team.empty((size,), "uint8") for _ in range(copies)]
    dsts = [team.empty((size,), "uint8") for _ in range(copies)]
    data = np.random.default_rng().integers(0, 256, size, dtype=np.uint8)
    for a in srcs:
        a[0].set(data)
    ranks = {src: 0, dst: 1}
    dsts[0].fill(0xA5)
    team.synchronize()
    peer_copy(dsts[0][ranks[dst]], srcs[0][ranks[src]], mechanism, blocks)
    team.synchronize()
    if not np.array_equal(cp.asnumpy(dsts[0][ranks[dst]]), data):
        raise AssertionError(f"{mechanism} with blocks={blocks} copied {size} bytes GPU {src} → {dst} wrongly")
    r = pkit.bench(lambda d, s: peer_copy(d[ranks[dst]], s[ranks[src]], mechanism, blocks),
                   devices=[worker(mechanism, src, dst)], rotate=list(zip(dsts, srcs)), reps=reps, warmup=3,
                   hide_launch=True)
    return {"mechanism": mechanism, "blocks": blocks if mechanism != "copy_engine" else 0, "bytes": size,
            "time_median_us": r.median_us, "time_min_us": r.min_ms * 1e3, "time_max_us": r.max_ms * 1e3,
            "cv": r.cv, "bandwidth_GBps": r.gbps(size), "verified": True}


def sm_sweep(nbytes: int = 256 << 20, blocks: Sequence[int] = (1, 2, 4, 8, 12, 16, 24, 32, 48, 66, 96, 132),
             mechanisms: Sequence[str] = SM_MECHANISMS, src: int = 0, dst: int = 1, reps: int = 10) -> pd.DataFrame:
    """Bandwidth of each SM mechanism by the number of blocks (one per SM) it gets, plus the copy engine.

    Rows: mechanism, blocks (0 for the copy engine), bytes, time_*_us, cv, bandwidth_GBps, verified.
    """
    import pkit

    _check([nbytes], mechanisms, src, dst)
    if not blocks or any(not 1 <= int(b) <= 1024 for b in blocks):
        raise ValueError(f"blocks: expected counts in [1, 1024], got {list(blocks)}")
    team = pkit.Team([src, dst])
    rows = [_measure(team, nbytes, "copy_engine", None, src, dst, reps)]
    for mechanism in tqdm(mechanisms, desc="mechanisms", leave=False):
        rows += [_measure(team, nbytes, mechanism, int(b), src, dst, reps) for b in blocks]
    return pd.DataFrame(rows)


def size_sweep(sizes: Sequence[int] = tuple(4096 << i for i in range(19)), mechanisms: Sequence[str] = MECHANISMS,
               blocks: dict | None = None, src: int = 0, dst: int = 1, reps: int = 20) -> pd.DataFrame:
    """Bandwidth and time of each mechanism by message size (default 4 KiB → 1 GiB).

    `blocks` maps mechanism → blocks (default: all SMs for register copies, 32 for TMA).
    """
    import pkit

    sizes = _check(sizes, mechanisms, src, dst)
    team = pkit.Team([src, dst])
    blocks = blocks or {}
    rows = [_measure(team, size, m, blocks.get(m), src, dst, reps)
            for m in tqdm(mechanisms, desc="mechanisms", leave=False) for size in sizes]
    return pd.DataFrame(rows)


def sms_to_reach(sweep: pd.DataFrame, fraction: float = 0.9, reference: float | None = None) -> pd.DataFrame:
    """Fewest blocks with which each mechanism reaches `fraction` of `reference` GB/s.

    `reference` defaults to the copy engine's bandwidth in the same sweep (the best one-way rate measured).
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction: expected a value in (0, 1], got {fraction}")
    ref = reference if reference is not None else float(
        sweep.loc[sweep["mechanism"] == "copy_engine", "bandwidth_GBps"].max())
    out = []
    for mechanism, group in sweep[sweep["mechanism"] != "copy_engine"].groupby("mechanism"):
        ok = group[group["bandwidth_GBps"] >= fraction * ref].sort_values("blocks")
        out.append({"mechanism": mechanism, "reference_GBps": ref, "fraction": fraction,
                    "blocks_needed": int(ok["blocks"].iloc[0]) if len(ok) else None,
                    "best_GBps": float(group["bandwidth_GBps"].max())})
    return pd.DataFrame(out)
