"""Global gradient-norm clipping with sharded gradients (FSDP / ZeRO-2 style).

Each rank holds max_norm and its 1/W row shard of every gradient of a few transformer layers. The
global L2 norm over all gradients of all ranks is the square root of the all-reduced sum of local
squared sums (computed in float32). As torch.nn.utils.clip_grad_norm_, every shard is multiplied by
min(1, max_norm / (norm + 1e-6)). Output: (norm as a 0-d float32 tensor, *clipped shards in their dtype).

Gradients are N(0, 1) and max_norm is `clip_ratio` (1/2) of their expected global norm, so clipping halves
them and the clipped shards stay of order 1, where the dtype's absolute tolerance cannot hide a wrong answer
(with max_norm = 1 every clipped element would be ~1/sqrt(N), below it). clip_grad_norm_ is scale-equivariant:
this is max_norm = 1 on gradients scaled by 2/sqrt(N).
"""
import torch
import torch.distributed as dist

from pkit.problem_kit import cost as _cost, generator, parse_dtype, randn, transformer_param_shapes

META = {
    "name": "global_grad_norm_clip",
    "category": "data_parallel",
    "models": "FSDP clip_grad_norm_ / Megatron clip_grad_norm_fp32 over sharded gradients",
    "dtypes": ["float32", "bfloat16"],
    "dtype_reason": ("float32: a norm over the fp32 gradients the optimizer sees (Megatron's main_grad, FSDP's "
                     "fp32 sharded parameters), accumulated in fp32"),
    "world_sizes": [2, 4, 8],
    "traffic": "aggregated",
    "description": "Rank holds max_norm and row shards of a list of gradients; return (global L2 norm as a "
                   "0-d float32 tensor, shards scaled by min(1, max_norm / (norm + 1e-6))).",
}

SIZES = {
    "tiny": {"layers": 2, "hidden": 8, "ffn": 12, "clip_ratio": 0.5},
    "large": {"layers": 4, "hidden": 2048, "ffn": 5632, "clip_ratio": 0.5},
}


def _shard_shapes(s, world_size):
    return [(shape[0] // world_size, *shape[1:]) for shape in transformer_param_shapes(s)]


def make_inputs(rank, world_size, size, dtype, seed, device="cpu"):
    s = SIZES[size]
    g = generator(seed, rank)
    max_norm = s["clip_ratio"] * sum(torch.Size(shape).numel() for shape in transformer_param_shapes(s)) ** 0.5
    return (max_norm, *(randn(shape, dtype, g, device) for shape in _shard_shapes(s, world_size)))


def reference(max_norm, *grads):
    squares = torch.stack([g.float().square().sum() for g in grads]).sum()
    dist.all_reduce(squares)
    norm = squares.sqrt()
    scale = (max_norm / (norm + 1e-6)).clamp(max=1.0)
    return (norm, *((g.float() * scale).to(g.dtype) for g in grads))


def cost(world_size, size, dtype="float32"):
    # N local elements. FLOPs: square + add for the norm, one multiply for the clip (3N). HBM: the norm
    # must be known before scaling, so the shards are read twice and written once. Links: one float32
    # partial sum sent to each of the W-1 other ranks.
    # Sync steps: 1, each rank's partial sum goes to every other rank in one round.
    n = sum(torch.Size(shape).numel() for shape in _shard_shapes(SIZES[size], world_size))
    return _cost(flops=3 * n, hbm_bytes=3 * n * parse_dtype(dtype).itemsize, link_bytes=4 * (world_size - 1),
                 sync_steps=1)
