"""Ring: pass weight shards to the next rank while multiplying by the shard in hand, filling y one
column block at a time (communication overlapped with the GEMMs)."""
import torch
import torch.distributed as dist


def solution(x, w_shard):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    rows = w_shard.shape[0]
    y = x.new_empty(x.shape[0], rows * world_size)
    shard = w_shard
    for step in range(world_size):
        if step < world_size - 1:
            incoming = torch.empty_like(shard)
            reqs = dist.batch_isend_irecv([
                dist.P2POp(dist.isend, shard, (rank + 1) % world_size),
                dist.P2POp(dist.irecv, incoming, (rank - 1) % world_size),
            ])
        src = (rank - step) % world_size
        y[:, src * rows:(src + 1) * rows] = x @ shard.T
        if step < world_size - 1:
            for req in reqs:
                req.wait()
            shard = incoming
    return y
