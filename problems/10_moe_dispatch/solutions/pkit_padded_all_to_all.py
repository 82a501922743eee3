"""MoE dispatch as two pkit rounds: an all-gather of the expert counts, then one padded all-to-all of rows.

Round 1: every rank's (E,) int64 counts all-gathered (W·E·8 bytes, LL packets, no barrier) in place of an NCCL
all-to-all; every rank then holds the whole (source, destination, expert) table, and one host sync gives the
pad and the output size (the reference syncs twice for split sizes). Round 2: one pkit.dist.all_to_all, each
(source, destination) block padded to the largest: (W-1)·max_pair rows per GPU instead of the exact sum (large
size, seed 0: max_pair is 0.3% above the mean at W = 2, 1.1% at W = 4, 3.4% at W = 8). Rows are gathered once
into the send buffer in the order the receiver wants, then picked once into (expert, source) order (no cat).
"""
import torch
import torch.distributed as dist

from pkit import dist as pdist


def solution(x, topk_ids, num_experts):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    local_experts = num_experts // world_size
    ids = topk_ids.flatten()
    counts = torch.zeros(num_experts, dtype=torch.int64, device=x.device).scatter_add_(0, ids, torch.ones_like(ids))
    table = pdist.all_gather(counts).view(world_size, world_size, local_experts)  # [source, destination, expert]
    pair_rows = table.sum(2)
    held = table[:, rank]  # rows arriving here: [source, local expert]
    pad, total = torch.stack((pair_rows.max(), held.sum())).tolist()  # the one host sync
    pad = max(pad, 1)

    order = ids.argsort(stable=True)  # by expert, then (token, slot): grouped by destination
    dest = ids[order] // local_experts
    first = pair_rows[rank].cumsum(0) - pair_rows[rank]  # where each destination's rows start in `order`
    slot = dest * pad + torch.arange(ids.numel(), device=x.device) - first[dest]
    send = x.new_empty((world_size * pad, x.shape[1]))
    send[slot] = x[order // topk_ids.shape[1]]
    received = pdist.all_to_all(send)  # block s: source s's rows for this rank, by (local expert, token, slot)

    per_block = held.t().flatten()  # output blocks in (local expert, source) order
    start = (torch.arange(world_size, device=x.device)[:, None] * pad + held.cumsum(1) - held).t().flatten()
    shift = torch.repeat_interleave(start - (per_block.cumsum(0) - per_block), per_block, output_size=total)
    rows = shift + torch.arange(total, device=x.device)
    return received[rows], held.sum(0)
