"""1-D halo exchange as one pkit all-to-all whose only non-empty shares are the two neighbours' strips.

The halos are latency-bound: a strip is batch·halo·channels elements (24 KiB in bf16 at the large size), so the
reference's NCCL send/recv group costs a call's ~10 µs. pkit.dist has no point-to-point call; its all-to-all
carries share r-1 = this rank's first rows and share r+1 = its last rows (the other shares are zeros) as LL
packets: one round, no barrier. Bytes per GPU: (W-1) strips where the reference sends 2 (equal at W = 2,
168 KiB at W = 8: still LL-sized). The output is written once: x into its middle, the received strips (or
zeros at the sequence ends) around it, without the reference's torch.cat.
"""
import torch.distributed as dist

from pkit import dist as pdist


def solution(x, halo):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    b, n, c = x.shape
    send = x.new_zeros((world_size, b, halo, c))
    if rank > 0:
        send[rank - 1] = x[:, :halo]
    if rank < world_size - 1:
        send[rank + 1] = x[:, n - halo:]
    received = pdist.all_to_all(send)
    out = x.new_empty((b, n + 2 * halo, c))
    out[:, halo:halo + n] = x
    out[:, :halo] = received[rank - 1] if rank > 0 else 0
    out[:, halo + n:] = received[rank + 1] if rank < world_size - 1 else 0
    return out
