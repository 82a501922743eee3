"""Shared measurement of one GPU-to-GPU copy: verify every byte once, then time it past the L2.

Used by the quickstart, mechanisms and hierarchy studies, each with its own ways of copying.
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
    import cupy as cp

    import pkit

    copies = pkit.timing.rotations_past_l2(size, pkit.devices()[team.devices[0]].l2_bytes)
    srcs = [team.empty((size,), "uint8") for _ in range(copies)]
    dsts = [team.empty((size,), "uint8") for _ in range(copies)]
    data = np.random.default_rng().integers(0, 256, size, dtype=np.uint8)
    for a in srcs:
        a[0].set(data)
    dsts[0].fill(0xA5)
    team.synchronize()
    copy(dsts[0][1], srcs[0][0])
    team.synchronize()
    if not np.array_equal(cp.asnumpy(dsts[0][1]), data):
        raise AssertionError(f"copy of {size} bytes from GPU {team.devices[0]} to GPU {team.devices[1]} is wrong")
    r = pkit.bench(lambda d, s: copy(d[1], s[0]), devices=[worker], rotate=list(zip(dsts, srcs)), reps=reps,
                   warmup=warmup, hide_launch=True)
    return {"bytes": size, **r.times_us(), "time_iqr_us": r.iqr_ms * 1e3, "bandwidth_GBps": r.gbps(size),
            "verified": True, "rotations": copies}
