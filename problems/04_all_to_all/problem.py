"""All-to-all with equal splits.

Each rank holds `x` of shape (tokens, hidden), tokens divisible by the world size W, viewed as W equal
row blocks; block j is destined for rank j. Output on rank r: (tokens, hidden) whose block j is block r
of rank j's x.
"""
import torch
import torch.distributed as dist

from pkit.problem_kit import cost as _cost, generator, parse_dtype, randn

META = {
    "name": "all_to_all",
    "category": "collectives",
    "models": "torch.distributed.all_to_all_single as used by GShard fixed-capacity MoE dispatch and "
              "DeepSpeed-Ulysses re-sharding",
    "dtypes": ["bfloat16", "float32"],
    "dtype_reason": ("bfloat16: the exchanged blocks are bf16 activations (MoE tokens, Ulysses heads) in training "
                     "and inference"),
    "world_sizes": [2, 4, 8],
    "traffic": "uniform",
    "description": "Each rank holds x (tokens, hidden) split into W row blocks; rank r returns (tokens, hidden) "
                   "whose block j is block r of rank j.",
}

SIZES = {
    "tiny": {"tokens": 32, "hidden": 16},
    "large": {"tokens": 8192, "hidden": 8192},  # 128 MiB per GPU in bf16
}


def make_inputs(rank, world_size, size, dtype, seed, device="cpu"):
    s = SIZES[size]
    return (randn((s["tokens"], s["hidden"]), dtype, generator(seed, rank), device),)


def reference(x):
    out = torch.empty_like(x)
    dist.all_to_all_single(out, x)
    return out


def cost(world_size, size, dtype="bfloat16"):
    # Pure data movement: every GPU sends the W-1 blocks that belong to other ranks, (W-1)/W of x.
    # HBM: read x, write the output.
    # Sync steps: 1, one all-to-all round.
    s = SIZES[size]
    nbytes = s["tokens"] * s["hidden"] * parse_dtype(dtype).itemsize
    return _cost(flops=0, hbm_bytes=2 * nbytes, link_bytes=(world_size - 1) * nbytes // world_size, sync_steps=1)
