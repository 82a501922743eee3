"""Gradient all-reduce across data-parallel ranks.

Each rank holds a flat gradient bucket `grad` of shape (numel,). Output: the elementwise sum of the
buckets of all ranks, shape (numel,), same dtype, identical on every rank.
"""
import torch.distributed as dist

from pkit.problem_kit import cost as _cost, generator, parse_dtype, randn

META = {
    "name": "all_reduce",
    "category": "collectives",
    "models": "PyTorch DDP / Megatron DistributedDataParallel all-reduce of a flat gradient buffer",
    "dtypes": ["bfloat16", "float32"],
    "dtype_reason": ("bfloat16: gradients all-reduced in bf16, as DDP does for a bf16 model (PKB's default); "
                     "float32 for fp32 gradient reduction (Megatron's accumulate_allreduce_grads_in_fp32)"),
    "world_sizes": [2, 4, 8],
    "rank_sums": True,  # outputs sum the ranks' terms in the output dtype: tolerance grows with W
    "traffic": "aggregated",
    "description": "Each rank holds a flat gradient bucket grad (numel,); return the elementwise sum over "
                   "all ranks.",
}

SIZES = {
    "tiny": {"numel": 4096},
    "large": {"numel": 64 * 2**20},  # 128 MiB per GPU in bf16
}


def make_inputs(rank, world_size, size, dtype, seed, device="cpu"):
    return (randn((SIZES[size]["numel"],), dtype, generator(seed, rank), device),)


def reference(grad):
    out = grad.clone()
    dist.all_reduce(out)
    return out


def cost(world_size, size, dtype="bfloat16"):
    # Best algorithm = reduce-scatter + all-gather (ring or one-shot-per-chunk): each GPU sends
    # 2 (W-1)/W of the buffer and adds (W-1)/W * numel elements. HBM: read the input, write the output.
    # Sync steps: 2, the reduce-scatter then the all-gather of the bandwidth-optimal algorithm counted above.
    n, b = SIZES[size]["numel"], parse_dtype(dtype).itemsize
    return _cost(flops=(world_size - 1) * n // world_size, hbm_bytes=2 * n * b,
                 link_bytes=2 * (world_size - 1) * n * b // world_size, sync_steps=2)
