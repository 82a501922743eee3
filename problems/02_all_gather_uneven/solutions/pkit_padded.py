"""pkit uneven all-gather: pad to the largest row count, one pkit.dist.all_gather into one buffer, keep the
real rows.

Rounds and bytes match the reference (one round; each GPU sends max(counts) rows to W-1 peers; the padding is
what an equal-share all-gather costs, at most 2W/(W+1) of the mean here). What it saves is local: the rank
holding max(counts) rows sends x as it is (no padded copy), the gather lands in one tensor instead of W
separate ones, and one torch.cat of W views writes the output. The collective runs on pkit's LL path up to
512 KiB per share (no barrier), else its staged kernel.
"""
import torch
import torch.distributed as dist

from pkit import dist as pdist


def solution(x, counts):
    rows = max(counts)
    if x.shape[0] == rows:
        send = x
    else:
        send = x.new_zeros((rows, *x.shape[1:]))
        send[: x.shape[0]] = x
    gathered = pdist.all_gather(send).view(dist.get_world_size(), rows, *x.shape[1:])
    return torch.cat([block[:n] for block, n in zip(gathered, counts)])
