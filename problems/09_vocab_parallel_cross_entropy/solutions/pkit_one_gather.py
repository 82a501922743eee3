"""Vocab-parallel cross-entropy in one round: every rank's per-token (logsumexp, target logit) all-gathered.

The reference makes three all-reduces (the max, then the target logit and the sum of exponentials): two
dependent rounds and three NCCL calls. A shard's logsumexp and its (masked) target logit are enough: the full
logsumexp is the logsumexp over ranks of the shards' ones, the target logit their sum. So one
pkit.dist.all_gather of 2·tokens fp32 per rank (32 KiB at the large size: LL packets, no barrier) replaces
the three calls, W·2·tokens floats of local arithmetic finish it, and the fp32 math is the reference's.
"""
import torch
import torch.distributed as dist

from pkit import dist as pdist


def solution(logits, target):
    world_size, shard = dist.get_world_size(), logits.shape[-1]
    local = target - dist.get_rank() * shard
    owned = (local >= 0) & (local < shard)
    picked = logits.gather(1, local.clamp(0, shard - 1).unsqueeze(1)).squeeze(1).float()
    stats = torch.stack((torch.logsumexp(logits.float(), -1), picked.masked_fill_(~owned, 0.0)))
    lse, target_logit = pdist.all_gather(stats).view(world_size, 2, -1).unbind(1)
    return torch.logsumexp(lse, 0) - target_logit.sum(0)
