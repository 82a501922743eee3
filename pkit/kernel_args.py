"""Kernel arguments as one struct passed by value, as ThunderKittens passes its `globals`.

A kernel family declares its arguments once per side: a C++ struct in its kernel file, and a `KernelArgs` with
the same fields in the same order here. `pack` builds the struct's bytes as a `Packed` kernel argument, which
CuPy passes by value; `layout_asserts` is C++ that fails to compile unless the two sides agree, which a CPU test
appends to the kernel file. (A structured NumPy array would do too, but CuPy reads it through
`__array_interface__`, whose field description costs tens of µs per launch; `Packed` costs about one.)

Field types: "ptr" (a device address, 8 bytes), "u64", "u32", "i32".

Example:
    >>> call = KernelArgs("Call", (("x", "ptr"), ("n", "u64"), ("rank", "i32")))
    >>> call.dtype.itemsize  # 8 + 8 + 4, padded to the struct's 8-byte alignment
    24
    >>> call.unpack(call.pack(x=0x1000, n=3, rank=1))["n"]
    3
    >>> print(call.layout_asserts().splitlines()[0])  # then the offsets, where the compiler can tell them
    static_assert(sizeof(Call) == 24, "Call: size differs from pkit's KernelArgs");
"""
from __future__ import annotations

import ctypes
import struct
from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np

OFFSETOF_KNOWN = "#if defined(__has_builtin)\n#if __has_builtin(__builtin_offsetof)"  # guards the offset asserts
FIELD_TYPES = {"ptr": np.uint64, "u64": np.uint64, "u32": np.uint32, "i32": np.int32}
_STRUCT_CODES = {"ptr": "Q", "u64": "Q", "u32": "I", "i32": "i"}


@lru_cache(maxsize=4096)
def packed(data: bytes):
    """`data` (a struct's bytes: a TMA descriptor, a struct built with NumPy) as one by-value kernel argument. The
    same bytes give the same (read-only) argument: repeated calls with the same buffers skip building it."""
    return _packed_type()(data)


@lru_cache(maxsize=None)
def _packed_type():
    from cupy.cuda.function import CPointer

    class Packed(CPointer):
        """A struct's bytes in a buffer it owns; CuPy passes the bytes at `ptr` as one kernel argument."""

        def __init__(self, data: bytes):
            self.buffer = ctypes.create_string_buffer(data, len(data))
            super().__init__(ctypes.addressof(self.buffer))

        @property
        def raw(self) -> bytes:
            return self.buffer.raw

    return Packed


@dataclass(frozen=True)
class KernelArgs:
    """The host side of a kernel-argument struct: its C++ name and its (field, type) pairs in declaration order."""

    name: str
    fields: tuple[tuple[str, str], ...]

    def __post_init__(self):
        unknown = [(f, t) for f, t in self.fields if t not in FIELD_TYPES]
        if unknown:
            raise ValueError(f"fields: types must be among {list(FIELD_TYPES)}, got {unknown}")

    @cached_property
    def dtype(self) -> np.dtype:
        """The struct's layout as C lays it out (natural alignment, padded to the largest member's)."""
        return np.dtype({"names": [f for f, _ in self.fields], "formats": [FIELD_TYPES[t] for _, t in self.fields]},
                        align=True)

    @cached_property
    def _names(self) -> tuple[str, ...]:
        return tuple(f for f, _ in self.fields)

    @cached_property
    def _name_set(self) -> frozenset:
        return frozenset(self._names)

    @cached_property
    def _struct(self) -> struct.Struct:
        """The layout of `dtype` as a little-endian struct format, padding spelled out."""
        fmt, at = "<", 0
        for name, kind in self.fields:
            offset = self.dtype.fields[name][1]
            fmt, at = fmt + "x" * (offset - at) + _STRUCT_CODES[kind], offset + self.dtype.fields[name][0].itemsize
        return struct.Struct(fmt + "x" * (self.dtype.itemsize - at))

    def pack(self, **values):
        """The struct holding `values` (one per field, by name), ready to pass as one kernel argument."""
        if values.keys() != self._name_set:
            missing, extra = sorted(set(self._names) - set(values)), sorted(set(values) - set(self._names))
            raise ValueError(f"values: {self.name} needs exactly {list(self._names)}; missing {missing}, "
                             f"unexpected {extra}")
        return packed(self._struct.pack(*(values[f] for f in self._names)))

    def unpack(self, argument) -> dict:
        """The field values a packed argument holds (for tests and debugging)."""
        row = np.frombuffer(argument.raw, dtype=self.dtype)[0]
        return {f: int(row[f]) for f in self._names}

    def layout_asserts(self) -> str:
        """C++ static_asserts that the struct `name` has this size and these field offsets (the offsets where the
        compiler has `__builtin_offsetof`: NVRTC 13.5 has, NVRTC 13.0 has not)."""
        lines = [f'static_assert(sizeof({self.name}) == {self.dtype.itemsize}, '
                 f'"{self.name}: size differs from pkit\'s KernelArgs");', OFFSETOF_KNOWN]
        lines += [f'static_assert(__builtin_offsetof({self.name}, {f}) == {self.dtype.fields[f][1]}, '
                  f'"{self.name}::{f}: offset differs from pkit\'s KernelArgs");' for f, _ in self.fields]
        return "\n".join(lines + ["#endif", "#endif"])
