"""bfloat16 as uint16 bit patterns (CuPy has no bfloat16): round float32 to bf16 bits and back.

The helpers take NumPy or CuPy arrays and return the same kind (CuPy implements NumPy's ufuncs and `where`).

Example:
    >>> import numpy as np
    >>> from pkit.bf16 import to_bf16_bits, from_bf16_bits
    >>> from_bf16_bits(to_bf16_bits(np.array([1.0, 3.14159], dtype=np.float32)))
    array([1.      , 3.140625], dtype=float32)
"""
from __future__ import annotations

import numpy as np

NAN_BITS = np.uint16(0x7FC0)
"""The bf16 bit pattern of a quiet NaN."""


def to_bf16_bits(x):
    """float32 → bf16 bit patterns (uint16), rounding to nearest even; NaN stays NaN."""
    x = x.astype(np.float32, copy=False)
    bits = x.view(np.uint32)  # the sum below wraps only for NaN patterns, which are replaced
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(x), NAN_BITS, rounded)


def from_bf16_bits(bits):
    """bf16 bit patterns (uint16) → float32, exactly."""
    return (bits.astype(np.uint32) << 16).view(np.float32)
