"""Causal sequence-parallel attention: K/V blocks in one pkit all-gather instead of W-1 ring hops, then one
fused attention over this rank's causal key prefix.

Communication: the ring makes W-1 dependent send/recv steps; rank r needs only blocks 0..r, and one all-gather
of the stacked (k, v) block delivers them in one round with the ring's bytes on the busiest GPU ((W-1) blocks
in and out; a block is 64 MiB at the large size, W = 2: pkit's staged kernel, one barrier). Compute: the
reference folds block after block in eager fp32, materialising seq/W × seq/W fp32 scores and exponentials per
step; here one scaled_dot_product_attention over the (r+1)·seq/W key prefix with a bottom-right causal mask
runs a fused kernel accumulating in fp32 (flash in bf16, memory-efficient in fp32).
"""
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

from pkit import dist as pdist


def solution(q, k, v):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    b, heads, n, d = k.shape
    blocks = pdist.all_gather(torch.stack((k, v))).view(world_size, 2, b, heads, n, d)[: rank + 1]
    keys, values = blocks.permute(1, 2, 3, 0, 4, 5).reshape(2, b, heads, (rank + 1) * n, d)
    return F.scaled_dot_product_attention(q, keys, values, attn_mask=causal_lower_right(q.shape[-2], (rank + 1) * n))
