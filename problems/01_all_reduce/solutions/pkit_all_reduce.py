"""pkit all-reduce: one pkit.dist.all_reduce, which picks its form by size and team.

Latency: up to 1 MiB LL packets (no barrier, a few µs) where NCCL pays ~10 µs a call. Bytes: at W = 2 the
one-shot staged kernel, each GPU reading the peer's buffer once, (W-1)·N = N bytes, the ring's 2(W-1)/W·N; past
that at W > 2 the two-shot staged kernel (reduce-scatter and all-gather in one launch, two barriers),
2(W-1)/W·N bytes where one-shot would read (W-1)·N. Sums are fp32 in rank order, rounded once, so every rank
holds identical bits.
"""
from pkit import dist as pdist


def solution(grad):
    return pdist.all_reduce(grad)
