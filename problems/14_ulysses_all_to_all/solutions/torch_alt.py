"""One all_to_all_single for q, k and v together: pack by destination rank, exchange, unpack."""
import torch
import torch.distributed as dist


def solution(q, k, v):
    world_size = dist.get_world_size()
    b, s_local, h, d = q.shape
    # (3, b, s_local, W, h/W, d) -> (W, 3, b, s_local, h/W, d): one contiguous block per destination.
    send = torch.stack((q, k, v)).view(3, b, s_local, world_size, h // world_size, d)
    send = send.permute(3, 0, 1, 2, 4, 5).contiguous()
    recv = torch.empty_like(send)
    dist.all_to_all_single(recv, send)
    # recv[src] holds source rank src's sequence slice for our heads.
    out = recv.permute(1, 2, 0, 3, 4, 5).reshape(3, b, world_size * s_local, h // world_size, d)
    return out[0], out[1], out[2]
