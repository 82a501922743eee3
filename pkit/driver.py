"""The CUDA driver calls pkit makes that CuPy does not wrap, through ctypes on libcuda.

`encode_tiled` builds a TMA tensor map (cuTensorMapEncodeTiled), `stream_write_value32` sets a 32-bit
word in stream order (cuStreamWriteValue32), `stream_wait_value32` holds a stream until a word reaches a value
(cuStreamWaitValue32), and `memcpy_beside_compute` enqueues a copy that the driver is asked to keep off the SMs
(cuMemcpyBatchAsync with CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE): a plain cudaMemcpyAsync between two buffers
of one GPU may run as a kernel on the SMs; `max_active_clusters` says how many thread block clusters of a kernel
run at once (cuOccupancyMaxActiveClusters). Calling libcuda directly, rather than through
cuda-python's driver module, keeps pkit's API-call trace clean: on first use that module looks up every driver entry
point by cuGetProcAddress, and the lookups of entry points the installed driver lacks fail, which compute-sanitizer
(`--report-api-errors all`) reports as errors in the user's run. Enum values are those of CUDA's cuda.h
(12.x and 13.x).

Example:
    >>> from pkit import driver
    >>> driver.TENSOR_MAP_BYTES, driver.SWIZZLE_128B
    (128, 3)
"""
from __future__ import annotations

import ctypes
from functools import lru_cache

TENSOR_MAP_BYTES = 128  # sizeof(CUtensorMap), 64-byte aligned
DATA_TYPE_UINT8 = 0  # CU_TENSOR_MAP_DATA_TYPE_UINT8 (FP8's bytes: TMA only moves them)
DATA_TYPE_BFLOAT16 = 9  # CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
DATA_TYPES = {1: DATA_TYPE_UINT8, 2: DATA_TYPE_BFLOAT16}  # by element size in bytes
INTERLEAVE_NONE = 0  # CU_TENSOR_MAP_INTERLEAVE_NONE
SWIZZLE_128B = 3  # CU_TENSOR_MAP_SWIZZLE_128B
L2_PROMOTION_256B = 3  # CU_TENSOR_MAP_L2_PROMOTION_L2_256B
OOB_FILL_NONE = 0  # CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE
STREAM_WRITE_VALUE_DEFAULT = 0  # CU_STREAM_WRITE_VALUE_DEFAULT: the write is ordered after earlier work, with a fence
STREAM_WAIT_VALUE_GEQ = 0  # CU_STREAM_WAIT_VALUE_GEQ: wait until (int32)(*addr - value) >= 0
MEMCPY_SRC_ACCESS_ORDER_STREAM = 1  # CU_MEMCPY_SRC_ACCESS_ORDER_STREAM: the source is read in stream order
MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE = 1  # CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE (a hint: copy beside compute)
MEM_LOCATION_TYPE_DEVICE = 1  # CU_MEM_LOCATION_TYPE_DEVICE


class _TensorMap(ctypes.Structure):
    _align_ = 64
    _fields_ = [("opaque", ctypes.c_uint64 * (TENSOR_MAP_BYTES // 8))]


class _MemLocation(ctypes.Structure):  # CUmemLocation
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _LaunchConfig(ctypes.Structure):  # CUlaunchConfig
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared_mem_bytes", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.c_void_p), ("num_attrs", ctypes.c_uint)]


class _MemcpyAttributes(ctypes.Structure):  # CUmemcpyAttributes_v1 (24 bytes)
    _fields_ = [("srcAccessOrder", ctypes.c_int), ("srcLocHint", _MemLocation), ("dstLocHint", _MemLocation),
                ("flags", ctypes.c_uint)]


@lru_cache(maxsize=1)
def _libcuda():
    """libcuda with the signatures pkit uses (cuda.h)."""
    lib = ctypes.CDLL("libcuda.so.1")
    u32p, u64p = ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint64)
    lib.cuTensorMapEncodeTiled.argtypes = [ctypes.POINTER(_TensorMap), ctypes.c_int, ctypes.c_uint32,
                                           ctypes.c_void_p, u64p, u64p, u32p, u32p, ctypes.c_int, ctypes.c_int,
                                           ctypes.c_int, ctypes.c_int]
    lib.cuStreamWriteValue32_v2.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
    lib.cuStreamWaitValue32_v2.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
    lib.cuOccupancyMaxActiveClusters.argtypes = [ctypes.POINTER(ctypes.c_int), ctypes.c_void_p,
                                                 ctypes.POINTER(_LaunchConfig)]
    lib.cuGetErrorName.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
    return lib


def _check(result: int, call: str) -> None:
    if result:
        name = ctypes.c_char_p()
        _libcuda().cuGetErrorName(result, ctypes.byref(name))
        raise RuntimeError(f"{call} failed: {(name.value or b'CUDA error').decode()} ({result})")


def encode_tiled(address: int, rows: int, cols: int, box_rows: int, box_cols: int, itemsize: int = 2) -> bytes:
    """The 128-byte CUtensorMap of a row-major `rows` × `cols` matrix at device `address` of 2-byte (bf16) or
    1-byte (FP8) elements, read or written by TMA in `box_rows` × `box_cols` boxes with the 128-byte swizzle
    (box_cols × itemsize must be 128)."""
    u64, u32 = ctypes.c_uint64, ctypes.c_uint32
    tensor_map = _TensorMap()
    _check(_libcuda().cuTensorMapEncodeTiled(
        ctypes.byref(tensor_map), DATA_TYPES[itemsize], 2, ctypes.c_void_p(address), (u64 * 2)(cols, rows),
        (u64 * 1)(cols * itemsize), (u32 * 2)(box_cols, box_rows), (u32 * 2)(1, 1), INTERLEAVE_NONE, SWIZZLE_128B,
        L2_PROMOTION_256B, OOB_FILL_NONE), f"cuTensorMapEncodeTiled for a {rows} × {cols} matrix of {itemsize}-byte elements")
    return bytes(tensor_map)


def stream_write_value32(stream: int, address: int, value: int) -> None:
    """Write the 32-bit `value` to device `address` in the order of CUDA stream `stream` (its handle), after the
    stream's earlier work and with a memory barrier."""
    _check(_libcuda().cuStreamWriteValue32_v2(ctypes.c_void_p(stream), address, value, STREAM_WRITE_VALUE_DEFAULT),
           "cuStreamWriteValue32")


def stream_wait_value32(stream: int, address: int, value: int) -> None:
    """Hold CUDA stream `stream` (its handle) until the 32-bit word at `address` (device memory, or pinned mapped
    host memory) reaches `value` (wrapping compare: (int32)(word - value) >= 0); the stream's front end waits, no
    kernel runs. Whoever enqueues this must make sure the word gets there (nothing times out)."""
    _check(_libcuda().cuStreamWaitValue32_v2(ctypes.c_void_p(stream), address, value, STREAM_WAIT_VALUE_GEQ),
           "cuStreamWaitValue32")


def max_active_clusters(function: int, grid: int, block: int, shared_mem: int) -> int:
    """How many clusters of the kernel `function` (a CUfunction handle, of the current GPU's context; its cluster
    size set at compile time by __cluster_dims__) run on the GPU at once when it is launched with `grid` blocks of
    `block` threads and `shared_mem` bytes of dynamic shared memory each (the function must already allow that
    much). Clusters are placed within one GPC each, so fewer may fit than the SMs / cluster size."""
    count = ctypes.c_int(0)
    config = _LaunchConfig((grid, 1, 1), (block, 1, 1), shared_mem, None, None, 0)
    _check(_libcuda().cuOccupancyMaxActiveClusters(ctypes.byref(count), ctypes.c_void_p(function),
                                                   ctypes.byref(config)), "cuOccupancyMaxActiveClusters")
    return count.value


@lru_cache(maxsize=1)
def _batch_copy():
    """(cuMemcpyBatchAsync, whether it takes failIdx): the CUDA 13 entry point (cuMemcpyBatchAsync_v2, no failIdx)
    where the driver has it, else the CUDA 12.8 one (failIdx before the stream); None before CUDA 12.8."""
    lib, size_p = _libcuda(), ctypes.POINTER(ctypes.c_size_t)
    head = [ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint64), size_p, ctypes.c_size_t,
            ctypes.POINTER(_MemcpyAttributes), size_p, ctypes.c_size_t]
    for name, fail_index in (("cuMemcpyBatchAsync_v2", False), ("cuMemcpyBatchAsync", True)):
        function = getattr(lib, name, None)
        if function is not None:
            function.argtypes = head + ([size_p] if fail_index else []) + [ctypes.c_void_p]
            return function, fail_index
    return None


def memcpy_beside_compute(dst: int, src: int, nbytes: int, stream: int, device: int) -> None:
    """Copy `nbytes` from device address `src` to `dst` (on GPU `device`, the current one) in the order of CUDA
    stream `stream` (its handle; not the legacy default stream, 0), asking the driver to run it beside compute
    (CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE): off the SMs, by a copy engine. A plain cudaMemcpyAsync within
    one GPU may run as a kernel, which waits for an SM; beside a persistent kernel that holds every SM and waits
    for the copy, it never runs. The flag is a hint: `pkit.experiments.overlap.pacing.copies_beside_full_gpu`
    measures what the driver does with it (on an H200 with driver 580 the copy still ran on the SMs)."""
    if not stream:
        raise ValueError("stream: expected a created stream's handle; cuMemcpyBatchAsync refuses the legacy default "
                         "stream (0): enqueue under `with cupy.cuda.Stream(non_blocking=True):`")
    found = _batch_copy()
    if found is None:
        raise RuntimeError("memcpy_beside_compute: this CUDA driver has no cuMemcpyBatchAsync (CUDA 12.8 or newer)")
    function, fail_index = found
    hint = _MemLocation(MEM_LOCATION_TYPE_DEVICE, device)
    attrs = _MemcpyAttributes(MEMCPY_SRC_ACCESS_ORDER_STREAM, hint, hint, MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE)
    dsts, srcs = (ctypes.c_uint64 * 1)(dst), (ctypes.c_uint64 * 1)(src)
    sizes, first = (ctypes.c_size_t * 1)(nbytes), (ctypes.c_size_t * 1)(0)
    args = [dsts, srcs, sizes, 1, ctypes.byref(attrs), first, 1]
    if fail_index:
        args.append(ctypes.byref(ctypes.c_size_t(0)))
    _check(function(*args, ctypes.c_void_p(stream)), "cuMemcpyBatchAsync")
