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


def sms_to_reach(sweep: pd.DataFrame, fraction: float = 0.9, reference: float | None = None,
                 link_GBps: float | None = None) -> pd.DataFrame:
    """Fewest blocks with which each mechanism reaches `fraction` of `reference` GB/s.

    `reference` defaults to the copy engine's bandwidth in the same sweep (the best one-way rate measured).
    Columns: mechanism, reference_GBps, fraction, blocks_needed (None: never), best_GBps, and with `link_GBps`
    (e.g. the datasheet's one-way NVLink) best_of_link, best_GBps / link_GBps.

    Example:
        >>> sweep = pd.DataFrame({"mechanism": ["ce", "sm_push", "sm_push", "tma_pull"], "blocks": [0, 8, 32, 8],
        ...                       "bandwidth_GBps": [400.0, 200.0, 380.0, 370.0]})
        >>> sms_to_reach(sweep, 0.9, link_GBps=450.0)[["mechanism", "blocks_needed", "best_of_link"]].round(3)
          mechanism  blocks_needed  best_of_link
        0   sm_push             32         0.844
        1  tma_pull              8         0.822
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
    out = pd.DataFrame(out)
    return out if link_GBps is None else out.assign(best_of_link=out["best_GBps"] / link_GBps)


def _by_size(sizes: pd.DataFrame, values: str) -> pd.DataFrame:
    """`values` of a `size_sweep` frame as a table: a row per message size, a column per mechanism."""
    missing = {"mechanism", "bytes", values} - set(sizes.columns)
    if missing:
        raise ValueError(f"sizes: missing columns {sorted(missing)}")
    return sizes.pivot(index="bytes", columns="mechanism", values=values)


def small_message_times(sizes: pd.DataFrame, max_bytes: int = 64 << 10) -> pd.DataFrame:
    """Median time per copy in µs of each mechanism (columns) at each size up to `max_bytes` (rows), from a
    `size_sweep` frame: the fixed costs that small messages are made of.

    Example:
        >>> df = pd.DataFrame({"mechanism": ["ce", "sm_push"] * 2, "bytes": [4096, 4096, 1 << 20, 1 << 20],
        ...                    "time_median_us": [5.3, 5.4, 8.0, 9.0]})
        >>> small_message_times(df).to_dict("index")
        {4096: {'ce': 5.3, 'sm_push': 5.4}}
    """
    table = _by_size(sizes, "time_median_us")
    return table[table.index <= max_bytes]


def best_sm_vs_ce(sizes: pd.DataFrame, min_bytes: int = 64 << 20) -> pd.DataFrame:
    """Per message size from `min_bytes` up: the fastest SM mechanism of a `size_sweep` frame against the copy
    engine measured in the same sweep. Columns: best_sm_mechanism, best_sm_GBps, ce_GBps, ratio (best SM /
    copy engine; 1 would match it).

    Example:
        >>> df = pd.DataFrame({"mechanism": ["ce", "sm_push", "tma_pull"], "bytes": [1 << 30] * 3,
        ...                    "bandwidth_GBps": [400.0, 370.0, 380.0]})
        >>> best_sm_vs_ce(df).to_dict("index")
        {1073741824: {'best_sm_mechanism': 'tma_pull', 'best_sm_GBps': 380.0, 'ce_GBps': 400.0, 'ratio': 0.95}}
    """
    table = _by_size(sizes, "bandwidth_GBps")
    large = table[table.index >= min_bytes]
    if "ce" not in large.columns:
        raise ValueError("sizes: expected rows of mechanism 'ce' (the copy engine) to compare with")
    sm = large.drop(columns="ce")
    out = pd.DataFrame({"best_sm_mechanism": sm.idxmax(axis=1), "best_sm_GBps": sm.max(axis=1),
                        "ce_GBps": large["ce"]})
    return out.assign(ratio=out["best_sm_GBps"] / out["ce_GBps"])


def split_gains(splits: pd.DataFrame) -> pd.DataFrame:
    """Per pair of a `split_sweep` frame: the share of the bytes the first mechanism moves at the pair's best
    bandwidth (best_fraction_first), that bandwidth (best_GBps), each mechanism alone (first_alone_GBps at
    share 1, second_alone_GBps at share 0; NaN where not measured), the copy engine alone in the same sweep
    (ce_alone_GBps; NaN when no pair has it) and best_over_ce, best_GBps / ce_alone_GBps. GB/s but the ratio.

    Example:
        >>> df = pd.DataFrame({"first": ["sm_push"] * 3 + ["ce"] * 2, "second": ["sm_pull"] * 3 + ["sm_pull"] * 2,
        ...                    "fraction_first": [0.0, 0.5, 1.0, 0.0, 1.0],
        ...                    "bandwidth_GBps": [370.0, 372.0, 368.0, 370.0, 395.0]})
        >>> split_gains(df)[["first", "best_fraction_first", "best_GBps", "best_over_ce"]].round(3)
             first  best_fraction_first  best_GBps  best_over_ce
        0  sm_push                  0.5      372.0         0.942
        1       ce                  1.0      395.0         1.000
    """
    missing = {"first", "second", "fraction_first", "bandwidth_GBps"} - set(splits.columns)
    if missing:
        raise ValueError(f"splits: missing columns {sorted(missing)}")

    def alone(group, share):
        at = group.loc[group["fraction_first"] == share, "bandwidth_GBps"]
        return float(at.iloc[0]) if len(at) else float("nan")

    ce = pd.concat([splits.loc[(splits["first"] == "ce") & (splits["fraction_first"] == 1.0), "bandwidth_GBps"],
                    splits.loc[(splits["second"] == "ce") & (splits["fraction_first"] == 0.0), "bandwidth_GBps"]])
    ce_GBps = float(ce.iloc[0]) if len(ce) else float("nan")
    rows = []
    for (first, second), group in splits.groupby(["first", "second"], sort=False):
        best = group.loc[group["bandwidth_GBps"].idxmax()]
        rows.append({"first": first, "second": second, "best_fraction_first": float(best["fraction_first"]),
                     "best_GBps": float(best["bandwidth_GBps"]), "first_alone_GBps": alone(group, 1.0),
                     "second_alone_GBps": alone(group, 0.0), "ce_alone_GBps": ce_GBps,
                     "best_over_ce": float(best["bandwidth_GBps"]) / ce_GBps})
    return pd.DataFrame(rows)
