# Written by hand for pkit's test suite; NOT output of a language model.
"""Wrong (data partitioning): gathers every rank's x, then takes block j of rank j (the diagonal) instead of
block `rank` of rank j; only this rank's own block comes out right."""
import torch
import torch.distributed as dist


def solution(x):
    world_size = dist.get_world_size()
    everything = [torch.empty_like(x) for _ in range(world_size)]
    dist.all_gather(everything, x)
    return torch.cat([everything[j].chunk(world_size)[j] for j in range(world_size)])
