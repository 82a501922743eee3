"""The two CUDA driver calls pkit makes that CuPy does not wrap, through ctypes on libcuda.

`encode_tiled` builds a TMA tensor map (cuTensorMapEncodeTiled) and `stream_write_value32` sets a 32-bit
word in stream order (cuStreamWriteValue32). Calling libcuda directly, rather than through cuda-python's driver
module, keeps pkit's API-call trace clean: on first use that module looks up every driver entry point by
cuGetProcAddress, and the lookups of entry points the installed driver lacks fail, which compute-sanitizer
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


class _TensorMap(ctypes.Structure):
    _align_ = 64
    _fields_ = [("opaque", ctypes.c_uint64 * (TENSOR_MAP_BYTES // 8))]


@lru_cache(maxsize=1)
def _libcuda():
    """libcuda with the signatures pkit uses (cuda.h)."""
    lib = ctypes.CDLL("libcuda.so.1")
    u32p, u64p = ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint64)
    lib.cuTensorMapEncodeTiled.argtypes = [ctypes.POINTER(_TensorMap), ctypes.c_int, ctypes.c_uint32,
                                           ctypes.c_void_p, u64p, u64p, u32p, u32p, ctypes.c_int, ctypes.c_int,
                                           ctypes.c_int, ctypes.c_int]
    lib.cuStreamWriteValue32_v2.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]
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
