"""Small helpers shared by problem files (`problems/*/problem.py`): seeded inputs, dtypes, cost records.

Example:
    >>> from pkit.problem_kit import generator, randn, cost
    >>> g = generator(seed=0, rank=1)
    >>> x = randn((4, 8), "bfloat16", g)
    >>> cost(flops=2 * 4 * 8, hbm_bytes=x.numel() * 2, link_bytes=0)["flops"]
    64
"""
from __future__ import annotations

import torch

_DTYPES = {
    "float32": torch.float32, "fp32": torch.float32, "float": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
    "float64": torch.float64, "fp64": torch.float64,
    "int64": torch.int64, "int32": torch.int32,
}


def parse_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """A torch dtype from a name such as 'bf16' or 'float32' (or a torch dtype, returned as is)."""
    if isinstance(dtype, torch.dtype):
        return dtype
    try:
        return _DTYPES[str(dtype).lower()]
    except KeyError:
        raise ValueError(f"dtype: expected one of {sorted(_DTYPES)} or a torch.dtype, got {dtype!r}") from None


def generator(seed: int, rank: int) -> torch.Generator:
    """A CPU generator whose stream depends on (seed, rank): every rank draws different, reproducible data."""
    return torch.Generator().manual_seed(int(seed) * 1_000_003 + int(rank))


def randn(shape, dtype, gen: torch.Generator, device="cpu", scale: float = 1.0) -> torch.Tensor:
    """Normal(0, scale²) samples drawn on the CPU (so every device gets identical values), then moved."""
    return (torch.randn(shape, generator=gen, dtype=torch.float32) * scale).to(parse_dtype(dtype)).to(device)


def cost(flops: float = 0, hbm_bytes: float = 0, link_bytes: float = 0) -> dict:
    """A per-GPU cost record: FLOPs, HBM bytes (read + write) and bytes each GPU sends over links."""
    return {"flops": int(flops), "hbm_bytes": int(hbm_bytes), "link_bytes": int(link_bytes)}
