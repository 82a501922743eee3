"""MoE combine as two pkit rounds (count all-gather, padded row all-to-all) and a gather + batched weighted sum.

Round 1: the (E,) int64 routing counts all-gathered (W·E·8 bytes, LL packets, no barrier) instead of an NCCL
all-to-all: every rank learns how its expert rows split by source and the largest (owner, source) block, in
one host sync. Round 2: one pkit.dist.all_to_all of blocks padded to that largest one, (W-1)·max_pair rows per
GPU against the exact sum (+0.3% / 1.1% / 3.4% at W = 2 / 4 / 8, large size). The reference's cat of chunks
and fp32 index_add_ (a scatter with atomics on the GPU) become one scatter into the send buffer and one gather
of each token's top_k rows in slot order, summed with the gate weights by a batched fp32 matmul.
"""
import torch
import torch.distributed as dist

from pkit import dist as pdist


def solution(expert_out, topk_ids, topk_weights, num_experts):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    local_experts = num_experts // world_size
    device, ids = expert_out.device, topk_ids.flatten()
    counts = torch.zeros(num_experts, dtype=torch.int64, device=device).scatter_add_(0, ids, torch.ones_like(ids))
    table = pdist.all_gather(counts).view(world_size, world_size, local_experts)  # [source, owner, expert]
    held = table[:, rank]  # this rank's expert rows: [source, local expert], stored in (expert, source) order
    pad = max(1, int(table.sum(2).max()))

    # Scatter expert_out's (expert, source) blocks into per-source blocks ordered (expert, token, slot).
    block_rows = held.t().flatten()
    block_start = torch.arange(world_size, device=device)[:, None] * pad + held.cumsum(1) - held
    move = block_start.t().flatten() - (block_rows.cumsum(0) - block_rows)
    dest = torch.repeat_interleave(move, block_rows, output_size=expert_out.shape[0])
    send = expert_out.new_empty((world_size * pad, expert_out.shape[1]))
    send[dest + torch.arange(expert_out.shape[0], device=device)] = expert_out
    back = pdist.all_to_all(send)  # block o: this rank's rows from owner o, by (owner's expert, token, slot)

    # Where each (token, slot) row landed: its rank in the expert-sorted order, within its owner's block.
    order = ids.argsort(stable=True)
    owner = ids[order] // local_experts
    to_owner = table[rank].sum(1)
    where = torch.empty_like(ids)
    where[order] = owner * pad + torch.arange(ids.numel(), device=device) - (to_owner.cumsum(0) - to_owner)[owner]
    rows = back[where].view(*topk_ids.shape, -1).float()
    return torch.bmm(topk_weights.unsqueeze(1), rows).squeeze(1).to(expert_out.dtype)
