"""All-to-all as point-to-point sends and receives to every peer, the local block copied in place."""
import torch
import torch.distributed as dist


def solution(x):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    out = torch.empty_like(x)
    send, recv = x.chunk(world_size), out.chunk(world_size)
    recv[rank].copy_(send[rank])
    ops = []
    for peer in range(world_size):
        if peer != rank:
            ops += [dist.P2POp(dist.isend, send[peer], peer), dist.P2POp(dist.irecv, recv[peer], peer)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()
    return out
