"""pkit all-reduce: one-shot while latency-bound or at two ranks, reduce-scatter + all-gather otherwise.

Latency: up to 1 MiB pkit.dist runs LL packets (no barrier, a few µs) where NCCL pays ~10 µs a call.
Bytes: the one-shot staged all-reduce has every GPU read the W-1 peers' whole buffers, (W-1)·N bytes, the
ring/two-shot optimum being 2(W-1)/W·N: equal at W = 2, twice as much at W = 4 (3N vs 1.5N). So past the LL
size at W > 2 this runs pkit.dist.reduce_scatter then pkit.dist.all_gather: 2 rounds, 2(W-1)/W·N bytes, as
NCCL's ring, on pkit's staged kernels. Sums are fp32 in rank order, rounded once (identical on every rank).
"""
import torch.distributed as dist

from pkit import dist as pdist

LL_BYTES = 1 << 20  # pkit.dist's LL all-reduce limit


def solution(grad):
    world_size = dist.get_world_size()
    if world_size == 2 or grad.numel() * grad.element_size() <= LL_BYTES or grad.numel() % world_size:
        return pdist.all_reduce(grad)
    return pdist.all_gather(pdist.reduce_scatter(grad))
