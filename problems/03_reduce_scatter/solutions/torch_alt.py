"""Reduce-scatter as an all-to-all of chunks followed by a local fp32 sum over the sources."""
import torch
import torch.distributed as dist


def solution(grad):
    world_size = dist.get_world_size()
    received = torch.empty_like(grad)
    dist.all_to_all_single(received, grad)
    return received.view(world_size, -1).sum(0, dtype=torch.float32).to(grad.dtype)
