"""Launch-side plumbing: error checks that raise PeerTimeout, stream holding, pkit's kernel block size.

`synchronize(devices)` synchronises and turns a trapped wait into `pkit.PeerTimeout`. The wait globals of modules
that include include/pkit/sync.cuh are kept by pkit.waits; its `set_wait_timeout`, `parse_report` and
`timeout_report` are importable from here.

Example:
    >>> import pkit.launch as L
    >>> L.set_wait_timeout(2.0)                                    # doctest: +SKIP
    >>> L.synchronize([0, 1])                                            # doctest: +SKIP
"""
from __future__ import annotations

import ctypes
import gc
from contextlib import contextmanager
from typing import Sequence

from .compiler import compile
from .waits import parse_report, set_wait_timeout, timeout_report

__all__ = ["THREADS", "hold_streams", "parse_report", "set_wait_timeout", "synchronize", "timeout_report"]

THREADS = 512
"""Threads per block of pkit's copy and collective kernels."""


def synchronize(devices: Sequence[int] | None = None) -> None:
    """Synchronise `devices` (default: all visible); raise PeerTimeout if a wait trapped, else re-raise."""
    import cupy as cp

    devs = range(cp.cuda.runtime.getDeviceCount()) if devices is None else devices
    for d in devs:
        try:
            with cp.cuda.Device(d):
                cp.cuda.runtime.deviceSynchronize()
        except cp.cuda.runtime.CUDARuntimeError as e:
            report = timeout_report()
            if report is not None:
                raise report from e
            raise


_spin_module = None


@contextmanager
def hold_streams(streams: dict, enabled: bool = True):
    """While the block runs, each stream (device → cupy Stream) waits on a spin kernel the host releases.

    The block must not wait for the device: the spin would wait for the host until it times out and traps. Python's
    cyclic garbage collector is paused meanwhile, so that no finalizer runs there that frees device or pinned memory
    or destroys a communicator (cudaFree and cudaFreeHost wait for the device)."""
    if not enabled:
        yield
        return
    import cupy as cp
    import numpy as np

    global _spin_module
    _spin_module = _spin_module or compile("spin.cu", "spin_until_released")
    flag_ptr = cp.cuda.runtime.hostAlloc(4, 2 | 1)
    ctypes.memset(flag_ptr, 0, 4)
    collecting = gc.isenabled()
    gc.disable()
    try:
        for device, stream in streams.items():
            _spin_module((1,), (1,), (np.uint64(flag_ptr),), device=device, stream=stream)
        yield
    finally:
        ctypes.c_uint32.from_address(flag_ptr).value = 1
        if collecting:
            gc.enable()
        for device, stream in streams.items():
            with cp.cuda.Device(device):
                stream.synchronize()
        cp.cuda.runtime.freeHost(flag_ptr)
