"""All-reduce as its two halves: reduce-scatter into this rank's chunk, then all-gather the chunks."""
import torch
import torch.distributed as dist


def solution(grad):
    world_size = dist.get_world_size()
    chunk = grad.new_empty(grad.numel() // world_size)
    dist.reduce_scatter_tensor(chunk, grad)
    out = torch.empty_like(grad)
    dist.all_gather_into_tensor(out, chunk)
    return out
