# Written by hand for pkit's test suite; NOT output of a language model.
"""Hangs (collective ordering): every rank receives its neighbour's bucket before sending its own."""
import torch
import torch.distributed as dist


def solution(grad):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    out = grad.clone()
    incoming = torch.empty_like(grad)
    for step in range(1, world_size):
        dist.recv(incoming, src=(rank - step) % world_size)  # every rank blocks here; none reaches send
        dist.send(grad, dst=(rank + step) % world_size)
        out += incoming
    return out
