# Written by hand for pkit's test suite; NOT output of a language model.
"""Correct: one all_to_all_single with equal splits."""
import torch
import torch.distributed as dist


def solution(x):
    out = torch.empty_like(x)
    dist.all_to_all_single(out, x)
    return out
