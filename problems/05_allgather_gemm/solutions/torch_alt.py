"""Overlap: start an async all-gather, multiply the local token slice meanwhile, then the peers' slices."""
import torch
import torch.distributed as dist


def solution(x, weight):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    slices = [torch.empty_like(x) for _ in range(world_size)]
    work = dist.all_gather(slices, x, async_op=True)
    out = x.new_empty((x.shape[0] * world_size, weight.shape[0]))
    rows = out.split(x.shape[0])
    torch.mm(x, weight.t(), out=rows[rank])
    work.wait()
    for src in range(world_size):
        if src != rank:
            torch.mm(slices[src], weight.t(), out=rows[src])
    return out
