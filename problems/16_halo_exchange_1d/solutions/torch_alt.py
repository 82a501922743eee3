"""Every rank all-gathers every rank's two edge strips and picks its neighbours' strips from them."""
import torch
import torch.distributed as dist


def solution(x, halo):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    b, n, c = x.shape
    edges = torch.stack((x[:, :halo], x[:, n - halo:]))  # (2, b, halo, c): first rows, last rows
    gathered = [torch.empty_like(edges) for _ in range(world_size)]
    dist.all_gather(gathered, edges)
    out = x.new_zeros(b, n + 2 * halo, c)
    out[:, halo:halo + n] = x
    if rank > 0:
        out[:, :halo] = gathered[rank - 1][1]
    if rank < world_size - 1:
        out[:, halo + n:] = gathered[rank + 1][0]
    return out
