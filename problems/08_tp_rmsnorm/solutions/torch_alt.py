"""All-gather every rank's per-token partial mean square, sum them, then normalise the local columns."""
import torch.distributed as dist

EPS = 1e-6  # the problem's epsilon


def solution(x, weight):
    world_size = dist.get_world_size()
    partial = x.float().square().mean(-1) / world_size
    partials = partial.new_empty(world_size * partial.numel())
    dist.all_gather_into_tensor(partials, partial)
    inv_rms = (partials.view(world_size, -1).sum(0) + EPS).rsqrt()
    return weight * (x.float() * inv_rms[:, None]).to(x.dtype)
