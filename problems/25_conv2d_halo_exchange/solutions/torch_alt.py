"""Overlap: start the halo exchange, convolve the local rows with zero padding meanwhile (correct
except the first and last output rows), then recompute those two rows from 3-row strips with halos."""
import torch
import torch.distributed as dist
import torch.nn.functional as F


def solution(x, weight, bias):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    above = x.new_zeros(x.shape[0], x.shape[1], 1, x.shape[3])
    below = x.new_zeros(x.shape[0], x.shape[1], 1, x.shape[3])
    ops = []
    if rank > 0:
        ops += [dist.P2POp(dist.irecv, above, rank - 1), dist.P2POp(dist.isend, x[:, :, 0:1].contiguous(), rank - 1)]
    if rank < world_size - 1:
        ops += [dist.P2POp(dist.irecv, below, rank + 1), dist.P2POp(dist.isend, x[:, :, -1:].contiguous(), rank + 1)]
    reqs = dist.batch_isend_irecv(ops)
    out = F.conv2d(x, weight, bias, padding=1)
    for req in reqs:
        req.wait()
    out[:, :, :1] = F.conv2d(torch.cat((above, x[:, :, :2]), dim=2), weight, bias, padding=(0, 1))
    out[:, :, -1:] = F.conv2d(torch.cat((x[:, :, -2:], below), dim=2), weight, bias, padding=(0, 1))
    return out
