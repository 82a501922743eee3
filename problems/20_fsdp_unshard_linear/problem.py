"""FSDP forward of one linear layer: all-gather the row-sharded weight, then y = x @ W^T.

Rank r holds its local batch x of shape (tokens / W, in_features) and rows
[r * out/W, (r + 1) * out/W) of the weight W (out_features, in_features). The full weight is unsharded
(all-gathered) and applied to the local batch. Output: y of shape (tokens / W, out_features), dtype of x.
"""
import torch
import torch.distributed as dist

from pkit.problem_kit import column_parallel_linear_inputs, cost as _cost, generator, parse_dtype

META = {
    "name": "fsdp_unshard_linear",
    "category": "data_parallel",
    "models": "PyTorch FSDP / FSDP2 forward: unshard (all-gather) a linear weight, then the local GEMM",
    "dtypes": ["bfloat16", "float32"],
    "dtype_reason": ("bfloat16: FSDP all-gathers bf16 parameters (MixedPrecisionPolicy param_dtype) for a bf16 "
                     "forward GEMM"),
    "world_sizes": [2, 4, 8],
    "traffic": "aggregated",
    "description": "Rank holds x (tokens/W, in) and weight rows (out/W, in); return x @ W^T of the "
                   "all-gathered weight, shape (tokens/W, out).",
}

SIZES = {
    "tiny": {"tokens": 16, "in_features": 12, "out_features": 16},
    "large": {"tokens": 16384, "in_features": 8192, "out_features": 8192},
}


def make_inputs(rank, world_size, size, dtype, seed, device="cpu"):
    return column_parallel_linear_inputs(SIZES[size], world_size, dtype, generator(seed, rank), device)


def reference(x, w_shard):
    shards = [torch.empty_like(w_shard) for _ in range(dist.get_world_size())]
    dist.all_gather(shards, w_shard)
    return x @ torch.cat(shards).T


def cost(world_size, size, dtype="bfloat16"):
    # FLOPs: 2 * tokens/W * in * out. Links: all-gather, each GPU sends its shard to W-1 peers
    # ((W-1)/W of the weight with a ring). HBM: read x, write y, write the received (W-1)/W of the
    # weight and read the whole weight once for the GEMM.
    # Sync steps: 1, one all-gather round.
    s = SIZES[size]
    e = parse_dtype(dtype).itemsize
    t, i, o = s["tokens"] // world_size, s["in_features"], s["out_features"]
    remote = o * i * e * (world_size - 1) // world_size
    return _cost(flops=2 * t * i * o, hbm_bytes=e * (t * i + t * o + o * i) + remote, link_bytes=remote, sync_steps=1)
