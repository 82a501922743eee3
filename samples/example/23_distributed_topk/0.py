# Written by hand for pkit's test suite; NOT output of a language model.
"""Correct: local top-k, one all-gather of (value, global index) pairs packed as float64, global top-k."""
import torch
import torch.distributed as dist


def solution(x, k):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    values, indices = x.topk(k)
    packed = torch.stack([values.double(), (indices + rank * x.numel()).double()])
    gathered = [torch.empty_like(packed) for _ in range(world_size)]
    dist.all_gather(gathered, packed)
    pool = torch.cat(gathered, dim=1)
    best, where = pool[0].topk(k)
    return best.float(), pool[1, where].long()
