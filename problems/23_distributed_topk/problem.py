"""Global top-k over a vector sharded across ranks.

Rank r holds the r-th contiguous slice x of a vector of n float32 values (all distinct, so the answer
is unique) and k. Output, replicated on every rank: (values (k,) float32 in descending order, indices
(k,) int64 positions in the global vector, i.e. r * n/W + local position).
"""
import torch
import torch.distributed as dist

from pkit.harness.fresh import negated_keys
from pkit.problem_kit import cost as _cost, distinct_keys, generator

META = {
    "name": "distributed_topk",
    "category": "applications",
    "models": "top-k gradient sparsification (Deep Gradient Compression) / magnitude pruning over a sharded vector",
    "dtypes": ["float32"],
    "dtype_reason": ("float32: selection needs distinct, exactly ordered values; bf16's 8-bit mantissa would tie "
                     "them"),
    "world_sizes": [2, 4, 8],
    "traffic": "aggregated",
    "description": "Rank holds a slice (n/W,) of a float32 vector with distinct values and k; return the "
                   "global top-k (values descending, int64 global indices), the same on every rank.",
}

SIZES = {
    "tiny": {"n": 512, "k": 8},
    "large": {"n": 2**26, "k": 1024},
}


def make_inputs(rank, world_size, size, dtype, seed, device="cpu"):
    s = SIZES[size]
    x = distinct_keys(s["n"] // world_size, rank, world_size, generator(seed, rank), "float32")
    return x.to(device), s["k"]


def reference(x, k):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    values, indices = x.topk(k)
    all_values = [torch.empty_like(values) for _ in range(world_size)]
    all_indices = [torch.empty_like(indices) for _ in range(world_size)]
    dist.all_gather(all_values, values)
    dist.all_gather(all_indices, indices + rank * x.numel())
    best, where = torch.cat(all_values).topk(k)
    return best, torch.cat(all_indices)[where]


def fresh_edits(inputs, gen):
    """A timed call's change (pkit.harness.fresh): the rank's largest key and a few random ones negated; the
    keys stay distinct over the ranks (copies of other keys, the default change, would not), and the largest
    moves, so the output changes."""
    x, _ = inputs
    return negated_keys(x, gen)


def cost(world_size, size, dtype="float32"):
    # Selection is comparisons, no FLOPs. HBM: read the local slice once (outputs are negligible).
    # Links: each rank's local top-k (4-byte value + 8-byte index) must reach the W-1 other ranks.
    # Sync steps: 1, one all-gather round of the local top-k.
    s = SIZES[size]
    return _cost(flops=0, hbm_bytes=4 * s["n"] // world_size + 2 * 12 * s["k"],
                 link_bytes=12 * s["k"] * (world_size - 1), sync_steps=1)
