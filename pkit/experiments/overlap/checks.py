"""Inputs and checks of the overlap study: fresh random operands on every rank with float32 references, and whether
a bf16 GEMM output is within rounding of its reference (`bf16_match`, `check`).

Example:
    >>> import torch
    >>> want = torch.tensor([[1.0, 2.0]])
    >>> bf16_match(want.bfloat16(), want, terms=1), bf16_match(want.bfloat16() + 1, want, terms=1)[0]
    ((True, 0.0), False)
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from ...tolerance import bf16_gemm

if TYPE_CHECKING:
    from ...ops.overlap import AllGatherGemm, PartialGemm


def fill(op: AllGatherGemm, seed: int) -> list:
    """Fresh random shards and weights on every rank (peers' rows and outputs poisoned with NaN); returns each
    rank's float32 reference output, computed on its GPU."""
    import torch

    team = op.team
    gen = torch.Generator(device="cpu").manual_seed(seed)
    shards = [torch.randn(op.shard_rows, op.k, generator=gen).bfloat16() for _ in range(team.size)]
    want = []
    for r in range(team.size):
        device = team.devices[r]
        with torch.cuda.device(device):
            op.gathered.torch(r).fill_(float("nan"))
            op.shard(r).copy_(shards[r])
            op.weight(r).copy_(torch.randn(op.n_local, op.k, generator=gen).bfloat16())
            op.out(r).fill_(float("nan"))
            want.append(torch.cat(shards).to(device).float() @ op.weight(r).float().T)
    team.synchronize()
    return want


def fill_partial(op: PartialGemm, seed: int) -> tuple[list, list]:
    """Fresh random K slices on every rank (outputs poisoned with NaN); returns (each rank's float32 reference
    output: its rows of the sum for reduce-scatter, the whole sum for all-reduce; the sum of the partial products'
    magnitudes over the same elements, the scale their bf16 roundings are relative to), computed on its GPU."""
    import torch

    team = op.team
    gen = torch.Generator(device="cpu").manual_seed(seed)
    lhs = [torch.randn(op.m, op.k_local, generator=gen).bfloat16() for _ in range(team.size)]
    rhs = [torch.randn(op.n, op.k_local, generator=gen).bfloat16() for _ in range(team.size)]
    want, scales = [], []
    for r in range(team.size):
        device = team.devices[r]
        with torch.cuda.device(device):
            op.lhs(r).copy_(lhs[r])
            op.weight(r).copy_(rhs[r])
            op.out(r).fill_(float("nan"))
            rows = slice(r * op.out_rows, (r + 1) * op.out_rows) if op.scatter else slice(None)
            parts = [(x.to(device).float() @ w.to(device).float().T)[rows] for x, w in zip(lhs, rhs)]
            want.append(sum(parts))
            scales.append(sum(p.abs() for p in parts))
    team.synchronize()
    return want, scales


def bf16_match(got, want, terms: int, roundings: int = 1, scale=None) -> tuple[bool, float]:
    """(`got`, a bf16 GEMM output, is finite and within bf16 tolerance of its float32 reference `want`, largest
    absolute error). `terms`: products summed per output element; `roundings`: bf16 roundings on the way (2 when
    partial products are rounded, then summed in bf16); `scale`: what those roundings are relative to, elementwise
    (default |want|; for a sum of partial products the sum of their magnitudes, since partials that cancel leave
    |want| far below the rounding errors they carry).

    >>> import torch
    >>> parts = torch.tensor([[96.3, -96.2]])   # two partial products that cancel: the sum is 0.1
    >>> got, want, scale = parts.bfloat16().sum(dim=1, dtype=torch.bfloat16), parts.sum(1), parts.abs().sum(1)
    >>> bf16_match(got, want, terms=1, roundings=2)[0], bf16_match(got, want, terms=1, roundings=2, scale=scale)[0]
    (False, True)
    """
    import torch

    got = got.float()
    err = (got - want).abs()
    tol = bf16_gemm(terms, roundings)
    bound = tol["rtol"] * (want.abs() if scale is None else scale) + tol["atol"]
    return bool(torch.isfinite(got).all()) and bool((err <= bound).all()), float(err.max())


def check(op, want: list, terms: int, roundings: int = 1, scales: list | None = None) -> tuple[bool, float]:
    """(every rank's output matches its float32 reference, `bf16_match` with that rank's scale; largest absolute
    error over the ranks)."""
    scales = scales or [None] * len(want)
    verdicts = [bf16_match(op.out(r), expected, terms, roundings, scale)
                for r, (expected, scale) in enumerate(zip(want, scales))]
    return all(ok for ok, _ in verdicts), max(err for _, err in verdicts)

