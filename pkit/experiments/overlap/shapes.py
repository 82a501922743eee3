"""The sizes the overlap study sweeps: N_local of AG+GEMM and K_local of GEMM+RS and GEMM+AR, each rank's share
of the sharded dimension (M = K = N = 8192 otherwise); the measured sweeps, the GEMM study's shapes and the model's
curves all take them from here.

Example:
    >>> DEFAULT_N_LOCALS[0], DEFAULT_N_LOCALS[-1]
    (256, 16384)
"""
from __future__ import annotations

DEFAULT_N_LOCALS = (256, 512, 1024, 2048, 4096, 8192, 16384)
