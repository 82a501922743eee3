"""Shared measurement of one GPU-to-GPU copy: verify every byte once, then time it past the L2.

Used by the quickstart, mechanisms, hierarchy and ceilings studies, each with its own ways of copying.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np


def check_sizes_and_pair(sizes: Sequence[int], src: int, dst: int, arg: str = "sizes") -> list[int]:
    """`sizes` (the argument named `arg`) checked to be positive integer multiples of 16 bytes, and `src`
    and `dst` to differ; returns the sizes as ints."""
    sizes = list(sizes)
    if not sizes or not all(isinstance(s, (int, np.integer)) and s > 0 and s % 16 == 0 for s in sizes):
        raise ValueError(f"{arg}: expected positive multiples of 16 bytes, got {sizes!r}")
    if src == dst:
        raise ValueError(f"src, dst: expected two different GPUs, got {src} and {dst}")
    return [int(s) for s in sizes]


def time_copy(team, size: int, copy: Callable, worker: int, reps: int, warmup: int) -> dict:
    """Copy `size` fresh random bytes from team rank 0 to rank 1 with `copy(dst_array, src_array)`, check every
    byte, then time it on GPU `worker` with buffers rotated past the L2 and launches hidden.

    Returns bytes, time_{median,min,max,iqr}_us, cv, bandwidth_GBps (10⁹ B/s), verified, rotations.
    """
    import pkit

    copies = pkit.timing.rotations_past_l2(size, pkit.devices()[team.devices[0]].l2_bytes)
    pairs = [(team.empty((size,), "uint8"), team.empty((size,), "uint8")) for _ in range(copies)]
    return time_copies([(d[1], s[0]) for d, s in pairs], copy, worker, reps, warmup)


def time_copies(pairs: Sequence[tuple], copy: Callable, worker: int, reps: int, warmup: int) -> dict:
    """`time_copy` on buffers the caller made: `pairs` of (dst, src) CuPy byte arrays of one size (one pair per
    rotation; any GPUs). Every source gets the same fresh random bytes, pair 0's copy is checked byte for byte,
    then `copy(dst, src)` is timed on GPU `worker`, rotating through the pairs. Returns what `time_copy` does.
    """
    import cupy as cp

    import pkit

    dst, src = pairs[0]
    size = src.nbytes
    data = np.random.default_rng().integers(0, 256, size, dtype=np.uint8)
    for _, s in pairs:
        with s.device:
            s.set(data)
    with dst.device:
        dst.fill(0xA5)
    devices = sorted({src.device.id, dst.device.id, worker})
    pkit.synchronize(devices)
    copy(dst, src)
    pkit.synchronize(devices)
    if not np.array_equal(cp.asnumpy(dst), data):
        raise AssertionError(f"copy of {size} bytes from GPU {src.device.id} to GPU {dst.device.id} is wrong")
    r = pkit.bench(copy, devices=[worker], rotate=list(pairs), reps=reps, warmup=warmup, hide_launch=True)
    return {"bytes": size, **r.times_us(), "time_iqr_us": r.iqr_ms * 1e3, "bandwidth_GBps": r.gbps(size),
            "verified": True, "rotations": len(pairs)}
