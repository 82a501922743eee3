"""Tensor-parallel RMSNorm with the sum of squares all-reduced by pkit's LL packets.

The only communication is the per-token fp32 sum of squares: tokens·4 bytes (64 KiB at the large size), far
below pkit.dist's 1 MiB LL limit, so the all-reduce is one barrier-free LL exchange (a few µs) instead of a
~10 µs NCCL call; it sums in fp32 in rank order, as the statistic must be. Locally, on the GPU, x is read
twice and never copied to fp32 (the reference materialises x.float()): vector_norm accumulates the squares in
fp32, and x times the fp32 inverse RMS is computed in fp32 by type promotion, rounded once to x's dtype, then
scaled by the gain, as LLaMA's RMSNorm orders it.
"""
import torch
import torch.distributed as dist

from pkit import dist as pdist

EPS = 1e-6  # the problem's epsilon


def solution(x, weight):
    sum_sq = torch.linalg.vector_norm(x, dim=-1, dtype=torch.float32).square_()
    hidden = x.shape[-1] * dist.get_world_size()
    inv_rms = pdist.all_reduce(sum_sq).div_(hidden).add_(EPS).rsqrt_()
    return weight * (x * inv_rms[:, None]).to(x.dtype)
