"""Combine with point-to-point transfers: routing is all-gathered so every rank knows all split sizes,
rows go back per peer in (token, slot) order, land in a dense (tokens, top_k, hidden) buffer and are
reduced with the gate weights."""
import torch
import torch.distributed as dist


def solution(expert_out, topk_ids, topk_weights, num_experts):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    local_experts = num_experts // world_size
    all_ids = topk_ids.new_empty((world_size * topk_ids.shape[0], topk_ids.shape[1]))
    dist.all_gather_into_tensor(all_ids, topk_ids)

    # Rows held here, re-ordered from (local expert, src, token, slot) to (src, token, slot).
    local = all_ids.view(world_size, *topk_ids.shape) - rank * local_experts
    mine = (local >= 0) & (local < local_experts)
    src = mine.nonzero(as_tuple=True)[0]
    held = torch.empty_like(expert_out)
    held[local[mine].argsort(stable=True)] = expert_out
    to_src = held.split(torch.bincount(src, minlength=world_size).tolist())

    # Rows coming back, one block per owner rank, each in (token, slot) order.
    owner = topk_ids // local_experts
    from_owner = [expert_out.new_empty((int((owner == peer).sum()), expert_out.shape[1]))
                  for peer in range(world_size)]
    from_owner[rank].copy_(to_src[rank])
    ops = []
    for peer in range(world_size):
        if peer != rank:
            ops += [dist.P2POp(dist.isend, to_src[peer], peer), dist.P2POp(dist.irecv, from_owner[peer], peer)]
    for work in dist.batch_isend_irecv(ops):
        work.wait()

    dense = expert_out.new_empty((*topk_ids.shape, expert_out.shape[1]))
    for peer in range(world_size):
        dense[owner == peer] = from_owner[peer]
    return (dense.float() * topk_weights[..., None]).sum(1).to(expert_out.dtype)
