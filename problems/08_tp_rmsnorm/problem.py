"""RMSNorm over a hidden dimension sharded across tensor-parallel ranks.

Each rank holds `x` (tokens, hidden / W), rank r owning hidden columns [r*hidden/W, (r+1)*hidden/W),
and the matching slice `weight` (hidden / W,) of the RMSNorm gain. The mean square runs over the full
hidden dimension, so ranks all-reduce their partial sums of squares (in fp32). Output: this rank's
columns of weight * (x / sqrt(mean(x^2 over hidden) + EPS)), shape (tokens, hidden / W), x's dtype
(normalised in fp32, cast to x's dtype, then scaled by weight, as LLaMA's RMSNorm does).
"""
import torch
import torch.distributed as dist

from pkit.problem_kit import cost as _cost, generator, parse_dtype, randn

EPS = 1e-6

META = {
    "name": "tp_rmsnorm",
    "category": "fused",
    "models": "LLaMA RMSNorm with the hidden dimension tensor-parallel (Megatron-style partial-sum all-reduce)",
    "dtypes": ["bfloat16", "float32"],
    "dtype_reason": ("bfloat16: activations and gain are bf16 as in LLaMA training; the sum of squares (the norm's "
                     "statistic) is accumulated and all-reduced in fp32"),
    "world_sizes": [2, 4, 8],
    "traffic": "aggregated",
    "description": "Each rank holds x (tokens, hidden/W) and weight (hidden/W,); return its columns of the "
                   "RMSNorm over the full hidden dimension, (tokens, hidden/W).",
}

SIZES = {
    "tiny": {"tokens": 8, "hidden": 64},
    "large": {"tokens": 16384, "hidden": 8192},  # 128 MiB of x per GPU at W=2 in bf16
}


def make_inputs(rank, world_size, size, dtype, seed, device="cpu"):
    s = SIZES[size]
    g = generator(seed, rank)
    h = s["hidden"] // world_size
    x = randn((s["tokens"], h), dtype, g, device)
    weight = (1 + randn((h,), "float32", g, scale=0.1)).to(parse_dtype(dtype)).to(device)
    return x, weight


def reference(x, weight):
    xf = x.float()
    sum_sq = xf.square().sum(-1, keepdim=True)
    dist.all_reduce(sum_sq)
    hidden = x.shape[-1] * dist.get_world_size()
    return weight * (xf * torch.rsqrt(sum_sq / hidden + EPS)).to(x.dtype)


def cost(world_size, size, dtype="bfloat16"):
    # Per element: square, accumulate, normalise, scale (4 FLOPs). Link: all-reduce of one fp32 partial
    # sum per token, 2 (W-1)/W * tokens * 4 bytes. HBM: read x and weight, write the output.
    # Sync steps: 2, the reduce-scatter then the all-gather of the all-reduce counted above.
    s, b = SIZES[size], parse_dtype(dtype).itemsize
    t, h = s["tokens"], s["hidden"] // world_size
    return _cost(flops=4 * t * h, hbm_bytes=(2 * t * h + h) * b,
                 link_bytes=2 * (world_size - 1) * t * 4 // world_size, sync_steps=2)
