"""One GEMM of the local partial product, then a pkit all-reduce of it (not overlapped).

The all-reduce picks the cheapest pkit form: up to 1 MiB LL packets (no barrier); at W = 2 the one-shot
staged kernel, where each GPU reads the peer's partial once, (W-1)·N = N bytes, the same as a ring's
2(W-1)/W·N; at W > 2 one-shot would read (W-1)·N (3N at W = 4, twice the ring's 1.5N), so it runs pkit's
reduce-scatter then all-gather instead: 2 rounds, 2(W-1)/W·N bytes. Sums are fp32 in rank order, rounded once,
so every rank holds identical bits. GEMM and communication run in sequence on the current stream.
"""
import torch.distributed as dist

from pkit import dist as pdist

LL_BYTES = 1 << 20  # pkit.dist's LL all-reduce limit


def solution(x, weight):
    partial = x @ weight.t()
    world_size = dist.get_world_size()
    one_shot = world_size == 2 or partial.numel() * partial.element_size() <= LL_BYTES
    if one_shot or partial.shape[0] % world_size:
        return pdist.all_reduce(partial)
    return pdist.all_gather(pdist.reduce_scatter(partial))
