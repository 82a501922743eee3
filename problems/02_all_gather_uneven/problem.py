"""All-gather of row blocks whose sizes differ by rank (variable-length sequence packing).

Rank r holds `x` of shape (counts[r], hidden): the packed tokens of its sequences. `counts` (a list of
ints, the same on every rank, known from the packing plan) gives every rank's row count. Output: the
concatenation of all ranks' rows in rank order, shape (sum(counts), hidden), same dtype.
"""
import torch
import torch.distributed as dist

from pkit.problem_kit import cost as _cost, generator, parse_dtype, randn

META = {
    "name": "all_gather_uneven",
    "category": "collectives",
    "models": "Megatron-LM gather_along_first_dim with output_split_sizes (packed variable-length sequences)",
    "dtypes": ["bfloat16", "float32"],
    "dtype_reason": ("bfloat16: the gathered rows are activations of bf16 training (sequence-parallel packed "
                     "tokens)"),
    "world_sizes": [2, 4, 8],
    "traffic": "aggregated",
    "description": "Rank r holds x (counts[r], hidden) and the list counts of all ranks' row counts; return "
                   "all ranks' rows concatenated in rank order, (sum(counts), hidden).",
}

SIZES = {
    "tiny": {"rows": 16, "hidden": 64},
    "large": {"rows": 2048, "hidden": 8192},  # mean rows per rank; 32 MiB per rank on average in bf16
}


def row_counts(world_size, rows):
    """Row counts ramping linearly with rank (rank W-1 holds W times rank 0's rows), mean `rows`."""
    return [round(2 * rows * (r + 1) / (world_size + 1)) for r in range(world_size)]


def make_inputs(rank, world_size, size, dtype, seed, device="cpu"):
    s = SIZES[size]
    counts = row_counts(world_size, s["rows"])
    return randn((counts[rank], s["hidden"]), dtype, generator(seed, rank), device), counts


def reference(x, counts):
    padded = x.new_zeros((max(counts), x.shape[1]))
    padded[: x.shape[0]] = x
    gathered = [torch.empty_like(padded) for _ in counts]
    dist.all_gather(gathered, padded)
    return torch.cat([g[:n] for g, n in zip(gathered, counts)])


def cost(world_size, size, dtype="bfloat16"):
    # Every rank must receive the rows it lacks: (W-1) * total rows over all GPUs, at best spread evenly
    # over the W senders ((W-1)/W * total each); and each rank must send its own rows at least once, so
    # the busiest GPU sends max((W-1)/W * total, max(counts)) rows. HBM (busiest rank): read its x, write
    # the output.
    # Sync steps: 1, one all-gather round (every rank knows the counts).
    s = SIZES[size]
    counts = row_counts(world_size, s["rows"])
    row_bytes = s["hidden"] * parse_dtype(dtype).itemsize
    total = sum(counts)
    busiest = max(-(-(world_size - 1) * total // world_size), max(counts))
    return _cost(flops=0, hbm_bytes=(max(counts) + total) * row_bytes, link_bytes=busiest * row_bytes, sync_steps=1)
