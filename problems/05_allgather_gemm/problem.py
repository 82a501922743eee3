"""All-gather + GEMM: column-parallel linear layer under sequence parallelism.

Each rank holds a slice of the token activations `x` (tokens / W, in_features), rank r owning rows
[r*tokens/W, (r+1)*tokens/W), and its column shard of the weight `weight` (out_features / W,
in_features) in nn.Linear layout. Output: allgather(x) @ weight.T, shape (tokens, out_features / W):
every token through this rank's output columns.
"""
import torch.distributed as dist

from pkit.problem_kit import column_parallel_linear_inputs, cost as _cost, generator, parse_dtype
from pkit.roofline import ag_gemm_cost

META = {
    "name": "allgather_gemm",
    "category": "fused",
    "models": "Megatron-LM ColumnParallelLinear with sequence_parallel=True (MLP up-projection of LLaMA-70B)",
    "dtypes": ["bfloat16", "float32"],
    "dtype_reason": ("bfloat16: Megatron's tensor-parallel layers keep activations and weights in bf16 "
                     "(tensor-core GEMM, fp32 accumulation)"),
    "world_sizes": [2, 4, 8],
    "pattern": "ag_gemm",  # its overlap pattern (pkit.ops.overlap_patterns): the GEMM study runs its per-rank GEMM
    "traffic": "aggregated",
    "description": "Each rank holds x (tokens/W, in_features) and weight (out_features/W, in_features); "
                   "return all_gather(x along tokens) @ weight.T, (tokens, out_features/W).",
}

SIZES = {
    "tiny": {"tokens": 16, "in_features": 32, "out_features": 48},
    "large": {"tokens": 4096, "in_features": 8192, "out_features": 28672},
}


def make_inputs(rank, world_size, size, dtype, seed, device="cpu"):
    return column_parallel_linear_inputs(SIZES[size], world_size, dtype, generator(seed, rank), device)


def reference(x, weight):
    full = x.new_empty((x.shape[0] * dist.get_world_size(), x.shape[1]))
    dist.all_gather_into_tensor(full, x)
    return full @ weight.t()


def cost(world_size, size, dtype="bfloat16"):
    # pkit.roofline.ag_gemm_cost counts it (FLOPs, the least HBM traffic, link bytes, one sync step): A is the
    # tokens x in_features activations, row-sharded; B this rank's out_features/W columns of the weight.
    s = SIZES[size]
    return _cost(**ag_gemm_cost(m=s["tokens"], k=s["in_features"], n_local=s["out_features"] // world_size,
                                n_gpus=world_size, itemsize=parse_dtype(dtype).itemsize))
