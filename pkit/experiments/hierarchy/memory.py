"""Memory the hierarchy study measures: the level names, pinned host buffers, a checkable data pattern.

Example:
    >>> import numpy as np
    >>> from pkit.experiments.hierarchy.memory import pattern
    >>> pattern(np, 4).tolist()
    [2654435769, 8, 2723777243, 1150358698]
"""
from __future__ import annotations

import ctypes
from contextlib import contextmanager

import numpy as np

# The ladder, nearest first. Latency and bandwidth rows use these names.
SHARED, L1, L2, HBM, PEER, HOST = ("shared memory", "L1", "L2", "HBM", "peer HBM (NVLink)", "host (PCIe)")
LEVELS = (SHARED, L1, L2, HBM, PEER, HOST)

_MAPPED_PORTABLE = 2 | 1  # cudaHostAllocMapped | cudaHostAllocPortable
_SEED = np.uint32(0x9E3779B9)
_MULTIPLIER = np.uint32(2654435761)  # Knuth's multiplicative hash: neighbouring words differ


def pattern(xp, n_words: int):
    """`n_words` uint32 words that differ from their neighbours, built by NumPy or CuPy (`xp`) alike.

    Word i is (i · 2654435761) xor 0x9E3779B9 modulo 2³², so a copy computed on any device can be checked
    against a pattern computed where the copy landed.
    """
    if not isinstance(n_words, (int, np.integer)) or n_words < 0:
        raise ValueError(f"n_words: expected a non-negative word count, got {n_words!r}")
    return (xp.arange(int(n_words), dtype=xp.uint32) * _MULTIPLIER) ^ _SEED


@contextmanager
def pinned(nbytes: int):
    """Page-locked host memory that every GPU can dereference (mapped, portable; UVA address).

    Yields (address, NumPy uint8 view); frees the memory on exit.
    """
    import cupy as cp

    if not isinstance(nbytes, (int, np.integer)) or nbytes <= 0:
        raise ValueError(f"nbytes: expected a positive byte count, got {nbytes!r}")
    address = cp.cuda.runtime.hostAlloc(int(nbytes), _MAPPED_PORTABLE)
    try:
        yield address, np.ctypeslib.as_array((ctypes.c_uint8 * int(nbytes)).from_address(address))
    finally:
        cp.cuda.runtime.freeHost(address)
