"""Transfer mechanisms study: copy engine (`ce`) vs register-level (`sm_push`, `sm_pull`; `sm` on one GPU) vs
TMA (`tma_push`, `tma_pull`; `tma`), by SMs given and by message size, per route (`pkit.ops.transfers.Route`).

By default the study measures what the machine has: the peer route GPU0 → GPU1 with two GPUs or more, else
GPU0's local copy (HBM → HBM), host → device and device → host copies (pinned host memory over PCIe).
Bandwidth counts the bytes copied once (a local copy moves twice that through HBM: a read and a write).

Example:
    >>> from pkit.experiments import mechanisms
    >>> sweep = mechanisms.sm_sweep(nbytes=256 << 20)                  # doctest: +SKIP
    >>> mechanisms.sms_to_reach(sweep, fraction=0.9)                  # doctest: +SKIP
"""
from __future__ import annotations

from typing import Sequence

import pandas as pd
from tqdm.auto import tqdm

from ..ops.transfers import (MECHANISMS, Route, check_mechanisms, check_routes, default_route, default_routes, expand,
                             gpu_count, peer_copy, split_copy)
from .peer_copies import check_sizes, time_copy

SM_MECHANISMS = tuple(m for m in MECHANISMS if m != "ce")  # the peer route's SM and TMA mechanisms


def resolve_routes(routes=None, src: int | None = None, dst: int | None = None) -> list[Route]:
    """The routes a sweep measures: `routes` (Routes or labels), or the route GPU `src` → GPU `dst` when either
    is given (`transfers.default_route`), else `transfers.default_routes()`: what the machine has."""
    if routes is not None and (src is not None or dst is not None):
        raise ValueError(f"routes, src, dst: expected routes or src/dst, not both; got routes={routes!r}, "
                         f"src={src!r}, dst={dst!r}")
    if routes is not None:
        return check_routes(routes)
    return default_routes() if src is None and dst is None else [default_route(src, dst)]


def plan(routes: Sequence[Route], mechanisms: Sequence[str] | None) -> list[tuple[Route, list[str]]]:
    """Each route with the mechanisms of `mechanisms` (names or families; None: all) it has.

    Example:
        >>> [(r.label, m) for r, m in plan([Route(0, 1), Route(None, 0)], ["ce", "sm"])]
        [('GPU0 → GPU1', ['ce', 'sm_push', 'sm_pull']), ('CPU → GPU0', ['ce', 'sm'])]
        >>> plan([Route(0, 0)], ["tma_pull"])
        Traceback (most recent call last):
        ...
        ValueError: mechanisms: ['tma_pull'] run on none of the routes ['GPU0 → GPU0']; their mechanisms: ['ce', 'sm', 'tma']
    """
    pairs = [(r, expand(r, mechanisms)) for r in routes]
    unused = [n for n in (mechanisms or ()) if not any(expand(r, [n]) for r in routes)]
    if unused:
        raise ValueError(f"mechanisms: {unused} run on none of the routes {[r.label for r in routes]}; "
                         f"their mechanisms: {sorted({m for r in routes for m in r.mechanisms})}")
    return pairs


def measure_copy(route: Route, size: int, mechanism: str, blocks: int | None = None, reps: int = 10,
                 warmup: int = 3) -> dict:
    """One mechanism's verified, timed copy of `size` bytes along `route` (`peer_copies.time_copy`): a row with
    route, mechanism, blocks (0 for the copy engine) and time_copy's columns."""
    row = time_copy(route, size, lambda d, s: peer_copy(d, s, mechanism, blocks), route.worker(mechanism), reps,
                    warmup)
    return {"route": route.label, "mechanism": mechanism, "blocks": blocks if mechanism != "ce" else 0, **row}


def sm_sweep(nbytes: int = 256 << 20, blocks: Sequence[int] = (1, 2, 4, 8, 12, 16, 24, 32, 48, 66, 96, 132),
             mechanisms: Sequence[str] = ("sm", "tma"), src: int | None = None, dst: int | None = None,
             reps: int = 10, routes=None) -> pd.DataFrame:
    """Bandwidth of each SM mechanism by the number of blocks (one per SM) it gets, plus the copy engine, on
    each route (default: `resolve_routes`). `mechanisms`: names or families ('sm', 'tma': every SM or TMA
    mechanism of the route; on a peer route sm_push, sm_pull, tma_push, tma_pull).

    Rows: route, mechanism, blocks (0 for the copy engine), bytes, time_*_us, cv, bandwidth_GBps (10⁹ B/s
    copied), verified, rotations.
    """
    check_sizes([nbytes], "nbytes")
    check_mechanisms(mechanisms)
    if not blocks or any(not 1 <= int(b) <= 1024 for b in blocks):
        raise ValueError(f"blocks: expected counts in [1, 1024], got {list(blocks)}")
    rows = []
    for route, names in plan(resolve_routes(routes, src, dst), mechanisms):
        rows.append(measure_copy(route, nbytes, "ce", None, reps))
        for mechanism in tqdm([m for m in names if m != "ce"], desc=f"mechanisms {route}", leave=False):
            rows += [measure_copy(route, nbytes, mechanism, int(b), reps) for b in blocks]
    return pd.DataFrame(rows)


def size_sweep(sizes: Sequence[int] = tuple(4096 << i for i in range(19)), mechanisms: Sequence[str] | None = None,
               blocks: dict | None = None, src: int | None = None, dst: int | None = None, reps: int = 20,
               routes=None) -> pd.DataFrame:
    """Bandwidth and time of each mechanism by message size (default 4 KiB → 1 GiB) on each route (default:
    `resolve_routes`); `mechanisms`: names or families (None: every mechanism of each route).

    `blocks` maps mechanism → blocks (default: all SMs for register copies, 32 for TMA). Rows: route,
    mechanism, blocks (None: the default grid; 0 for the copy engine), bytes, time_*_us, cv, bandwidth_GBps
    (10⁹ B/s copied), verified, rotations.
    """
    sizes = check_sizes(sizes)
    check_mechanisms(mechanisms)
    blocks = blocks or {}
    return pd.DataFrame([measure_copy(route, size, m, blocks.get(m), reps)
                         for route, names in plan(resolve_routes(routes, src, dst), mechanisms)
                         for m in tqdm(names, desc=f"mechanisms {route}", leave=False) for size in sizes])


SPLITS = (("sm_push", "sm_pull"), ("ce", "sm_pull"))


def split_sweep(nbytes: int = 256 << 20, pairs: Sequence[tuple[str, str]] = SPLITS,
                fractions: Sequence[float] = (0.0, 0.25, 0.5, 0.75, 0.9, 1.0), src: int | None = None,
                dst: int | None = None, reps: int = 10) -> pd.DataFrame:
    """Bandwidth of one copy shared by two mechanisms running at once on the two GPUs (`split_copy`), by the
    share the first one moves: can both GPUs' SMs together, or SMs beside the copy engine, beat either alone?
    Needs two GPUs (default: GPU 0 → GPU 1).

    Rows: route, first, second, fraction_first, bytes, time_*_us, cv, bandwidth_GBps, verified, rotations.
    """
    names = [m for pair in pairs for m in pair]
    unknown = [m for m in names if m not in MECHANISMS]
    if unknown:
        raise ValueError(f"mechanisms: unknown {unknown}; expected peer mechanisms from {MECHANISMS}")
    check_sizes([nbytes], "nbytes")
    if not fractions or any(not 0 <= f <= 1 for f in fractions):
        raise ValueError(f"fractions: expected shares in [0, 1], got {list(fractions)}")
    route = default_route(src, dst)
    if route.kind != "peer":
        n = gpu_count()
        raise ValueError(f"src, dst: expected two GPUs (one pushes while the other pulls), got {route.label}; this "
                         f"machine has {n} GPU{'' if n == 1 else 's'}: split_sweep needs two")
    rows = []
    for first, second in tqdm(pairs, desc="splits", leave=False):
        for f in fractions:
            row = time_copy(route, nbytes, lambda d, s: split_copy(d, s, first, second, f), route.worker(first),
                            reps, warmup=3)
            rows.append({"route": route.label, "first": first, "second": second, "fraction_first": float(f), **row})
    return pd.DataFrame(rows)


def sms_to_reach(sweep: pd.DataFrame, fraction: float = 0.9, reference: float | None = None,
                 link_GBps: float | None = None) -> pd.DataFrame:
    """Fewest blocks with which each mechanism reaches `fraction` of `reference` GB/s, per route when the
    frame has a route column (a frame without one, as recorded on 2 GPUs before routes, is one route).

    `reference` defaults to the copy engine's bandwidth on the same route in the same sweep (the best rate
    measured there). Columns: route (when the frame has it), mechanism, reference_GBps, fraction, blocks_needed
    (None: never), best_GBps, and with `link_GBps` (e.g. the datasheet's one-way NVLink) best_of_link,
    best_GBps / link_GBps.

    Example:
        >>> sweep = pd.DataFrame({"mechanism": ["ce", "sm_push", "sm_push", "tma_pull"], "blocks": [0, 8, 32, 8],
        ...                       "bandwidth_GBps": [400.0, 200.0, 380.0, 370.0]})
        >>> sms_to_reach(sweep, 0.9, link_GBps=450.0)[["mechanism", "blocks_needed", "best_of_link"]].round(3)
          mechanism  blocks_needed  best_of_link
        0   sm_push             32         0.844
        1  tma_pull              8         0.822
        >>> one_gpu = pd.DataFrame({"route": ["GPU0 → GPU0"] * 3 + ["CPU → GPU0"] * 3,
        ...                         "mechanism": ["ce", "sm", "sm"] * 2, "blocks": [0, 8, 32] * 2,
        ...                         "bandwidth_GBps": [2095.0, 900.0, 1950.0, 55.5, 30.0, 54.0]})
        >>> sms_to_reach(one_gpu)[["route", "mechanism", "reference_GBps", "blocks_needed"]].values.tolist()
        [['GPU0 → GPU0', 'sm', 2095.0, 32], ['CPU → GPU0', 'sm', 55.5, 32]]
    """
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction: expected a value in (0, 1], got {fraction}")
    out = _per_route(sweep, lambda group: _sms_to_reach(group, fraction, reference))
    return out if link_GBps is None else out.assign(best_of_link=out["best_GBps"] / link_GBps)


def _sms_to_reach(sweep: pd.DataFrame, fraction: float, reference: float | None) -> pd.DataFrame:
    """`sms_to_reach` on one route's rows."""
    ref = reference if reference is not None else float(
        sweep.loc[sweep["mechanism"] == "ce", "bandwidth_GBps"].max())
    out = []
    for mechanism, group in sweep[sweep["mechanism"] != "ce"].groupby("mechanism", sort=False):
        ok = group[group["bandwidth_GBps"] >= fraction * ref].sort_values("blocks")
        out.append({"mechanism": mechanism, "reference_GBps": ref, "fraction": fraction,
                    "blocks_needed": int(ok["blocks"].iloc[0]) if len(ok) else None,
                    "best_GBps": float(group["bandwidth_GBps"].max())})
    return pd.DataFrame(out)


def _per_route(frame: pd.DataFrame, summarize) -> pd.DataFrame:
    """`summarize(rows)` per route, route first, in the frame's order; the whole frame when it has no route column."""
    if "route" not in frame.columns:
        return summarize(frame)
    parts = [summarize(group).assign(route=route) for route, group in frame.groupby("route", sort=False)]
    out = pd.concat(parts, ignore_index=True)
    return out[["route"] + [c for c in out.columns if c != "route"]]


def _by_size(sizes: pd.DataFrame, values: str) -> pd.DataFrame:
    """`values` of a `size_sweep` frame as a table: a row per message size (per route and size when the frame
    has routes), a column per mechanism."""
    missing = {"mechanism", "bytes", values} - set(sizes.columns)
    if missing:
        raise ValueError(f"sizes: missing columns {sorted(missing)}")
    index = ["route", "bytes"] if "route" in sizes.columns else "bytes"
    return sizes.pivot(index=index, columns="mechanism", values=values)


def _sizes(table: pd.DataFrame):
    return table.index.get_level_values("bytes")


def small_message_times(sizes: pd.DataFrame, max_bytes: int = 64 << 10) -> pd.DataFrame:
    """Median time per copy in µs of each mechanism (columns) at each size up to `max_bytes` (rows; per route
    and size when the frame has routes), from a `size_sweep` frame: the fixed costs small messages are made of.

    Example:
        >>> df = pd.DataFrame({"mechanism": ["ce", "sm_push"] * 2, "bytes": [4096, 4096, 1 << 20, 1 << 20],
        ...                    "time_median_us": [5.3, 5.4, 8.0, 9.0]})
        >>> small_message_times(df).to_dict("index")
        {4096: {'ce': 5.3, 'sm_push': 5.4}}
        >>> small_message_times(df.assign(route="GPU0 → GPU1")).to_dict("index")
        {('GPU0 → GPU1', 4096): {'ce': 5.3, 'sm_push': 5.4}}
    """
    table = _by_size(sizes, "time_median_us")
    return table[_sizes(table) <= max_bytes]


def best_sm_vs_ce(sizes: pd.DataFrame, min_bytes: int = 64 << 20) -> pd.DataFrame:
    """Per message size from `min_bytes` up (per route and size when the frame has routes): the fastest SM
    mechanism of a `size_sweep` frame against the copy engine measured in the same sweep on the same route.
    Columns: best_sm_mechanism, best_sm_GBps, ce_GBps, ratio (best SM / copy engine; 1 would match it).

    Example:
        >>> df = pd.DataFrame({"mechanism": ["ce", "sm_push", "tma_pull"], "bytes": [1 << 30] * 3,
        ...                    "bandwidth_GBps": [400.0, 370.0, 380.0]})
        >>> best_sm_vs_ce(df).to_dict("index")
        {1073741824: {'best_sm_mechanism': 'tma_pull', 'best_sm_GBps': 380.0, 'ce_GBps': 400.0, 'ratio': 0.95}}
        >>> one_gpu = pd.DataFrame({"route": ["GPU0 → GPU0"] * 3 + ["CPU → GPU0"] * 2, "bytes": [1 << 30] * 5,
        ...                         "mechanism": ["ce", "sm", "tma", "ce", "sm"],
        ...                         "bandwidth_GBps": [2095.0, 1945.0, 1800.0, 55.5, 53.0]})
        >>> best_sm_vs_ce(one_gpu)[["best_sm_mechanism", "ratio"]].round(3).to_dict("index")
        {('CPU → GPU0', 1073741824): {'best_sm_mechanism': 'sm', 'ratio': 0.955}, ('GPU0 → GPU0', 1073741824): {'best_sm_mechanism': 'sm', 'ratio': 0.928}}
    """
    table = _by_size(sizes, "bandwidth_GBps")
    large = table[_sizes(table) >= min_bytes]
    if "ce" not in large.columns or large["ce"].isna().any():
        raise ValueError("sizes: expected rows of mechanism 'ce' (the copy engine) to compare with, on every route")
    sm = large.drop(columns="ce").dropna(axis=1, how="all")
    if sm.empty or sm.isna().all(axis=1).any():
        raise ValueError("sizes: expected rows of an SM mechanism beside 'ce' at every size from min_bytes up")
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


def plot_splits(splits: pd.DataFrame, provenance: dict):
    """A `split_sweep` frame as one line per pair of mechanisms (coloured and marked as its first mechanism),
    bandwidth (GB/s, from 0, so a few percent look like a few percent) by the first mechanism's share, with the
    times' interquartile range as bars (`pkit.figures.bandwidth_spread`) and the copy engine alone dashed. Returns
    the figure.

    Example:
        >>> import matplotlib; matplotlib.use("Agg")
        >>> df = pd.DataFrame({"first": ["sm_push"] * 2 + ["ce"] * 2, "second": ["sm_pull"] * 4,
        ...                    "fraction_first": [0.0, 1.0] * 2, "bytes": [1 << 28] * 4,
        ...                    "bandwidth_GBps": [366.0, 367.0, 363.0, 392.5], "time_median_us": [733.0, 731.0, 739.0, 684.0],
        ...                    "time_iqr_us": [9.0, 5.0, 4.0, 3.0]})
        >>> ax = plot_splits(df, {"machine": "m", "gpus": ["G"] * 2}).axes[0]
        >>> float(ax.get_ylim()[0]), [t.get_text() for t in ax.get_legend().get_texts()]
        (0.0, ['copy engine alone', 'SM push + SM pull', 'copy engine + SM pull'])
    """
    from .. import figures

    fig, ax = figures.subplots()
    for (first, second), group in splits.groupby(["first", "second"], sort=False):
        ax.errorbar(group["fraction_first"], group["bandwidth_GBps"], yerr=figures.bandwidth_spread(group), capsize=2,
                    **{**figures.line_look(first, "o"), "ls": "-",
                       "label": f"{figures.label(first)} + {figures.label(second)}"})
    ax.axhline(split_gains(splits)["ce_alone_GBps"].iloc[0], color="0.3", ls="--", lw=1, label="copy engine alone")
    ax.set(xlabel="share of the bytes moved by the first mechanism", ylabel="bandwidth (GB/s)",
           ylim=(0, splits["bandwidth_GBps"].max() * 1.15))
    ax.xaxis.set_major_formatter(lambda v, _: f"{v:.0%}")
    ax.legend(loc="lower center")
    nbytes = int(splits["bytes"].iloc[0])
    figures.suptitle(fig, f"GPU0 → GPU1, {figures.byte_label(nbytes)} split between two mechanisms", provenance)
    figures.caption(fig, f"Each point: median of {provenance.get('parameters', {}).get('reps', 'the')} joined copies, "
                         "both mechanisms at once, timed from the first GPU's start to the end of both; bars: the "
                         "times' interquartile range (its width, centred on the median). Colour and marker: the first "
                         "mechanism's. The y axis starts at 0.")
    return fig
