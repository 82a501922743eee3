"""Distributed sample sort with regular sampling.

Each rank holds n/W distinct keys (int64 or float32; all keys distinct across ranks, so the result is
unique) and the oversampling factor s. The splitter rule is part of the problem, so every correct
candidate returns the same buckets:
  1. sort the local keys; take s samples at local positions (2j + 1) * (n/W) // (2s), j = 0..s-1;
  2. gather all W*s samples and sort them; splitter i is sorted_samples[(i + 1) * s], i = 0..W-2;
  3. bucket r holds the keys k with splitter[r-1] < k <= splitter[r] (open-ended at both ends).
Buckets are exchanged with an all-to-all of uneven sizes. Output: this rank's bucket, sorted ascending
(1-D, same dtype; the concatenation over ranks is the globally sorted sequence).
"""
import torch
import torch.distributed as dist

from pkit.harness.fresh import negated_keys
from pkit.problem_kit import cost as _cost, distinct_keys, generator, parse_dtype

META = {
    "name": "distributed_sample_sort",
    "category": "applications",
    "models": "sample sort / PSRS as in distributed sorting benchmarks (e.g. Thrust/CUB-based GPU sorters)",
    "dtypes": ["int64", "float32"],
    "dtype_reason": ("int64: sort keys must order exactly; float32 for float keys (bf16's 8-bit mantissa would tie "
                     "distinct keys)"),
    "world_sizes": [2, 4, 8],
    "traffic": "uniform",
    "description": "Rank holds n/W distinct keys and an oversampling factor; return its bucket of the "
                   "globally sorted keys (regular sampling, splitter rule in the docstring), sorted.",
}

SIZES = {
    "tiny": {"keys": 2048, "oversample": 8},
    "large": {"keys": 2**26, "oversample": 256},
}


def make_inputs(rank, world_size, size, dtype, seed, device="cpu"):
    s = SIZES[size]
    keys = distinct_keys(s["keys"] // world_size, rank, world_size, generator(seed, rank), dtype)
    return keys.to(device), s["oversample"]


def reference(keys, oversample):
    world_size = dist.get_world_size()
    local = keys.sort().values
    n = local.numel()
    positions = (2 * torch.arange(oversample, device=keys.device) + 1) * n // (2 * oversample)
    samples = [torch.empty(oversample, dtype=keys.dtype, device=keys.device) for _ in range(world_size)]
    dist.all_gather(samples, local[positions])
    splitters = torch.cat(samples).sort().values[oversample * torch.arange(1, world_size, device=keys.device)]
    send_counts = torch.bincount(torch.searchsorted(splitters, local), minlength=world_size)
    recv_counts = torch.empty_like(send_counts)
    dist.all_to_all_single(recv_counts, send_counts)
    received = torch.empty(int(recv_counts.sum()), dtype=keys.dtype, device=keys.device)
    dist.all_to_all_single(received, local, recv_counts.tolist(), send_counts.tolist())
    return received.sort().values


def fresh_edits(inputs, gen):
    """A timed call's change (pkit.harness.fresh): the rank's largest key and a few random ones negated; the
    keys stay distinct over the ranks (copies of other keys, the default change, would not), and the largest
    moves, so the output changes."""
    keys, _ = inputs
    return negated_keys(keys, gen)


def cost(world_size, size, dtype="int64"):
    # Sorting is comparisons and data movement, no FLOPs. HBM: read the local keys and write the bucket
    # (about n/W keys each). Links: with evenly spread keys, (W-1)/W of the local keys leave the rank.
    # Sync steps: 3, the samples (splitters), the bucket counts (to place the keys), then the keys.
    s = SIZES[size]
    local = s["keys"] // world_size * parse_dtype(dtype).itemsize
    return _cost(flops=0, hbm_bytes=2 * local, link_bytes=local * (world_size - 1) // world_size, sync_steps=3)
