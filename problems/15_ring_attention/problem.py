"""Ring attention forward (causal), sequence sharded in contiguous blocks.

Rank r holds q, k, v for sequence block r, each of shape (batch, heads, seq / W, head_dim). K/V blocks
travel around the ring with point-to-point send/recv; each rank folds every block that precedes it into
an online softmax (block r itself with the causal mask, later blocks are fully masked and skipped).
Softmax scale 1/sqrt(head_dim), accumulation in float32. Output: this rank's attention output block,
shape (batch, heads, seq / W, head_dim), in the input dtype.
"""
import torch
import torch.distributed as dist

from pkit.problem_kit import cost as _cost, generator, parse_dtype, randn

META = {
    "name": "ring_attention",
    "category": "sequence",
    "models": "Ring Attention (Liu et al. 2023) / ring-flash-attention forward, causal, contiguous blocks",
    "dtypes": ["bfloat16", "float32"],
    "dtype_reason": ("bfloat16: q, k and v are bf16 as flash-attention kernels take them; scores, softmax and "
                     "accumulation run in fp32"),
    "world_sizes": [2, 4, 8],
    "traffic": "aggregated",  # K/V blocks reach every later rank: an all-gather, run hierarchically (not a flat ring)
    "description": "Rank r holds q, k, v (batch, heads, seq/W, head_dim) for sequence block r; return the "
                   "causal attention output of its queries over the whole sequence, same shape and dtype.",
}

SIZES = {
    "tiny": {"batch": 1, "heads": 2, "seq": 16, "head_dim": 8},
    "large": {"batch": 1, "heads": 16, "seq": 16384, "head_dim": 128},
}


def make_inputs(rank, world_size, size, dtype, seed, device="cpu"):
    s = SIZES[size]
    shape = (s["batch"], s["heads"], s["seq"] // world_size, s["head_dim"])
    g = generator(seed, rank)
    return tuple(randn(shape, dtype, g, device) for _ in range(3))


def reference(q, k, v):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    qs = q.float() * q.shape[-1] ** -0.5
    n = q.shape[-2]
    row_max = torch.full(q.shape[:-1] + (1,), float("-inf"), device=q.device)
    row_sum = torch.zeros_like(row_max)
    acc = torch.zeros(q.shape, device=q.device)
    kv = torch.stack((k, v))
    for step in range(world_size):
        if step < world_size - 1:  # pass the block we hold on to rank + 1, receive from rank - 1
            incoming = torch.empty_like(kv)
            reqs = dist.batch_isend_irecv([
                dist.P2POp(dist.isend, kv, (rank + 1) % world_size),
                dist.P2POp(dist.irecv, incoming, (rank - 1) % world_size),
            ])
        src = (rank - step) % world_size
        if src <= rank:
            scores = qs @ kv[0].float().transpose(-1, -2)
            if src == rank:
                causal = torch.ones(n, n, dtype=torch.bool, device=q.device).triu(1)
                scores = scores.masked_fill(causal, float("-inf"))
            new_max = torch.maximum(row_max, scores.amax(-1, keepdim=True))
            p = torch.exp(scores - new_max)
            rescale = torch.exp(row_max - new_max)
            row_sum = row_sum * rescale + p.sum(-1, keepdim=True)
            acc = acc * rescale + p @ kv[1].float()
            row_max = new_max
        if step < world_size - 1:
            for req in reqs:
                req.wait()
            kv = incoming
    return (acc / row_sum).to(q.dtype)


def cost(world_size, size, dtype="bfloat16"):
    # block = one (batch, heads, seq/W, head_dim) tensor. FLOPs: QK^T and PV cost 4*seq*block per rank
    # without a mask; causality halves it (the lower bound assumes the work is spread evenly).
    # Links: the last rank needs the K and V blocks of all W-1 ranks before it, so some link carries
    # 2*(W-1) blocks; a ring sends that much per GPU. HBM: read q, k, v, write out, and write + read each
    # of the (up to) 2*(W-1) received blocks once.
    # Sync steps: 1, every rank can push its K/V block to all later ranks in one round (the same 2(W-1) blocks
    # on the busiest GPU; the ring's W-1 dependent hops are the reference's choice).
    s = SIZES[size]
    block = s["batch"] * s["heads"] * (s["seq"] // world_size) * s["head_dim"]
    e = parse_dtype(dtype).itemsize
    return _cost(flops=2 * block * s["seq"],
                 hbm_bytes=e * block * (4 + 4 * (world_size - 1)),
                 link_bytes=e * block * 2 * (world_size - 1), sync_steps=1)
