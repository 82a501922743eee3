"""All-reduce the whole gradient and slice the shard; AdamW written the way torch.optim.AdamW does it
(in-place moments, step size lr/bias_correction1, addcdiv); all-gather straight into the output."""
import math

import torch
import torch.distributed as dist


def solution(params, grads, exp_avg, exp_avg_sq, step, lr, beta1, beta2, eps, weight_decay):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    total = grads.clone()
    dist.all_reduce(total)
    grad = total.chunk(world_size)[rank].float().div_(world_size)
    m = exp_avg.clone().lerp_(grad, 1 - beta1)
    v = exp_avg_sq.clone().mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    denom = (v.sqrt() / math.sqrt(1 - beta2 ** step)).add_(eps)
    shard = params.chunk(world_size)[rank].to(torch.float32, copy=True).mul_(1 - lr * weight_decay)
    shard.addcdiv_(m, denom, value=-lr / (1 - beta1 ** step))
    out = torch.empty_like(params)
    dist.all_gather(list(out.chunk(world_size)), shard.to(params.dtype))
    return out
