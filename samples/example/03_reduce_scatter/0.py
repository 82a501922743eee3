# Written by hand for pkit's test suite; NOT output of a language model.
"""Correct: reduce-scatter straight into this rank's chunk."""
import torch.distributed as dist


def solution(grad):
    out = grad.new_empty(grad.numel() // dist.get_world_size())
    dist.reduce_scatter_tensor(out, grad)
    return out
