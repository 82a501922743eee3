# Written by hand for pkit's test suite; NOT output of a language model.
"""Correct: gather every rank's bucket, then sum locally in fp32."""
import torch
import torch.distributed as dist


def solution(grad):
    buckets = [torch.empty_like(grad) for _ in range(dist.get_world_size())]
    dist.all_gather(buckets, grad)
    return torch.stack(buckets).sum(0, dtype=torch.float32).to(grad.dtype)
