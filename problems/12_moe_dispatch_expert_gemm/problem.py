"""MoE dispatch followed by the local experts' grouped GEMM.

Each rank holds `x` (tokens, hidden), the router's `topk_ids` (tokens, top_k) int64 of distinct global
expert ids, and the weights of its L = num_experts / W local experts `expert_weights` (L, hidden, ffn)
(rank r owns experts [r*L, (r+1)*L)). Every (token, slot) row goes to its expert's owner, as in
10_moe_dispatch, and is multiplied by that expert's weight matrix. Output: (rows received, ffn), rows
ordered by local expert, then source rank, then source token index, then slot.
"""
import math

import torch

from pkit.problem_kit import cost as _cost, generator, moe_dispatch, moe_tokens, parse_dtype, randn

META = {
    "name": "moe_dispatch_expert_gemm",
    "category": "moe",
    "models": "Megatron-LM MoE layer: MoEAlltoAllTokenDispatcher dispatch then GroupedMLP up-projection",
    "dtypes": ["bfloat16", "float32"],
    "dtype_reason": ("bfloat16: tokens and expert weights are bf16 (grouped GEMM on tensor cores, fp32 "
                     "accumulation)"),
    "world_sizes": [2, 4, 8],
    "traffic": "uniform",  # rows go to their expert's rank; two experts in one remote domain: sent twice
    "description": "Each rank holds x (tokens, hidden), topk_ids (tokens, top_k), its experts' weights "
                   "(L, hidden, ffn) and num_experts; return the rows routed to its experts, each multiplied "
                   "by its expert's weights, ordered (local expert, source rank, token, slot), (rows, ffn).",
}

SIZES = {
    "tiny": {"tokens": 16, "hidden": 8, "ffn": 12, "num_experts": 8, "top_k": 2},
    "large": {"tokens": 4096, "hidden": 4096, "ffn": 1408, "num_experts": 64, "top_k": 6},
}


def make_inputs(rank, world_size, size, dtype, seed, device="cpu"):
    s = SIZES[size]
    g = generator(seed, rank)
    x, topk_ids = moe_tokens(s, dtype, g, device)
    expert_weights = randn((s["num_experts"] // world_size, s["hidden"], s["ffn"]), dtype, g, device,
                           scale=s["hidden"] ** -0.5)
    return x, topk_ids, expert_weights, s["num_experts"]


def reference(x, topk_ids, expert_weights, num_experts):
    chunks, per_src = moe_dispatch(x, topk_ids, num_experts)  # chunks ordered (source rank, local expert)
    local_experts = per_src.shape[1]
    return torch.cat([torch.cat(chunks[e::local_experts]) @ expert_weights[e] for e in range(local_experts)])


def cost(world_size, size, dtype="bfloat16"):
    # Expected values under uniform top-k routing: each rank receives tokens * top_k rows on average.
    # FLOPs: 2 * rows * hidden * ffn. Link: as 10_moe_dispatch, one row per (token, remote rank holding any
    # of its experts): tokens * (W-1) * (1 - C(E-L, k) / C(E, k)) rows. HBM: read x, topk_ids and the
    # local expert weights, write the (rows, ffn) output.
    # Sync steps: 2, the row counts, then the rows (as 10_moe_dispatch).
    s, b = SIZES[size], parse_dtype(dtype).itemsize
    t, h, f, e, k = s["tokens"], s["hidden"], s["ffn"], s["num_experts"], s["top_k"]
    p_remote = 1 - math.comb(e - e // world_size, k) / math.comb(e, k)
    return _cost(flops=2 * t * k * h * f,
                 hbm_bytes=t * h * b + t * k * 8 + (e // world_size * h * f + t * k * f) * b,
                 link_bytes=t * (world_size - 1) * p_remote * h * b, sync_steps=2)
