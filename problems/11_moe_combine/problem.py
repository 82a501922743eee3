"""MoE combine: expert outputs return to their tokens' ranks and are summed with the gate weights.

The inverse of 10_moe_dispatch. Rank r holds `expert_out` (rows, hidden): the outputs of its local
experts for the rows it received at dispatch, in dispatch order (local expert, source rank, token, slot);
plus its own tokens' routing `topk_ids` (tokens, top_k) int64 (distinct global expert ids; rank r owns
experts [r*L, (r+1)*L), L = num_experts / W) and gate weights `topk_weights` (tokens, top_k) float32.
Output: y (tokens, hidden) in expert_out's dtype, y[t] = sum_j topk_weights[t, j] * (output of expert
topk_ids[t, j] for token t), accumulated in fp32.
"""
import math

import torch
import torch.distributed as dist

from pkit.problem_kit import cost as _cost, generator, moe_exchange_counts, parse_dtype, randn

META = {
    "name": "moe_combine",
    "category": "moe",
    "models": "Megatron-LM MoEAlltoAllTokenDispatcher.token_unpermutation (un-sort, all-to-all, weighted "
              "scatter-add)",
    "dtypes": ["bfloat16", "float32"],
    "dtype_reason": ("bfloat16: expert outputs travel back in bf16; the gate-weighted sum accumulates in fp32 and "
                     "is cast back, as Megatron's and DeepEP's combine do"),
    "world_sizes": [2, 4, 8],
    "traffic": "uniform",  # expert outputs return to their token's rank; two experts in one remote domain: twice
    "description": "Each rank holds expert_out (rows, hidden) in dispatch order, its tokens' topk_ids and "
                   "topk_weights (tokens, top_k) and num_experts; return the gate-weighted sum of each token's "
                   "expert outputs, (tokens, hidden).",
}

SIZES = {
    "tiny": {"tokens": 16, "hidden": 8, "num_experts": 8, "top_k": 2},
    "large": {"tokens": 4096, "hidden": 4096, "num_experts": 64, "top_k": 6},  # ~192 MiB expert_out in bf16
}


def _routing(seed, rank, s):
    """(generator, topk_ids, topk_weights) of a rank: top-k of random router logits, softmax over the k."""
    g = generator(seed, rank)
    top = torch.randn((s["tokens"], s["num_experts"]), generator=g).topk(s["top_k"], dim=-1)
    return g, top.indices, top.values.softmax(-1)


def make_inputs(rank, world_size, size, dtype, seed, device="cpu"):
    s = SIZES[size]
    local_experts = s["num_experts"] // world_size
    rows = sum(int((_routing(seed, src, s)[1] // local_experts == rank).sum()) for src in range(world_size))
    g, topk_ids, topk_weights = _routing(seed, rank, s)
    expert_out = randn((rows, s["hidden"]), dtype, g, device)
    return expert_out, topk_ids.to(device), topk_weights.to(device), s["num_experts"]


def reference(expert_out, topk_ids, topk_weights, num_experts):
    order, counts, held = moe_exchange_counts(topk_ids, num_experts)  # order: the dispatch send order
    world_size, local_experts = held.shape  # held[src, e]: rows of src's tokens held for local expert e
    chunks = expert_out.split(held.t().flatten().tolist())  # ordered (local expert, source rank)
    send = torch.cat([chunks[e * world_size + src] for src in range(world_size) for e in range(local_experts)])
    back = expert_out.new_empty((order.numel(), expert_out.shape[1]))
    dist.all_to_all_single(back, send, counts.view(world_size, -1).sum(1).tolist(), held.sum(1).tolist())
    weighted = back.float() * topk_weights.flatten()[order, None]
    out = torch.zeros((topk_ids.shape[0], expert_out.shape[1]), dtype=torch.float32, device=expert_out.device)
    out.index_add_(0, order // topk_ids.shape[1], weighted)
    return out.to(expert_out.dtype)


def cost(world_size, size, dtype="bfloat16"):
    # Expected values under uniform top-k routing. Best algorithm: the expert rank pre-sums, with the gate
    # weights, the outputs of a token's experts it holds, so one row per (token, remote rank holding any of
    # its experts) crosses a link: tokens * (W-1) * (1 - C(E-L, k) / C(E, k)) rows per GPU. FLOPs: one
    # multiply-add per element of the tokens * top_k rows. HBM: read expert_out, routing, write y.
    # Sync steps: 2, the row counts (an expert rank needs them to split its rows by source), then the rows.
    s, b = SIZES[size], parse_dtype(dtype).itemsize
    t, h, e, k = s["tokens"], s["hidden"], s["num_experts"], s["top_k"]
    p_remote = 1 - math.comb(e - e // world_size, k) / math.comb(e, k)
    return _cost(flops=2 * t * k * h, hbm_bytes=t * k * h * b + t * k * (8 + 4) + t * h * b,
                 link_bytes=t * (world_size - 1) * p_remote * h * b, sync_steps=2)
