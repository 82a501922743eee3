"""Row-sharded 3x3 convolution: halo rows by one pkit LL all-to-all, the image convolved in place of a padded copy.

Exchange: share r-1 carries this rank's first row, share r+1 its last (others zeros): one pkit.dist.all_to_all
of (W-1) rows per GPU (the reference's NCCL send/recv group sends 2; equal at W = 2). A row is
batch·channels·width elements, 512 KiB in bf16 at the large size: LL packets (fp32: staged), one round.
Compute: the reference concatenates (above, x, below), a copy of all of x (256 MiB at W = 2), then convolves.
Here x is convolved as it is with zero padding, right everywhere but the two rows next to a neighbour, and
those are recomputed exactly from 3-row inputs (received row + two own rows) and overwritten: no copy of x.
"""
import torch
import torch.distributed as dist
import torch.nn.functional as F

from pkit import dist as pdist


def solution(x, weight, bias):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    if x.shape[2] < 2:
        raise ValueError(f"x: expected at least 2 rows per rank, got shape {tuple(x.shape)}")
    edge = {rank - 1: x[:, :, :1], rank + 1: x[:, :, -1:]}  # first row up, last row down
    send = x.new_zeros((world_size, *edge[rank - 1].shape))
    for peer, row in edge.items():
        if 0 <= peer < world_size:
            send[peer] = row
    received = pdist.all_to_all(send)
    out = F.conv2d(x, weight, bias, padding=1)
    if rank > 0:
        out[:, :, :1] = F.conv2d(torch.cat((received[rank - 1], x[:, :, :2]), 2), weight, bias, padding=(0, 1))
    if rank < world_size - 1:
        out[:, :, -1:] = F.conv2d(torch.cat((x[:, :, -2:], received[rank + 1]), 2), weight, bias, padding=(0, 1))
    return out
