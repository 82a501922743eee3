"""Kernel arguments as one struct passed by value, as ThunderKittens passes its `globals`.

A kernel family declares its arguments once per side: a C++ struct in its kernel file, and a `KernelArgs` with
the same fields in the same order here. `pack` builds the struct's bytes (a one-element NumPy array, which CuPy
passes by value); `layout_asserts` is C++ that fails to compile unless the two sides agree, which a CPU test
appends to the kernel file.

Field types: "ptr" (a device address, 8 bytes), "u64", "u32", "i32".

Example:
    >>> call = KernelArgs("Call", (("x", "ptr"), ("n", "u64"), ("rank", "i32")))
    >>> call.dtype.itemsize  # 8 + 8 + 4, padded to the struct's 8-byte alignment
    24
    >>> int(call.pack(x=0x1000, n=3, rank=1)["n"][0])
    3
    >>> print(call.layout_asserts().splitlines()[0])
    static_assert(sizeof(Call) == 24, "Call: size differs from pkit's KernelArgs");
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

FIELD_TYPES = {"ptr": np.uint64, "u64": np.uint64, "u32": np.uint32, "i32": np.int32}


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

    def pack(self, **values) -> np.ndarray:
        """The struct holding `values` (one per field, by name), ready to pass as one kernel argument."""
        names = [f for f, _ in self.fields]
        if set(values) != set(names):
            missing, extra = sorted(set(names) - set(values)), sorted(set(values) - set(names))
            raise ValueError(f"values: {self.name} needs exactly {names}; missing {missing}, unexpected {extra}")
        return np.array([tuple(values[f] for f in names)], dtype=self.dtype)

    def layout_asserts(self) -> str:
        """C++ static_asserts that the struct `name` has this size and these field offsets."""
        lines = [f'static_assert(sizeof({self.name}) == {self.dtype.itemsize}, '
                 f'"{self.name}: size differs from pkit\'s KernelArgs");']
        lines += [f'static_assert(__builtin_offsetof({self.name}, {f}) == {self.dtype.fields[f][1]}, '
                  f'"{self.name}::{f}: offset differs from pkit\'s KernelArgs");' for f, _ in self.fields]
        return "\n".join(lines)
