# Written by hand for pkit's test suite; NOT output of a language model.
"""Wrong (data partitioning): reduces only the first half of the bucket; the second half keeps local values."""
import torch.distributed as dist


def solution(grad):
    out = grad.clone()
    half = grad.numel() // 2
    head = out[:half].contiguous()
    dist.all_reduce(head)
    out[:half] = head
    return out
