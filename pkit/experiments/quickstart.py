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

THREADS = 512


def _grid(n16: int, sms: int) -> int:
    return max(1, min(sms * 4, -(-n16 // THREADS)))


def peer_copy_sweep(kernel, sizes_bytes: Sequence[int], src: int = 0, dst: int = 1, reps: int = 20,
                    warmup: int = 5) -> pd.DataFrame:
    """Time one-way copies of each size from GPU `src` to GPU `dst` three ways, verifying each copy.

    `kernel(dst, src, n16)` copies n16 16-byte words; it is launched on `src` (SM push) and on `dst`
    (SM pull); `cudaMemcpyPeerAsync` gives the copy-engine baseline. Buffers rotate past the L2 for small
    sizes, and launches queue behind a spin kernel so host overhead stays out. Columns: mechanism, bytes, time_{median,min,max,iqr}_us, cv, bandwidth_GBps (10⁹ B/s), verified.
    """
    import cupy as cp

    import pkit

    sizes = [int(s) for s in sizes_bytes]
    if not sizes or any(s <= 0 or s % 16 for s in sizes):
        raise ValueError(f"sizes_bytes: expected positive multiples of 16 bytes, got {list(sizes_bytes)}")
    if src == dst:
        raise ValueError(f"src, dst: expected two different GPUs, got {src} and {dst}")
    team = pkit.Team([src, dst])
    l2, sms = pkit.devices()[src].l2_bytes, pkit.devices()[src].sms
    rows = []
    for size in tqdm(sizes, desc="peer copy sizes", leave=False):
        copies = pkit.timing.rotations_past_l2(size, l2)
        srcs = [team.empty((size,), "uint8") for _ in range(copies)]
        dsts = [team.empty((size,), "uint8") for _ in range(copies)]
        data = np.random.default_rng().integers(0, 256, size, dtype=np.uint8)
        for a in srcs:
            a[0].set(data)
        n16 = size // 16

        def sm_copy(on, d, s):
            kernel((_grid(n16, sms),), (THREADS,), (np.uint64(d[1].data.ptr), np.uint64(s[0].data.ptr),
                                                    np.uint64(n16)), device=on)

        def copy_engine(d, s):
            with cp.cuda.Device(src):
                cp.cuda.runtime.memcpyPeerAsync(d[1].data.ptr, dst, s[0].data.ptr, src, size,
                                                cp.cuda.get_current_stream().ptr)

        mechanisms = {"sm_push": (lambda d, s: sm_copy(src, d, s), src),
                      "sm_pull": (lambda d, s: sm_copy(dst, d, s), dst),
                      "copy_engine": (copy_engine, src)}
        for name, (fn, device) in mechanisms.items():
            dsts[0].fill(0xA5)
            team.synchronize()
            fn(dsts[0], srcs[0])
            team.synchronize()
            verified = bool(np.array_equal(cp.asnumpy(dsts[0][1]), data))
            if not verified:
                raise AssertionError(f"{name} copy of {size} bytes from GPU {src} to GPU {dst} is wrong")
            r = pkit.bench(fn, devices=[device], rotate=list(zip(dsts, srcs)), reps=reps, warmup=warmup,
                           hide_launch=True)
            rows.append({"mechanism": name, "bytes": size, "time_median_us": r.median_us,
                         "time_min_us": r.min_ms * 1e3, "time_max_us": r.max_ms * 1e3,
                         "time_iqr_us": r.iqr_ms * 1e3, "cv": r.cv, "bandwidth_GBps": r.gbps(size),
                         "verified": verified, "rotations": copies})
        del srcs, dsts
    return pd.DataFrame(rows)
