"""Llama-3-style context parallelism: all-gather K/V, then causal attention for the local queries.

The sequence is cut into 2W equal chunks; rank r holds chunks r and 2W-1-r (the load-balanced "zigzag"
layout of the Llama 3 paper, so every rank does the same causal work). Each rank holds q of shape
(batch, q_heads, seq / W, head_dim) and k, v of shape (batch, kv_heads, seq / W, head_dim) (grouped-query
attention, q head i uses kv head i // (q_heads / kv_heads)), its two chunks concatenated on the sequence
dimension. K/V are all-gathered, then each local query attends causally (by global position) to the whole
sequence, softmax scale 1/sqrt(head_dim). Output: (batch, q_heads, seq / W, head_dim), in the input dtype.
"""
import torch
import torch.distributed as dist
import torch.nn.functional as F

from pkit.problem_kit import cost as _cost, generator, parse_dtype, randn

META = {
    "name": "context_parallel_allgather_kv",
    "category": "sequence",
    "models": "Llama 3 context parallelism (all-gather K/V, zigzag chunks); torchtitan / Megatron CP with GQA",
    "dtypes": ["bfloat16", "float32"],
    "dtype_reason": ("bfloat16: q, k and v are bf16 as in Llama 3 training; attention accumulates in fp32 inside "
                     "its kernel"),
    "world_sizes": [2, 4, 8],
    "traffic": "aggregated",
    "description": "Rank r holds q (batch, q_heads, seq/W, head_dim), k, v (batch, kv_heads, seq/W, head_dim) "
                   "for sequence chunks r and 2W-1-r; return causal GQA attention of its queries over the "
                   "full sequence, shaped like q.",
}

SIZES = {
    "tiny": {"batch": 1, "q_heads": 4, "kv_heads": 2, "seq": 32, "head_dim": 8},
    "large": {"batch": 1, "q_heads": 32, "kv_heads": 8, "seq": 32768, "head_dim": 128},
}


def make_inputs(rank, world_size, size, dtype, seed, device="cpu"):
    s = SIZES[size]
    local = s["seq"] // world_size
    g = generator(seed, rank)
    q = randn((s["batch"], s["q_heads"], local, s["head_dim"]), dtype, g, device)
    k = randn((s["batch"], s["kv_heads"], local, s["head_dim"]), dtype, g, device)
    v = randn((s["batch"], s["kv_heads"], local, s["head_dim"]), dtype, g, device)
    return q, k, v


def reference(q, k, v):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    chunk = q.shape[-2] // 2
    ks = [torch.empty_like(k) for _ in range(world_size)]
    vs = [torch.empty_like(v) for _ in range(world_size)]
    dist.all_gather(ks, k)
    dist.all_gather(vs, v)

    def in_sequence_order(parts):  # first halves of ranks 0..W-1, then second halves of ranks W-1..0
        halves = [p[..., :chunk, :] for p in parts] + [p[..., chunk:, :] for p in reversed(parts)]
        return torch.cat(halves, dim=-2).repeat_interleave(q.shape[1] // k.shape[1], dim=1)

    keys, values = in_sequence_order(ks), in_sequence_order(vs)
    positions = torch.arange(keys.shape[-2], device=q.device)
    q_pos = torch.cat((positions[rank * chunk:(rank + 1) * chunk],
                       positions[(2 * world_size - 1 - rank) * chunk:(2 * world_size - rank) * chunk]))
    mask = q_pos[:, None] >= positions[None, :]
    return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)


def cost(world_size, size, dtype="bfloat16"):
    # FLOPs: QK^T and PV over the causal half of the (seq/W) x seq score block, 2*2*head_dim per pair;
    # the zigzag layout gives every rank exactly seq*seq/(2W) pairs per head. Links: ring all-gather of
    # the local K and V (each GPU forwards W-1 blocks). HBM: read q, write out, read local k, v, write the
    # W-1 received K/V blocks and read them back.
    # Sync steps: 1, one all-gather round for K and V together.
    s = SIZES[size]
    e = parse_dtype(dtype).itemsize
    local = s["seq"] // world_size
    q_bytes = s["batch"] * s["q_heads"] * local * s["head_dim"] * e
    kv_bytes = 2 * s["batch"] * s["kv_heads"] * local * s["head_dim"] * e
    flops = 2 * s["batch"] * s["q_heads"] * s["head_dim"] * s["seq"] * local
    return _cost(flops=flops, hbm_bytes=2 * q_bytes + kv_bytes * (2 * world_size - 1),
                 link_bytes=kv_bytes * (world_size - 1), sync_steps=1)
