# Written by hand for pkit's test suite; NOT output of a language model.
"""Correct: pairwise exchange with send/recv, the lower rank of each pair sending first (no deadlock)."""
import torch
import torch.distributed as dist


def solution(x):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    blocks = x.chunk(world_size)
    out = torch.empty_like(x)
    received = list(out.chunk(world_size))
    received[rank].copy_(blocks[rank])
    for peer in range(world_size):
        if peer == rank:
            continue
        incoming = torch.empty_like(blocks[peer])
        if rank < peer:
            dist.send(blocks[peer].contiguous(), dst=peer)
            dist.recv(incoming, src=peer)
        else:
            dist.recv(incoming, src=peer)
            dist.send(blocks[peer].contiguous(), dst=peer)
        received[peer].copy_(incoming)
    return out
