"""GEMM + reduce-scatter: row-parallel linear layer under sequence parallelism.

Each rank holds all tokens of its slice of the input features `x` (tokens, in_features / W) and the
matching row shard of the weight `weight` (out_features, in_features / W) in nn.Linear layout. The full
product is the sum over ranks of x @ weight.T; rank r returns its token slice of that sum, rows
[r*tokens/W, (r+1)*tokens/W), shape (tokens / W, out_features).
"""
import torch.distributed as dist

from pkit.problem_kit import cost as _cost, generator, parse_dtype, row_parallel_linear_inputs
from pkit.roofline import gemm_rs_cost

META = {
    "name": "gemm_reduce_scatter",
    "category": "fused",
    "models": "Megatron-LM RowParallelLinear with sequence_parallel=True (MLP down-projection of LLaMA-70B)",
    "dtypes": ["bfloat16", "float32"],
    "dtype_reason": ("bfloat16: Megatron's tensor-parallel layers keep activations and weights in bf16 and "
                     "reduce-scatter the bf16 partial sums"),
    "world_sizes": [2, 4, 8],
    "pattern": "gemm_rs",  # its overlap pattern (pkit.ops.overlap_patterns): the GEMM study runs its per-rank GEMM
    "rank_sums": True,  # outputs sum the ranks' terms in the output dtype: tolerance grows with W
    "traffic": "aggregated",
    "description": "Each rank holds x (tokens, in_features/W) and weight (out_features, in_features/W); return "
                   "rows r*tokens/W.. of sum over ranks of x @ weight.T, (tokens/W, out_features).",
}

SIZES = {
    "tiny": {"tokens": 16, "in_features": 48, "out_features": 32},
    "large": {"tokens": 4096, "in_features": 28672, "out_features": 8192},
}


def make_inputs(rank, world_size, size, dtype, seed, device="cpu"):
    return row_parallel_linear_inputs(SIZES[size], world_size, dtype, generator(seed, rank), device)


def reference(x, weight):
    partial = x @ weight.t()
    out = partial.new_empty((partial.shape[0] // dist.get_world_size(), partial.shape[1]))
    dist.reduce_scatter_tensor(out, partial)
    return out


def cost(world_size, size, dtype="bfloat16"):
    # pkit.roofline.gemm_rs_cost counts it (the GEMM's FLOPs and the reduction's additions, the least HBM
    # traffic, link bytes, sync steps): A is the tokens x in_features activations, B the weight, both K-sharded.
    s = SIZES[size]
    return _cost(**gemm_rs_cost(m=s["tokens"], k=s["in_features"], n=s["out_features"], n_gpus=world_size,
                              itemsize=parse_dtype(dtype).itemsize))
