# Written by hand for pkit's test suite; NOT output of a language model.
"""Wrong (data partitioning): all-reduces, then returns chunk 0 on every rank instead of chunk `rank`."""
import torch.distributed as dist


def solution(grad):
    out = grad.clone()
    dist.all_reduce(out)
    chunk = grad.numel() // dist.get_world_size()
    return out[:chunk].clone()
