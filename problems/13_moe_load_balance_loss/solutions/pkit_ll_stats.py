"""Switch load-balancing loss: the 2E+1 global statistics in one packed pkit LL all-reduce.

The reference already packs the expert counts, probability sums and token count into one NCCL all-reduce;
the tensor is tiny ((2E+1)·4 bytes, 2 KiB at E = 256), so its cost is the call's latency: pkit.dist sends it
as LL packets (no barrier, a few µs against ~10 µs for NCCL), summed in fp32 in rank order. The packed
buffer is filled in place (no torch.cat): counts by scatter_add (no bincount, which syncs the host on
the GPU), probability sums from a softmax taken in fp32 and reduced over tokens; the loss is then one dot
product, E·(counts·P)/(T²·top_k).
"""
import torch

from pkit import dist as pdist


def solution(router_logits, topk_ids):
    tokens, num_experts = router_logits.shape
    stats = torch.empty(2 * num_experts + 1, dtype=torch.float32, device=router_logits.device)
    counts, prob_sums, token_count = stats.split([num_experts, num_experts, 1])
    ids = topk_ids.flatten()
    counts.zero_().scatter_add_(0, ids, torch.ones_like(ids, dtype=torch.float32))
    torch.sum(router_logits.softmax(-1, dtype=torch.float32), 0, out=prob_sums)
    token_count.fill_(tokens)
    counts, prob_sums, token_count = pdist.all_reduce(stats).split([num_experts, num_experts, 1])
    return num_experts * torch.dot(counts, prob_sums) / (token_count.square().squeeze() * topk_ids.shape[1])
