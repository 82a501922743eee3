"""Switch/GShard auxiliary load-balancing loss over a data-parallel group.

Each rank holds its tokens' router logits `router_logits` (tokens, num_experts) and the router's
choice `topk_ids` (tokens, top_k) int64. Statistics are global over the group: with T the total number
of tokens over all ranks, count_e the number of (token, slot) pairs routed to expert e and P_e the sum
over all tokens of softmax(router_logits)[:, e] (fp32),
    loss = num_experts * sum_e (count_e / (T * top_k)) * (P_e / T).
Output: the loss as a 0-dim float32 tensor, identical on every rank (coefficient 1).
"""
import torch
import torch.distributed as dist

from pkit.harness.fresh import row_copies
from pkit.problem_kit import cost as _cost, generator, parse_dtype, randn

META = {
    "name": "moe_load_balance_loss",
    "category": "moe",
    "models": "Megatron-LM switch_load_balancing_loss_func with global (data-parallel) token statistics; "
              "DeepSeek-V3 routing sizes",
    "dtypes": ["float32", "bfloat16"],
    "dtype_reason": ("float32: a loss over global routing statistics; router logits are kept in fp32 (Megatron's "
                     "moe_router_dtype='fp32', DeepSeek-V3's fp32 gating)"),
    "world_sizes": [2, 4, 8],
    "traffic": "aggregated",
    "description": "Each rank holds router_logits (tokens, num_experts) and topk_ids (tokens, top_k); return the "
                   "Switch load-balancing loss over all ranks' tokens, a 0-dim float32 tensor.",
}

SIZES = {
    "tiny": {"tokens": 16, "num_experts": 8, "top_k": 2},
    "large": {"tokens": 131072, "num_experts": 256, "top_k": 8},  # 64 MiB of logits per GPU in bf16
}


def make_inputs(rank, world_size, size, dtype, seed, device="cpu"):
    s = SIZES[size]
    router_logits = randn((s["tokens"], s["num_experts"]), dtype, generator(seed, rank), device)
    topk_ids = router_logits.float().topk(s["top_k"], dim=-1).indices
    return router_logits, topk_ids


def reference(router_logits, topk_ids):
    num_experts = router_logits.shape[-1]
    probs = router_logits.float().softmax(-1)
    counts = torch.bincount(topk_ids.flatten(), minlength=num_experts).float()
    stats = torch.cat([counts, probs.sum(0), probs.new_tensor([probs.shape[0]])])
    dist.all_reduce(stats)
    counts, prob_sums, tokens = stats.split([num_experts, num_experts, 1])
    return num_experts * ((counts / (tokens * topk_ids.shape[1])) * (prob_sums / tokens)).sum()


def fresh_edits(inputs, gen):
    """A timed call's change (pkit.harness.fresh): a sixteenth of the tokens take one other token's router logits
    and top-k ids, so topk_ids stays the top-k of the logits and the routing statistics shift. The loss sits
    near 1 whatever the inputs (independent large input sets differ by ~1e-5, under its tolerance); copies of
    many different rows move it less than that, one row copied many times by ~40 tolerances at the large size."""
    router_logits, topk_ids = inputs
    return row_copies((router_logits, topk_ids), gen, count=router_logits.shape[0] // 16, one_source=True)


def cost(world_size, size, dtype="float32"):
    # Softmax and column sum: ~5 FLOPs per logit. Link: all-reduce of 2 * num_experts + 1 fp32 statistics,
    # 2 (W-1)/W of them per GPU. HBM: read logits and topk_ids.
    # Sync steps: 2, the reduce-scatter then the all-gather of the all-reduce counted above.
    s = SIZES[size]
    t, e = s["tokens"], s["num_experts"]
    return _cost(flops=5 * t * e, hbm_bytes=t * e * parse_dtype(dtype).itemsize + t * s["top_k"] * 8,
                 link_bytes=2 * (world_size - 1) * (2 * e + 1) * 4 // world_size, sync_steps=2)
