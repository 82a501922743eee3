"""DDP gradient bucketing: flatten gradients into buckets of a given byte size and all-reduce (average).

Every rank holds the same list of gradient tensors (the parameters of a few transformer layers, varied
shapes) with its own values, and the bucket size in bytes. As torch DDP does, gradients are assigned to
buckets in reverse parameter order (the order backward produces them); a bucket closes once it holds at
least bucket_bytes. Each bucket is flattened into one buffer, divided by the world size and all-reduced.
Output: the tuple of averaged gradients, same shapes and dtype as the inputs.
"""
import torch
import torch.distributed as dist

from pkit.problem_kit import cost as _cost, generator, parse_dtype, randn, transformer_param_shapes

META = {
    "name": "ddp_bucketed_all_reduce",
    "category": "data_parallel",
    "models": "torch DistributedDataParallel Reducer (gradient buckets, default allreduce comm hook)",
    "dtypes": ["bfloat16", "float32"],
    "dtype_reason": ("bfloat16: DDP buckets take the gradients' dtype, bf16 for a bf16 model (PKB's default); "
                     "float32 for DDP under autocast (fp32 parameters and gradients)"),
    "world_sizes": [2, 4, 8],
    "rank_sums": True,  # outputs sum the ranks' terms in the output dtype: tolerance grows with W
    "traffic": "aggregated",
    "description": "Rank holds bucket_bytes and a list of gradients (transformer-layer shapes); return the "
                   "gradients averaged over ranks, bucketed in reverse order and all-reduced bucket by bucket.",
}

SIZES = {
    "tiny": {"layers": 2, "hidden": 8, "ffn": 12, "bucket_bytes": 512},
    "large": {"layers": 2, "hidden": 2048, "ffn": 5632, "bucket_bytes": 25 * 2**20},
}


def make_inputs(rank, world_size, size, dtype, seed, device="cpu"):
    s = SIZES[size]
    g = generator(seed, rank)
    return (s["bucket_bytes"], *(randn(shape, dtype, g, device) for shape in transformer_param_shapes(s)))


def reference(bucket_bytes, *grads):
    world_size = dist.get_world_size()
    out = [None] * len(grads)
    bucket, filled = [], 0
    for i in reversed(range(len(grads))):
        bucket.append(i)
        filled += grads[i].numel() * grads[i].element_size()
        if filled >= bucket_bytes or i == 0:
            flat = torch.cat([grads[j].flatten() for j in bucket]).div_(world_size)
            dist.all_reduce(flat)
            for j, piece in zip(bucket, flat.split([grads[j].numel() for j in bucket])):
                out[j] = piece.view_as(grads[j])
            bucket, filled = [], 0
    return tuple(out)


def cost(world_size, size, dtype="bfloat16"):
    # N gradient elements. Ring all-reduce: each GPU sends 2(W-1)/W * N elements and adds (W-1)/W * N;
    # plus one division per element. HBM: read the gradients once and write the averages once.
    # Sync steps: 2, the buckets are independent, so one reduce-scatter then one all-gather round covers them.
    n = sum(torch.Size(shape).numel() for shape in transformer_param_shapes(SIZES[size]))
    e = parse_dtype(dtype).itemsize
    return _cost(flops=n + n * (world_size - 1) // world_size, hbm_bytes=2 * n * e,
                 link_bytes=2 * (world_size - 1) * n * e // world_size, sync_steps=2)
