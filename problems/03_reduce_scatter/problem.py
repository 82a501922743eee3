"""Gradient reduce-scatter (ZeRO-2 / FSDP gradient sharding).

Each rank holds a flat gradient bucket `grad` of shape (numel,), numel divisible by the world size W.
Output on rank r: chunk r of the elementwise sum over ranks, i.e. sum_s grad_s[r*numel/W:(r+1)*numel/W],
shape (numel / W,), same dtype.
"""
import torch.distributed as dist

from pkit.problem_kit import cost as _cost, generator, parse_dtype, randn

META = {
    "name": "reduce_scatter",
    "category": "collectives",
    "models": "DeepSpeed ZeRO-2 / PyTorch FSDP reduce-scatter of a flat gradient bucket onto its shard owners",
    "dtypes": ["bfloat16", "float32"],
    "dtype_reason": ("bfloat16: gradients reduce-scattered in bf16, as FSDP with reduce_dtype=bf16 and ZeRO-2 on "
                     "bf16 gradients do (PKB's default); float32 for fp32 gradient reduction"),
    "world_sizes": [2, 4, 8],
    "rank_sums": True,  # outputs sum the ranks' terms in the output dtype: tolerance grows with W
    "traffic": "aggregated",
    "description": "Each rank holds grad (numel,); rank r returns chunk r (numel/W,) of the sum over ranks.",
}

SIZES = {
    "tiny": {"numel": 4096},
    "large": {"numel": 64 * 2**20},  # 128 MiB per GPU in bf16
}


def make_inputs(rank, world_size, size, dtype, seed, device="cpu"):
    return (randn((SIZES[size]["numel"],), dtype, generator(seed, rank), device),)


def reference(grad):
    out = grad.new_empty(grad.numel() // dist.get_world_size())
    dist.reduce_scatter_tensor(out, grad)
    return out


def cost(world_size, size, dtype="bfloat16"):
    # Each GPU sends the W-1 chunks it does not own ((W-1)/W of the buffer, directly or along a ring)
    # and adds (W-1) incoming chunks into its own. HBM: read the input, write the 1/W output.
    # Sync steps: 1, one reduce-scatter round.
    n, b = SIZES[size]["numel"], parse_dtype(dtype).itemsize
    return _cost(flops=(world_size - 1) * n // world_size, hbm_bytes=n * b + n * b // world_size,
                 link_bytes=(world_size - 1) * n * b // world_size, sync_steps=1)
