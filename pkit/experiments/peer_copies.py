"""Shared measurement of one copy along a route (GPU → GPU, within a GPU, host ↔ GPU): verify every byte once,
then time it past the L2.

Used by the quickstart, mechanisms, hierarchy and ceilings studies, each with its own ways of copying. Host
buffers are page-locked and mapped (`hierarchy.memory.pinned`). Bandwidth counts the bytes copied, once.

Example:
    >>> from pkit.ops.transfers import peer_copy                                          # doctest: +SKIP
    >>> time_copy("CPU → GPU0", 1 << 20, lambda d, s: peer_copy(d, s, "ce"), 0, 10, 3)   # doctest: +SKIP
"""
from __future__ import annotations

from contextlib import ExitStack
from typing import Callable, Sequence

import numpy as np

from ..ops.transfers import Route
from .hierarchy.memory import pinned


def check_sizes(sizes: Sequence[int], arg: str = "sizes") -> list[int]:
    """`sizes` (the argument named `arg`) checked to be positive integer multiples of 16 bytes, as ints."""
    sizes = list(sizes)
    if not sizes or not all(isinstance(s, (int, np.integer)) and s > 0 and s % 16 == 0 for s in sizes):
        raise ValueError(f"{arg}: expected positive multiples of 16 bytes, got {sizes!r}")
    return [int(s) for s in sizes]


def check_sizes_and_pair(sizes: Sequence[int], src: int, dst: int, arg: str = "sizes") -> list[int]:
    """`check_sizes`, and `src` and `dst` checked to differ (a peer copy); returns the sizes as ints."""
    sizes = check_sizes(sizes, arg)
    if src == dst:
        raise ValueError(f"src, dst: expected two different GPUs, got {src} and {dst}")
    return sizes


def _buffer(end: int | None, size: int, stack: ExitStack):
    """`size` bytes at one end of a route: a CuPy array on GPU `end`, or a NumPy view of pinned host memory."""
    import cupy as cp

    if end is None:
        return stack.enter_context(pinned(size))[1]
    with cp.cuda.Device(end):
        return cp.empty(size, dtype=cp.uint8)


def route_pairs(route, size: int, copies: int, stack: ExitStack) -> list[tuple]:
    """`copies` (dst, src) buffer pairs of `size` bytes for `route` (a Route, its label, or a Team: its rank 0
    → rank 1 as SymmetricArrays); pinned host memory stays valid until `stack` closes."""
    import pkit

    if isinstance(route, pkit.Team):
        pairs = [(route.empty((size,), "uint8"), route.empty((size,), "uint8")) for _ in range(copies)]
        return [(d[1], s[0]) for d, s in pairs]
    route = Route.parse(route)
    if route.kind == "peer":
        return route_pairs(pkit.Team([route.src, route.dst]), size, copies, stack)
    return [(_buffer(route.dst, size, stack), _buffer(route.src, size, stack)) for _ in range(copies)]


def time_copy(route, size: int, copy: Callable, worker: int, reps: int, warmup: int) -> dict:
    """Copy `size` fresh random bytes along `route` (a Route, its label such as 'CPU → GPU0', or a Team: its
    rank 0 → rank 1) with `copy(dst_array, src_array)`, check every byte, then time it on GPU `worker` with
    buffers rotated past the L2 and launches hidden.

    Returns bytes, time_{median,min,max,iqr}_us, cv, bandwidth_GBps (10⁹ B/s copied), verified, rotations.
    """
    import pkit

    gpu = route.devices[0] if isinstance(route, pkit.Team) else Route.parse(route).gpus[0]
    copies = pkit.timing.rotations_past_l2(size, pkit.devices()[gpu].l2_bytes)
    with ExitStack() as stack:
        return time_copies(route_pairs(route, size, copies, stack), copy, worker, reps, warmup)


def _where(array) -> str:
    return "CPU" if isinstance(array, np.ndarray) else f"GPU{array.device.id}"


def put(array, data) -> None:
    """Write `data` (a NumPy byte array, or one byte value for every byte) into `array`: a CuPy array on any GPU
    or a NumPy view of pinned host memory."""
    if isinstance(array, np.ndarray):
        array[:] = data
        return
    with array.device:
        if isinstance(data, np.ndarray):
            array.set(data)
        else:
            array.fill(data)


def time_copies(pairs: Sequence[tuple], copy: Callable, worker: int, reps: int, warmup: int) -> dict:
    """`time_copy` on buffers the caller made: `pairs` of (dst, src) byte arrays of one size (one pair per
    rotation; CuPy arrays on any GPUs, or NumPy views of pinned host memory). Every source gets the same fresh
    random bytes, pair 0's destination is poisoned, its copy checked byte for byte, then `copy(dst, src)` is
    timed on GPU `worker`, rotating through the pairs. Returns what `time_copy` does.
    """
    import cupy as cp

    import pkit

    dst, src = pairs[0]
    size = src.nbytes
    data = np.random.default_rng().integers(0, 256, size, dtype=np.uint8)
    for _, s in pairs:
        put(s, data)
    put(dst, 0xA5)
    devices = sorted({a.device.id for a in (src, dst) if not isinstance(a, np.ndarray)} | {worker})
    pkit.synchronize(devices)
    copy(dst, src)
    pkit.synchronize(devices)
    if not np.array_equal(dst if isinstance(dst, np.ndarray) else cp.asnumpy(dst), data):
        raise AssertionError(f"copy of {size} bytes {_where(src)} → {_where(dst)} is wrong")
    r = pkit.bench(copy, devices=[worker], rotate=list(pairs), reps=reps, warmup=warmup, hide_launch=True)
    return {"bytes": size, **r.times_us(), "time_iqr_us": r.iqr_ms * 1e3, "bandwidth_GBps": r.gbps(size),
            "verified": True, "rotations": len(pairs)}
