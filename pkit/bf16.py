"""bfloat16 in NumPy terms (CuPy has no bfloat16): round float32 to bf16 bits (uint16) and back.

Example:
    >>> import numpy as np
    >>> from pkit.bf16 import to_bf16_bits, from_bf16_bits
    >>> from_bf16_bits(to_bf16_bits(np.array([1.0, 3.14159], dtype=np.float32)))
    array([1.      , 3.140625], dtype=float32)
"""
from __future__ import annotations

import numpy as np


def to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 → bf16 bit patterns (uint16), rounding to nearest even; NaN stays NaN."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    return np.where(nan, np.uint16(0x7FC0), rounded)


def from_bf16_bits(bits: np.ndarray) -> np.ndarray:
    """bf16 bit patterns (uint16) → float32, exactly."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
