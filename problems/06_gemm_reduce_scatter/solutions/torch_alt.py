"""Partial GEMM, then an all-to-all of the token slices and a local fp32 sum of the W partials."""
import torch
import torch.distributed as dist


def solution(x, weight):
    world_size = dist.get_world_size()
    partial = x @ weight.t()
    received = torch.empty_like(partial)
    dist.all_to_all_single(received, partial)
    return received.view(world_size, -1, partial.shape[1]).sum(0, dtype=torch.float32).to(x.dtype)
