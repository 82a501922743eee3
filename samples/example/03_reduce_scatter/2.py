# Written by hand for pkit's test suite; NOT output of a language model.
"""Crashes (runtime error): passes a full-size output buffer where reduce_scatter_tensor expects one chunk."""
import torch
import torch.distributed as dist


def solution(grad):
    out = torch.empty_like(grad)
    dist.reduce_scatter_tensor(out, grad)
    return out[: grad.numel() // dist.get_world_size()]
