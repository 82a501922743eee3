"""Peer-to-peer transfers by mechanism: the copy engine (`ce`), register-level 16-byte loads/stores issued by
the SMs (`sm_push`, `sm_pull`), TMA bulk copies (`tma_push`, `tma_pull`).

Each call enqueues one copy of `nbytes` from GPU `src` to GPU `dst` on the current CuPy stream of the GPU
that does the work (the source's for push and for the copy engine, the destination's for pull).

Example:
    >>> from pkit.ops.transfers import peer_copy
    >>> peer_copy(y[1], x[0], "tma_push", blocks=16)  # x, y: SymmetricArrays   # doctest: +SKIP
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..gpus import on_device as _on
from ..launch import THREADS

# The names pkit uses for these mechanisms everywhere (experiments, recorded results, figures): `ce` is
# cudaMemcpyPeerAsync; `sm_*` pkit's copy16 kernel; `tma_*` its TMA kernel; `_push` runs on the source GPU,
# `_pull` on the destination. Collectives use the same words (`sm`, `ce`; pkit.ops.collectives.MECHANISMS).
MECHANISMS = ("ce", "sm_push", "sm_pull", "tma_push", "tma_pull")
TMA_CHUNK = 32 << 10  # bytes per pipeline stage; the kernel keeps 4 stages in flight per block
TMA_STAGES = 4


@lru_cache(maxsize=None)
def _kernel(mechanism: str):
    import pkit

    return pkit.compile("tma_copy.cu", "tma_copy") if mechanism.startswith("tma") else pkit.compile("copy.cu", "copy16")


def worker(mechanism: str, src: int, dst: int) -> int:
    """The GPU whose engines or SMs do the copy."""
    return dst if mechanism.endswith("_pull") else src


def peer_copy(dst_array, src_array, mechanism: str, blocks: int | None = None) -> None:
    """Copy `src_array` (a CuPy array on one GPU) into `dst_array` (same byte size, another GPU or the same).

    `blocks` sets how many SMs an SM mechanism uses (default: every SM for register copies, 32 for TMA).
    """
    import cupy as cp

    if mechanism not in MECHANISMS:
        raise ValueError(f"mechanism: expected one of {MECHANISMS}, got {mechanism!r}")
    nbytes = src_array.nbytes
    if dst_array.nbytes != nbytes or nbytes % 16:
        raise ValueError(f"dst_array, src_array: expected equal sizes in multiples of 16 bytes, got "
                         f"{dst_array.nbytes} and {nbytes}")
    if blocks is not None and not (isinstance(blocks, (int, np.integer)) and 1 <= blocks <= 1024):
        raise ValueError(f"blocks: expected an integer in [1, 1024], got {blocks!r}")
    src, dst = src_array.device.id, dst_array.device.id
    on = worker(mechanism, src, dst)
    if mechanism == "ce":
        with cp.cuda.Device(src):
            cp.cuda.runtime.memcpyPeerAsync(dst_array.data.ptr, dst, src_array.data.ptr, src, nbytes,
                                            cp.cuda.get_current_stream().ptr)
        return
    d, s = np.uint64(dst_array.data.ptr), np.uint64(src_array.data.ptr)
    if mechanism.startswith("sm_"):
        n16 = nbytes // 16
        grid = blocks or min(4 * _sms(on), max(1, -(-n16 // THREADS)))
        _kernel(mechanism)((grid,), (THREADS,), (d, s, np.uint64(n16)), device=on)
    else:
        grid = blocks or 32
        _kernel(mechanism)((grid,), (32,), (d, s, np.uint64(nbytes), np.uint32(TMA_CHUNK)),
                           shared_mem=TMA_STAGES * (TMA_CHUNK + 8), device=on)


def split_copy(dst_array, src_array, first: str, second: str, fraction: float) -> None:
    """One copy by two mechanisms at once: the leading `fraction` of the bytes by `first` (a copy engine or
    an SM mechanism with every SM), the rest by `second`; the two must run on different GPUs (e.g. the source
    pushes while the destination pulls). The call is joined: the second GPU's stream waits for the first's
    position at the call, and the first waits for the second's part, so a timer on the first GPU's stream
    reads the whole copy.

    Example:
        >>> split_copy(y[1], x[0], "sm_push", "sm_pull", 0.5)                 # doctest: +SKIP
    """
    import cupy as cp

    for arg, mechanism in (("first", first), ("second", second)):
        if mechanism not in MECHANISMS:
            raise ValueError(f"{arg}: expected one of {MECHANISMS}, got {mechanism!r}")
    if not 0 <= fraction <= 1:
        raise ValueError(f"fraction: expected a share of the bytes in [0, 1], got {fraction!r}")
    src, dst = src_array.device.id, dst_array.device.id
    a, b = worker(first, src, dst), worker(second, src, dst)
    if a == b:
        raise ValueError(f"first, second: expected mechanisms that run on different GPUs, both run on GPU {a}")
    cut = int(src_array.nbytes * fraction) // 16 * 16
    start, done = (_on(d, lambda: cp.cuda.Event(disable_timing=True)) for d in (a, b))
    _on(a, lambda: start.record())
    _on(b, lambda: cp.cuda.get_current_stream().wait_event(start))
    if cut:
        peer_copy(dst_array[:cut], src_array[:cut], first)
    if cut < src_array.nbytes:
        peer_copy(dst_array[cut:], src_array[cut:], second)
    _on(b, lambda: done.record())
    _on(a, lambda: cp.cuda.get_current_stream().wait_event(done))


def _sms(device: int) -> int:
    import pkit

    return pkit.devices()[device].sms
