"""DeepSpeed-Ulysses sequence-to-head all-to-all.

Each rank holds q, k, v for a contiguous slice of the sequence and all heads, shape
(batch, seq / W, heads, head_dim). Before attention, Ulysses re-shards them on heads: rank r gets the
full sequence for heads [r * heads / W, (r + 1) * heads / W). Output: the tuple (q, k, v), each of shape
(batch, seq, heads / W, head_dim), sequence ordered by source rank.
"""
import torch
import torch.distributed as dist

from pkit.problem_kit import cost as _cost, generator, parse_dtype, randn

META = {
    "name": "ulysses_all_to_all",
    "category": "sequence",
    "models": "DeepSpeed-Ulysses DistributedAttention (_SeqAllToAll before the local attention)",
    "dtypes": ["bfloat16", "float32"],
    "dtype_reason": "bfloat16: q, k and v are bf16 activations in DeepSpeed-Ulysses training",
    "world_sizes": [2, 4, 8],
    "traffic": "uniform",
    "description": "Each rank holds q, k, v of shape (batch, seq/W, heads, head_dim); return them re-sharded "
                   "on heads: (batch, seq, heads/W, head_dim) for this rank's head group.",
}

SIZES = {
    "tiny": {"batch": 2, "seq": 16, "heads": 8, "head_dim": 4},
    "large": {"batch": 1, "seq": 32768, "heads": 32, "head_dim": 128},
}


def make_inputs(rank, world_size, size, dtype, seed, device="cpu"):
    s = SIZES[size]
    shape = (s["batch"], s["seq"] // world_size, s["heads"], s["head_dim"])
    g = generator(seed, rank)
    return tuple(randn(shape, dtype, g, device) for _ in range(3))


def _seq_to_heads(x):
    world_size = dist.get_world_size()
    send = [c.contiguous() for c in x.chunk(world_size, dim=2)]
    recv = [torch.empty_like(c) for c in send]
    dist.all_to_all(recv, send)
    return torch.cat(recv, dim=1)


def reference(q, k, v):
    return tuple(_seq_to_heads(x) for x in (q, k, v))


def cost(world_size, size, dtype="bfloat16"):
    # Pure data movement. Each rank reads its three local tensors and writes three outputs of the same
    # size; the best all-to-all sends the (W-1)/W of each tensor that belongs to other ranks' heads.
    # Sync steps: 1, the three all-to-alls are independent and go in one round.
    s = SIZES[size]
    local = 3 * s["batch"] * (s["seq"] // world_size) * s["heads"] * s["head_dim"] * parse_dtype(dtype).itemsize
    return _cost(flops=0, hbm_bytes=2 * local, link_bytes=local * (world_size - 1) // world_size, sync_steps=1)
