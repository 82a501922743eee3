"""1-D halo exchange for a sequence-sharded activation (non-periodic domain decomposition).

Rank r holds x of shape (batch, seq / W, channels), the r-th contiguous slice of the sequence, and the
halo width h (e.g. kernel_size - 1 of a short convolution over the sequence, as in Mamba's conv1d;
a causal conv uses only the left halo). It receives the last h rows of rank r - 1 and the first h rows
of rank r + 1; outside the global sequence the halo is zero. Output: the padded block
(batch, seq / W + 2h, channels) = [left halo | x | right halo] along the sequence dimension.
"""
import torch
import torch.distributed as dist

from pkit.problem_kit import cost as _cost, generator, parse_dtype, randn

META = {
    "name": "halo_exchange_1d",
    "category": "sequence",
    "models": "sequence-parallel short convolutions (Mamba conv1d, Hyena) on a sequence-sharded activation",
    "dtypes": ["bfloat16", "float32"],
    "dtype_reason": "bfloat16: the sequence-sharded activations (Mamba's conv1d input) are bf16 in training",
    "world_sizes": [2, 4, 8],
    "traffic": "neighbour",
    "description": "Rank r holds x (batch, seq/W, channels) and halo width h; return (batch, seq/W + 2h, "
                   "channels): h rows from rank r-1, x, h rows from rank r+1, zeros beyond the sequence ends.",
}

SIZES = {
    "tiny": {"batch": 2, "seq": 16, "channels": 3, "halo": 2},
    "large": {"batch": 4, "seq": 65536, "channels": 1024, "halo": 3},
}


def make_inputs(rank, world_size, size, dtype, seed, device="cpu"):
    s = SIZES[size]
    x = randn((s["batch"], s["seq"] // world_size, s["channels"]), dtype, generator(seed, rank), device)
    return x, s["halo"]


def reference(x, halo):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    left = x.new_zeros(x.shape[0], halo, x.shape[2])
    right = x.new_zeros(x.shape[0], halo, x.shape[2])
    ops = []
    if rank > 0:
        ops += [dist.P2POp(dist.isend, x[:, :halo].contiguous(), rank - 1), dist.P2POp(dist.irecv, left, rank - 1)]
    if rank < world_size - 1:
        ops += [dist.P2POp(dist.isend, x[:, -halo:].contiguous(), rank + 1), dist.P2POp(dist.irecv, right, rank + 1)]
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    return torch.cat((left, x, right), dim=1)


def cost(world_size, size, dtype="bfloat16"):
    # No arithmetic. HBM: read the local block and write the padded block. Links: an interior rank sends
    # h rows to each of its two neighbours (an end rank to one), each row batch*channels elements.
    # Sync steps: 1, both neighbours' halos arrive in one round.
    s = SIZES[size]
    row = s["batch"] * s["channels"] * parse_dtype(dtype).itemsize
    local = s["seq"] // world_size
    return _cost(flops=0, hbm_bytes=row * (2 * local + 2 * s["halo"]),
                 link_bytes=row * s["halo"] * min(2, world_size - 1), sync_steps=1)
