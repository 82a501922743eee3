"""Quickstart study: a peer-copy kernel against the copy engine, GPU `src` → GPU `dst`.

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


def _grid(n16: int, sms: int) -> int:
    return max(1, min(sms * 4, -(-n16 // THREADS)))


def peer_copy_sweep(kernel, sizes_bytes: Sequence[int], src: int = 0, dst: int = 1, reps: int = 20,
                    warmup: int = 5) -> pd.DataFrame:
    """Time one-way copies of each size from GPU `src` to GPU `dst` three ways, verifying each copy.

    `kernel(dst, src, n16)` copies n16 16-byte words; it is launched on `src` (`sm_push`) and on `dst`
    (`sm_pull`); `cudaMemcpyPeerAsync` gives the copy-engine baseline (`ce`). Buffers rotate past the L2 for
    small sizes, and launches queue behind a spin kernel so host overhead stays out. Columns: mechanism, bytes,
    time_{median,min,max,iqr}_us, cv, bandwidth_GBps (10⁹ B/s), verified, rotations.
    """
    import pkit

    from ..ops.transfers import peer_copy
    from .peer_copies import check_sizes_and_pair, time_copy

    sizes = check_sizes_and_pair(sizes_bytes, src, dst, "sizes_bytes")
    team = pkit.Team([src, dst])
    sms = pkit.devices()[src].sms
    rows = []
    for size in tqdm(sizes, desc="peer copy sizes", leave=False):
        n16 = size // 16

        def sm_copy(on, d, s):
            kernel((_grid(n16, sms),), (THREADS,), (np.uint64(d.data.ptr), np.uint64(s.data.ptr), np.uint64(n16)),
                   device=on)

        mechanisms = {"sm_push": (lambda d, s: sm_copy(src, d, s), src),
                      "sm_pull": (lambda d, s: sm_copy(dst, d, s), dst),
                      "ce": (lambda d, s: peer_copy(d, s, "ce"), src)}
        rows += [{"mechanism": name, **time_copy(team, size, fn, device, reps, warmup)}
                 for name, (fn, device) in mechanisms.items()]
    return pd.DataFrame(rows)


def summary(frame: pd.DataFrame, link_GBps: float | None = None) -> pd.DataFrame:
    """Each mechanism at the largest size of a `peer_copy_sweep` frame: bytes, bandwidth_GBps, vs_ce (its
    bandwidth over the copy engine's, ×) and, with `link_GBps` (e.g. the datasheet's one-way NVLink),
    of_link (bandwidth_GBps / link_GBps).

    Example:
        >>> df = pd.DataFrame({"mechanism": ["sm_push", "ce"] * 2, "bytes": [1 << 20] * 2 + [1 << 30] * 2,
        ...                    "bandwidth_GBps": [120.0, 130.0, 369.0, 396.5]})
        >>> summary(df, link_GBps=450.0)[["mechanism", "vs_ce", "of_link"]].round(3).values.tolist()
        [['sm_push', 0.931, 0.82], ['ce', 1.0, 0.881]]
    """
    missing = {"mechanism", "bytes", "bandwidth_GBps"} - set(frame.columns)
    if missing:
        raise ValueError(f"frame: missing columns {sorted(missing)}")
    big = frame.loc[frame["bytes"] == frame["bytes"].max(), ["mechanism", "bytes", "bandwidth_GBps"]]
    if not (big["mechanism"] == "ce").any():
        raise ValueError("frame: expected a row of mechanism 'ce' (the copy engine) at the largest size")
    out = big.assign(vs_ce=big["bandwidth_GBps"] / float(big.loc[big["mechanism"] == "ce", "bandwidth_GBps"].iloc[0]))
    return (out if link_GBps is None else out.assign(of_link=out["bandwidth_GBps"] / link_GBps)).reset_index(drop=True)
