"""MoE token dispatch: all-to-all with uneven splits to expert-parallel ranks.

Each rank holds `x` (tokens, hidden) and the router's choice `topk_ids` (tokens, top_k) int64 of distinct
global expert ids per token; `num_experts` experts are sharded so that rank r owns the L = num_experts / W
experts [r*L, (r+1)*L). Every (token, slot) pair is one row sent to the owner of its expert.
Output on rank r, a tuple:
  recv_x (rows received, hidden): the rows for this rank's experts, ordered by local expert, then source
      rank, then source token index, then slot (each expert's rows contiguous, as a grouped GEMM wants);
  tokens_per_expert (L,) int64: how many rows each local expert received.
"""
import math

import torch

from pkit.problem_kit import cost as _cost, generator, moe_dispatch, moe_tokens, parse_dtype

META = {
    "name": "moe_dispatch",
    "category": "moe",
    "models": "Megatron-LM MoEAlltoAllTokenDispatcher.token_permutation (permute, all-to-all, sort chunks "
              "by local expert)",
    "dtypes": ["bfloat16", "float32"],
    "dtype_reason": ("bfloat16: tokens are dispatched in bf16 (Megatron's all-to-all dispatcher, DeepEP's normal "
                     "kernels)"),
    "world_sizes": [2, 4, 8],
    "traffic": "uniform",  # rows go to their expert's rank; two experts in one remote domain: sent twice
    "description": "Each rank holds x (tokens, hidden), topk_ids (tokens, top_k) and num_experts; return the rows "
                   "routed to its experts ordered (local expert, source rank, token, slot) and the "
                   "per-local-expert row counts.",
}

SIZES = {
    "tiny": {"tokens": 16, "hidden": 8, "num_experts": 8, "top_k": 2},
    "large": {"tokens": 4096, "hidden": 4096, "num_experts": 64, "top_k": 6},  # ~192 MiB received in bf16
}


def make_inputs(rank, world_size, size, dtype, seed, device="cpu"):
    s = SIZES[size]
    return (*moe_tokens(s, dtype, generator(seed, rank), device), s["num_experts"])


def reference(x, topk_ids, num_experts):
    chunks, per_src = moe_dispatch(x, topk_ids, num_experts)  # chunks ordered (source rank, local expert)
    world_size, local_experts = per_src.shape
    by_expert = [chunks[src * local_experts + e] for e in range(local_experts) for src in range(world_size)]
    return torch.cat(by_expert), per_src.sum(0)


def cost(world_size, size, dtype="bfloat16"):
    # Expected values under uniform top-k routing. A token needs to cross to a remote rank once if any of
    # its experts live there (the receiver duplicates it per expert): probability 1 - C(E-L, k) / C(E, k).
    # Link: tokens * (W-1) * that probability rows of hidden per GPU (routing metadata neglected).
    # HBM: read x and topk_ids, write the tokens * top_k rows received on average.
    # Sync steps: 2, the row counts (a receiver needs them to place rows), then the rows.
    s, b = SIZES[size], parse_dtype(dtype).itemsize
    t, h, e, k = s["tokens"], s["hidden"], s["num_experts"], s["top_k"]
    p_remote = 1 - math.comb(e - e // world_size, k) / math.comb(e, k)
    return _cost(flops=0, hbm_bytes=t * h * b + t * k * 8 + t * k * h * b,
                 link_bytes=t * (world_size - 1) * p_remote * h * b, sync_steps=2)
