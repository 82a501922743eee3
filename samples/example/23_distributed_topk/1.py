# Written by hand for pkit's test suite; NOT output of a language model.
"""Wrong (data partitioning): returns local positions instead of global ones (forgets the rank's offset)."""
import torch
import torch.distributed as dist


def solution(x, k):
    world_size = dist.get_world_size()
    values, indices = x.topk(k)
    all_values = [torch.empty_like(values) for _ in range(world_size)]
    all_indices = [torch.empty_like(indices) for _ in range(world_size)]
    dist.all_gather(all_values, values)
    dist.all_gather(all_indices, indices)
    best, where = torch.cat(all_values).topk(k)
    return best, torch.cat(all_indices)[where]
