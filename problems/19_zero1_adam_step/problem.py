"""ZeRO stage 1 optimizer step: reduce-scatter gradients, AdamW on the local state shard, all-gather params.

Every rank holds the full flat parameter vector (replicated, dtype), its own full flat gradient (dtype),
the float32 Adam moments exp_avg / exp_avg_sq for its 1/W shard of the parameters (rank r owns elements
[r*N/W, (r+1)*N/W)), and the hyper-parameters: step (1-based index of this update), lr, beta1, beta2,
eps, weight_decay. Gradients are averaged over ranks; each rank applies AdamW (decoupled weight decay,
bias correction, math in float32) to its shard, then the shards are all-gathered.
Output: the updated full parameters (N,) in dtype. (The new moments stay internal: in bfloat16 their
float32 values depend on the order in which ranks' gradients are summed, so they are not compared.)
"""
import torch
import torch.distributed as dist

from pkit.problem_kit import cost as _cost, generator, parse_dtype, randn

META = {
    "name": "zero1_adam_step",
    "category": "data_parallel",
    "models": "DeepSpeed ZeRO-1 / torch ZeroRedundancyOptimizer with AdamW",
    "dtypes": ["float32", "bfloat16"],
    "dtype_reason": ("float32: the parameters here are the optimizer's master copy and the moments its state, fp32 "
                     "in ZeRO; one step (~1e-4 of a weight) is below bf16's resolution"),
    "world_sizes": [2, 4, 8],
    "traffic": "aggregated",
    "description": "Rank holds params (N,) replicated, its grads (N,), float32 Adam moments for its N/W shard "
                   "and hyper-parameters; return the updated full params after AdamW on each shard and an all-gather.",
}

SIZES = {
    "tiny": {"params": 64},
    "large": {"params": 2**26},
}

HYPER = {"step": 10, "lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "eps": 1e-8, "weight_decay": 0.01}


def make_inputs(rank, world_size, size, dtype, seed, device="cpu"):
    n = SIZES[size]["params"]
    params = randn((n,), dtype, generator(seed, -1), device)  # stream shared by all ranks
    g = generator(seed, rank)
    grads = randn((n,), dtype, g, device)
    exp_avg = randn((n // world_size,), "float32", g, device, scale=0.1)
    exp_avg_sq = randn((n // world_size,), "float32", g, device, scale=0.1).square()
    return (params, grads, exp_avg, exp_avg_sq, *HYPER.values())


def reference(params, grads, exp_avg, exp_avg_sq, step, lr, beta1, beta2, eps, weight_decay):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    grad = torch.empty_like(exp_avg, dtype=grads.dtype)
    dist.reduce_scatter(grad, list(grads.chunk(world_size)))
    grad = grad.float() / world_size
    m = beta1 * exp_avg + (1 - beta1) * grad
    v = beta2 * exp_avg_sq + (1 - beta2) * grad.square()
    m_hat = m / (1 - beta1 ** step)
    v_hat = v / (1 - beta2 ** step)
    shard = params.chunk(world_size)[rank].float()
    shard = shard * (1 - lr * weight_decay) - lr * m_hat / (v_hat.sqrt() + eps)
    gathered = [torch.empty_like(exp_avg, dtype=params.dtype) for _ in range(world_size)]
    dist.all_gather(gathered, shard.to(params.dtype))
    return torch.cat(gathered)


def cost(world_size, size, dtype="float32"):
    # N parameters, S = N/W per shard. Links: reduce-scatter of the gradients plus all-gather of the
    # parameters, (W-1)/W * N elements each. FLOPs: (W-1)/W * N adds in the reduce-scatter and about 16
    # per shard element for AdamW. HBM: read all gradients, write all parameters, read the parameter
    # shard, read and write the two float32 moments (a real step persists them).
    # Sync steps: 2, the gradient reduce-scatter, then the parameter all-gather (after the local update).
    n = SIZES[size]["params"]
    shard = n // world_size
    e = parse_dtype(dtype).itemsize
    return _cost(flops=n * (world_size - 1) // world_size + 16 * shard,
                 hbm_bytes=2 * n * e + shard * e + 4 * shard * 4,
                 link_bytes=2 * (world_size - 1) * n * e // world_size, sync_steps=2)
