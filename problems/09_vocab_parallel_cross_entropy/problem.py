"""Vocab-parallel cross-entropy (Megatron-LM).

The LM-head logits are sharded on the vocabulary: rank r holds `logits` (tokens, vocab / W) for vocab
ids [r*vocab/W, (r+1)*vocab/W). Every rank holds the same `target` (tokens,) int64 of global vocab ids.
Output: the per-token loss logsumexp(full logits) - full_logits[target], shape (tokens,), float32,
identical on every rank. Computed in fp32 with three all-reduces: max, sum of exp, target logit.
"""
import torch
import torch.distributed as dist

from pkit.problem_kit import cost as _cost, generator, parse_dtype, randn

META = {
    "name": "vocab_parallel_cross_entropy",
    "category": "fused",
    "models": "Megatron-LM tensor_parallel.vocab_parallel_cross_entropy (LLaMA-3 vocabulary, 128256)",
    "dtypes": ["bfloat16", "float32"],
    "dtype_reason": ("bfloat16: the logits come out of the bf16 LM head; the loss math runs in fp32 (Megatron "
                     "upcasts the logits), so the output is float32"),
    "world_sizes": [2, 4, 8],
    "traffic": "aggregated",
    "description": "Each rank holds logits (tokens, vocab/W), its vocab shard, and target (tokens,) global ids; "
                   "return the per-token cross-entropy over the full vocabulary, (tokens,) float32.",
}

SIZES = {
    "tiny": {"tokens": 8, "vocab": 64},
    "large": {"tokens": 4096, "vocab": 128256},  # 501 MiB of logits per GPU at W=2 in bf16
}


def make_inputs(rank, world_size, size, dtype, seed, device="cpu"):
    s = SIZES[size]
    logits = randn((s["tokens"], s["vocab"] // world_size), dtype, generator(seed, rank), device, scale=2.0)
    target = torch.randint(0, s["vocab"], (s["tokens"],), generator=generator(seed, -1)).to(device)
    return logits, target


def reference(logits, target):
    shard = logits.shape[-1]
    logits = logits.float()
    logits_max = logits.max(-1).values
    dist.all_reduce(logits_max, op=dist.ReduceOp.MAX)
    shifted = logits - logits_max[:, None]
    local_target = target - dist.get_rank() * shard
    in_shard = (local_target >= 0) & (local_target < shard)
    picked = shifted.gather(1, local_target.clamp(0, shard - 1)[:, None]).squeeze(1)
    target_logit = torch.where(in_shard, picked, 0.0)
    sum_exp = shifted.exp().sum(-1)
    dist.all_reduce(target_logit)
    dist.all_reduce(sum_exp)
    return sum_exp.log() - target_logit


def cost(world_size, size, dtype="bfloat16"):
    # Per logit: max, subtract, exp, add (4 FLOPs). Link: each rank computes, in fp32, its shard's logsumexp
    # and target logit per token, and one all-gather sends these two values to the W-1 others ((W-1) * 2 * 4
    # bytes per token); a reduce-scatter + all-gather of the pairs would send 2/W of that in two rounds, a
    # difference that never matters here (the logits dominate). HBM: read the logits shard and targets, write
    # the fp32 loss.
    # Sync steps: 1, the one all-gather round counted above.
    s = SIZES[size]
    t, v = s["tokens"], s["vocab"] // world_size
    return _cost(flops=4 * t * v, hbm_bytes=t * v * parse_dtype(dtype).itemsize + t * (8 + 4),
                 link_bytes=(world_size - 1) * t * 8, sync_steps=1)
