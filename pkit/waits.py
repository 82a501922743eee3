"""Device-side wait globals: the timeout report buffer, the timeout, and the loaded modules that use them.

A module that includes include/pkit/sync.cuh defines three device globals (`WAIT_GLOBALS`): where to write a
timeout report (pinned host memory, shared by all GPUs of the process), the timeout in nanoseconds, and its
GPU ordinal. pkit.compiler reads from the cubin whether a module defines them and, if so, calls
`prepare_module` when it loads the module on a GPU; nothing here probes a module that lacks them.
"""
from __future__ import annotations

import ctypes
import os

from .errors import PeerTimeout

WAIT_GLOBALS = ("pkit_wait_report", "pkit_wait_timeout_ns", "pkit_device_ordinal")
_REPORT_BYTES = 104  # sizeof(pkit::WaitReport)
_report_ptr: int | None = None
_modules: list = []  # (cupy Module, device) pairs, to update the timeout of loaded modules
_timeout_ns = int(float(os.environ.get("PKIT_WAIT_TIMEOUT_S", "10")) * 1e9)


def _report_buffer() -> int:
    """Address of the process's WaitReport in pinned, mapped host memory (same address on the device: UVA)."""
    global _report_ptr
    if _report_ptr is None:
        import cupy as cp

        mapped_portable = 2 | 1  # cudaHostAllocMapped | cudaHostAllocPortable
        _report_ptr = cp.cuda.runtime.hostAlloc(_REPORT_BYTES, mapped_portable)
        ctypes.memset(_report_ptr, 0, _REPORT_BYTES)
    return _report_ptr


def _set_global(module, name: str, value: int, dtype) -> None:
    import cupy as cp
    import numpy as np

    ptr = module.get_global_var(name)
    if not isinstance(ptr, cp.cuda.MemoryPointer):  # a bare address
        ptr = cp.cuda.MemoryPointer(cp.cuda.UnownedMemory(int(ptr), np.dtype(dtype).itemsize, module), 0)
    cp.ndarray((1,), dtype=dtype, memptr=ptr)[0] = value


def prepare_module(module, device: int) -> None:
    """Point a freshly loaded module's wait globals (it must define WAIT_GLOBALS) at this process's report."""
    import numpy as np

    _set_global(module, "pkit_wait_report", _report_buffer(), np.uint64)
    _set_global(module, "pkit_wait_timeout_ns", _timeout_ns, np.uint64)
    _set_global(module, "pkit_device_ordinal", device, np.int32)
    _modules.append((module, device))


def set_wait_timeout(seconds: float) -> None:
    """Set how long device-side waits spin before trapping, for loaded and future modules (seconds)."""
    import cupy as cp
    import numpy as np

    global _timeout_ns
    if not seconds > 0:
        raise ValueError(f"seconds: expected a positive timeout, got {seconds!r}")
    _timeout_ns = int(seconds * 1e9)
    for module, device in _modules:
        with cp.cuda.Device(device):
            _set_global(module, "pkit_wait_timeout_ns", _timeout_ns, np.uint64)


def parse_report(raw: bytes) -> PeerTimeout | None:
    """Decode a `pkit::WaitReport` (include/pkit/sync.cuh); None when no wait has timed out."""
    if len(raw) != _REPORT_BYTES:
        raise ValueError(f"raw: expected {_REPORT_BYTES} bytes of WaitReport, got {len(raw)}")
    word = lambda offset, signed=False: int.from_bytes(raw[offset:offset + 4], "little", signed=signed)  # noqa: E731
    if not word(0):
        return None
    function = raw[40:104].split(b"\0", 1)[0].decode(errors="replace")
    return PeerTimeout(function, word(4, True), word(8, True), int.from_bytes(raw[24:32], "little"), word(12),
                       word(16), int.from_bytes(raw[32:40], "little") / 1e9)


def timeout_report() -> PeerTimeout | None:
    """The PeerTimeout recorded by a trapped wait in this process, if any."""
    if _report_ptr is None:
        return None
    return parse_report((ctypes.c_char * _REPORT_BYTES).from_address(_report_ptr).raw)
