"""One all-gather of (local logsumexp, local target logit) per token, combined with a logsumexp over ranks."""
import torch
import torch.distributed as dist


def solution(logits, target):
    world_size, shard = dist.get_world_size(), logits.shape[-1]
    local_target = target - dist.get_rank() * shard
    in_shard = (local_target >= 0) & (local_target < shard)
    logits = logits.float()
    picked = logits.gather(1, local_target.clamp(0, shard - 1)[:, None]).squeeze(1)
    stats = torch.stack([torch.logsumexp(logits, -1), picked * in_shard])
    gathered = stats.new_empty((world_size * 2, stats.shape[1]))
    dist.all_gather_into_tensor(gathered, stats)
    gathered = gathered.view(world_size, *stats.shape)
    return torch.logsumexp(gathered[:, 0], 0) - gathered[:, 1].sum(0)
