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
import torch.distributed as dist

from pkit.problem_kit import cost as _cost, generator, parse_dtype, randn

META = {
    "name": "moe_dispatch",
    "category": "moe",
    "models": "Megatron-LM MoEAlltoAllTokenDispatcher.token_permutation (permute, all-to-all, sort chunks "
              "by local expert)",
    "dtypes": ["float32", "bfloat16"],
    "world_sizes": [2, 4, 8],
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
    g = generator(seed, rank)
    topk_ids = torch.rand((s["tokens"], s["num_experts"]), generator=g).topk(s["top_k"], dim=-1).indices
    x = randn((s["tokens"], s["hidden"]), dtype, g, device)
    return x, topk_ids.to(device), s["num_experts"]


def reference(x, topk_ids, num_experts):
    world_size = dist.get_world_size()
    local_experts = num_experts // world_size
    flat = topk_ids.flatten()
    order = flat.argsort(stable=True)  # by global expert (so by destination rank), then (token, slot)
    send = x[order // topk_ids.shape[1]]
    counts = torch.bincount(flat, minlength=num_experts)
    recv_counts = torch.empty_like(counts)  # [src * L + e]: rows from src for local expert e
    dist.all_to_all_single(recv_counts, counts)
    per_src = recv_counts.view(world_size, local_experts)
    recv = x.new_empty((int(recv_counts.sum()), x.shape[1]))
    dist.all_to_all_single(recv, send, per_src.sum(1).tolist(), counts.view(world_size, -1).sum(1).tolist())
    chunks = recv.split(recv_counts.tolist())  # ordered (source rank, local expert)
    by_expert = [chunks[src * local_experts + e] for e in range(local_experts) for src in range(world_size)]
    return torch.cat(by_expert), per_src.sum(0)


def cost(world_size, size, dtype="bfloat16"):
    # Expected values under uniform top-k routing. A token needs to cross to a remote rank once if any of
    # its experts live there (the receiver duplicates it per expert): probability 1 - C(E-L, k) / C(E, k).
    # Link: tokens * (W-1) * that probability rows of hidden per GPU (routing metadata neglected).
    # HBM: read x and topk_ids, write the tokens * top_k rows received on average.
    s, b = SIZES[size], parse_dtype(dtype).itemsize
    t, h, e, k = s["tokens"], s["hidden"], s["num_experts"], s["top_k"]
    p_remote = 1 - math.comb(e - e // world_size, k) / math.comb(e, k)
    return _cost(flops=0, hbm_bytes=t * h * b + t * k * 8 + t * k * h * b,
                 link_bytes=t * (world_size - 1) * p_remote * h * b)
