"""Transfer mechanisms study: copy engine (`ce`) vs register-level (`sm_push`, `sm_pull`) vs TMA (`tma_push`,
`tma_pull`), by SMs given and by message size.

Example:
    >>> from pkit.experiments import mechanisms
    >>> sweep = mechanisms.sm_sweep(nbytes=256 << 20)                  # doctest: +SKIP
    >>> mechanisms.sms_to_reach(sweep, fraction=0.9)                  # doctest: +SKIP
"""
from __future__ import annotations

from typing import Sequence

import pandas as pd
from tqdm.auto import tqdm

from ..ops.transfers import MECHANISMS, peer_copy, split_copy, worker
from .peer_copies import check_sizes_and_pair, time_copy

SM_MECHANISMS = tuple(m for m in MECHANISMS if m != "ce")


def _check(sizes: Sequence[int], mechanisms: Sequence[str], src: int, dst: int) -> list[int]:
    unknown = [m for m in mechanisms if m not in MECHANISMS]
    if unknown:
        raise ValueError(f"mechanisms: unknown {unknown}; expected names from {MECHANISMS}")
    return check_sizes_and_pair(sizes, src, dst)


def _measure(team, size: int, mechanism: str, blocks: int | None, src: int, dst: int, reps: int) -> dict:
    """One mechanism's verified, timed copy of `size` bytes from team rank 0 (GPU src) to rank 1 (GPU dst)."""
    row = time_copy(team, size, lambda d, s: peer_copy(d, s, mechanism, blocks), worker(mechanism, src, dst),
                    reps, warmup=3)
    return {"mechanism": mechanism, "blocks": blocks if mechanism != "ce" else 0, **row}


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
    rows = [_measure(team, nbytes, "ce", None, src, dst, reps)]
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


SPLITS = (("sm_push", "sm_pull"), ("ce", "sm_pull"))


def split_sweep(nbytes: int = 256 << 20, pairs: Sequence[tuple[str, str]] = SPLITS,
                fractions: Sequence[float] = (0.0, 0.25, 0.5, 0.75, 0.9, 1.0), src: int = 0, dst: int = 1,
                reps: int = 10) -> pd.DataFrame:
    """Bandwidth of one copy shared by two mechanisms running at once on the two GPUs (`split_copy`), by the
    share the first one moves: can both GPUs' SMs together, or SMs beside the copy engine, beat either alone?

    Rows: first, second, fraction_first, bytes, time_*_us, cv, bandwidth_GBps, verified, rotations.
    """
    import pkit

    _check([nbytes], [m for pair in pairs for m in pair], src, dst)
    if not fractions or any(not 0 <= f <= 1 for f in fractions):
        raise ValueError(f"fractions: expected shares in [0, 1], got {list(fractions)}")
    team = pkit.Team([src, dst])
    rows = []
    for first, second in tqdm(pairs, desc="splits", leave=False):
        for f in fractions:
            row = time_copy(team, nbytes, lambda d, s: split_copy(d, s, first, second, f), worker(first, src, dst),
                            reps, warmup=3)
            rows.append({"first": first, "second": second, "fraction_first": float(f), **row})
    return pd.DataFrame(rows)


def sms_to_reach(sweep: pd.DataFrame, fraction: float = 0.9, reference: float | None = None) -> pd.DataFrame:
    """Fewest blocks with which each mechanism reaches `fraction` of `reference` GB/s.

    `reference` defaults to the copy engine's bandwidth in the same sweep (the best one-way rate measured).
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction: expected a value in (0, 1], got {fraction}")
    ref = reference if reference is not None else float(
        sweep.loc[sweep["mechanism"] == "ce", "bandwidth_GBps"].max())
    out = []
    for mechanism, group in sweep[sweep["mechanism"] != "ce"].groupby("mechanism"):
        ok = group[group["bandwidth_GBps"] >= fraction * ref].sort_values("blocks")
        out.append({"mechanism": mechanism, "reference_GBps": ref, "fraction": fraction,
                    "blocks_needed": int(ok["blocks"].iloc[0]) if len(ok) else None,
                    "best_GBps": float(group["bandwidth_GBps"].max())})
    return pd.DataFrame(out)
