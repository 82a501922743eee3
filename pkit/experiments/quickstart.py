"""Quickstart study: a copy kernel against the copy engine, GPU `src` → GPU `dst` (a peer copy), or within
one GPU's memory on a machine with one GPU.

Example:
    >>> import pkit
    >>> from pkit.experiments import quickstart
    >>> kernel = pkit.compile("copy.cu", "copy16")                                   # doctest: +SKIP
    >>> quickstart.peer_copy_sweep(kernel, [1 << 20, 1 << 30]).head()               # doctest: +SKIP
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from ..launch import THREADS
from ..ops.transfers import default_route, expand, family, peer_copy


def _grid(n16: int, sms: int) -> int:
    return max(1, min(sms * 4, -(-n16 // THREADS)))


def peer_copy_sweep(kernel, sizes_bytes: Sequence[int], src: int | None = None, dst: int | None = None,
                    reps: int = 20, warmup: int = 5) -> pd.DataFrame:
    """Time one-way copies of each size from GPU `src` (default 0) to GPU `dst` (default: the next GPU, GPU 1
    from GPU 0; on a one-GPU machine `src` itself: a local HBM → HBM copy), verifying each copy.

    `kernel(dst, src, n16)` copies n16 16-byte words. Between two GPUs it is launched on `src` (`sm_push`)
    and on `dst` (`sm_pull`), and `cudaMemcpyPeerAsync` gives the copy-engine baseline (`ce`); within one GPU
    it runs there (`sm`) beside `cudaMemcpyAsync` (`ce`). Buffers rotate past the L2 for small sizes, and
    launches queue behind a spin kernel so host overhead stays out. Bandwidth counts the bytes copied once
    (a local copy also reads them: its memory traffic is twice that). Columns: route ('GPU0 → GPU1'),
    mechanism, bytes, time_{median,min,max,iqr}_us, cv, bandwidth_GBps (10⁹ B/s), verified, rotations.
    """
    import pkit

    from .peer_copies import check_sizes, time_copy

    sizes = check_sizes(sizes_bytes, "sizes_bytes")
    route = default_route(src, dst)
    sms = pkit.devices()[route.src].sms
    rows = []
    for size in tqdm(sizes, desc="copy sizes", leave=False):
        n16 = size // 16

        def copy(mechanism, d, s):
            if family(mechanism) == "ce":
                return peer_copy(d, s, "ce")
            kernel((_grid(n16, sms),), (THREADS,), (np.uint64(d.data.ptr), np.uint64(s.data.ptr), np.uint64(n16)),
                   device=route.worker(mechanism))

        rows += [{"route": route.label, "mechanism": m,
                  **time_copy(route, size, lambda d, s, m=m: copy(m, d, s), route.worker(m), reps, warmup)}
                 for m in expand(route, ["sm", "ce"])]
    return pd.DataFrame(rows)


def summary(frame: pd.DataFrame, link_GBps: float | None = None) -> pd.DataFrame:
    """Each mechanism at the largest size of a `peer_copy_sweep` frame (per route, when the frame has a route
    column): route, bytes, bandwidth_GBps, vs_ce (its bandwidth over the copy engine's on the same route, ×)
    and, with `link_GBps` (e.g. the datasheet's one-way NVLink), of_link (bandwidth_GBps / link_GBps).

    Example:
        >>> df = pd.DataFrame({"mechanism": ["sm_push", "ce"] * 2, "bytes": [1 << 20] * 2 + [1 << 30] * 2,
        ...                    "bandwidth_GBps": [120.0, 130.0, 369.0, 396.5]})
        >>> summary(df, link_GBps=450.0)[["mechanism", "vs_ce", "of_link"]].round(3).values.tolist()
        [['sm_push', 0.931, 0.82], ['ce', 1.0, 0.881]]
        >>> local = pd.DataFrame({"route": ["GPU0 → GPU0"] * 2, "mechanism": ["sm", "ce"], "bytes": [1 << 30] * 2,
        ...                       "bandwidth_GBps": [1945.0, 2095.0]})
        >>> summary(local)[["route", "mechanism", "vs_ce"]].round(3).values.tolist()
        [['GPU0 → GPU0', 'sm', 0.928], ['GPU0 → GPU0', 'ce', 1.0]]
    """
    missing = {"mechanism", "bytes", "bandwidth_GBps"} - set(frame.columns)
    if missing:
        raise ValueError(f"frame: missing columns {sorted(missing)}")
    keys = ["route"] if "route" in frame.columns else []
    parts = [_summary(group) for _, group in (frame.groupby(keys, sort=False) if keys else [(None, frame)])]
    out = pd.concat(parts, ignore_index=True)[keys + ["mechanism", "bytes", "bandwidth_GBps", "vs_ce"]]
    return out if link_GBps is None else out.assign(of_link=out["bandwidth_GBps"] / link_GBps)


def _summary(frame: pd.DataFrame) -> pd.DataFrame:
    """One route's rows at its largest size, with vs_ce."""
    big = frame.loc[frame["bytes"] == frame["bytes"].max()]
    ce = big.loc[big["mechanism"] == "ce", "bandwidth_GBps"]
    if ce.empty:
        where = f" of route {big['route'].iloc[0]!r}" if "route" in big.columns else ""
        raise ValueError(f"frame: expected a row of mechanism 'ce' (the copy engine) at the largest size{where}")
    return big.assign(vs_ce=big["bandwidth_GBps"] / float(ce.iloc[0]))


def best_peer_copy(frame: pd.DataFrame) -> pd.Series | None:
    """The fastest mechanism's row at the largest size among a `peer_copy_sweep` frame's copies between two GPUs
    (frames recorded before routes were named were all GPU0 → GPU1); None when the frame holds no peer copy (a
    one-GPU machine's quickstart copies within HBM).

    Example:
        >>> df = pd.DataFrame({"mechanism": ["sm_push", "ce"], "bytes": [1 << 30] * 2, "bandwidth_GBps": [369.0, 396.5]})
        >>> best_peer_copy(df)["mechanism"], best_peer_copy(df.assign(route="GPU0 → GPU0"))
        ('ce', None)
    """
    from ..ops.transfers import Route, with_route

    frame = with_route(frame)
    peer = frame[[Route.parse(r).kind == "peer" for r in frame["route"]]]
    if peer.empty:
        return None
    return peer[peer["bytes"] == peer["bytes"].max()].sort_values("bandwidth_GBps").iloc[-1]
