"""Uneven all-gather as one broadcast per source rank, straight into that rank's slice of the output."""
import torch.distributed as dist


def solution(x, counts):
    rank = dist.get_rank()
    out = x.new_empty((sum(counts), x.shape[1]))
    for src, rows in enumerate(out.split(counts)):
        if src == rank:
            rows.copy_(x)
        dist.broadcast(rows, src)
    return out
