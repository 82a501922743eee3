# Written by hand for pkit's test suite; NOT output of a language model.
"""Correct: NCCL/gloo all-reduce of a copy of the bucket."""
import torch.distributed as dist


def solution(grad):
    out = grad.clone()
    dist.all_reduce(out)
    return out
