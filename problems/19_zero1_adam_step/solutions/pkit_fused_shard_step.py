"""ZeRO-1 AdamW: pkit reduce-scatter of the gradients, the update in place on fresh fp32 tensors, pkit all-gather
of the new shard straight into the output.

Two rounds and the optimum bytes, (W-1)/W·N each way per GPU, as the reference, but on pkit's kernels (staged:
one barrier each; LL packets up to 512 KiB per peer) and with less memory traffic around them: the reference's
list reduce_scatter and list all_gather + torch.cat (one more N-element copy) become tensor calls whose outputs
are the gradient shard and the final parameters. The update is fp32 in the reference's order (m, v, then the
bias corrections folded into one step size lr/(1-β1^t) and one denominator √v/√(1-β2^t) + eps), in place on
tensors the call owns: no temporaries beyond the fp32 gradient shard, m, v and the new shard.
"""
import math

import torch
import torch.distributed as dist

from pkit import dist as pdist


def solution(params, grads, exp_avg, exp_avg_sq, step, lr, beta1, beta2, eps, weight_decay):
    rank, world_size = dist.get_rank(), dist.get_world_size()
    grad = pdist.reduce_scatter(grads).to(torch.float32).div_(world_size)
    m = exp_avg.mul(beta1).add_(grad, alpha=1 - beta1)
    v = exp_avg_sq.mul(beta2).addcmul_(grad, grad, value=1 - beta2)
    denom = v.sqrt_().div_(math.sqrt(1 - beta2 ** step)).add_(eps)
    shard = params.chunk(world_size)[rank].to(torch.float32, copy=True).mul_(1 - lr * weight_decay)
    shard.addcdiv_(m, denom, value=-lr / (1 - beta1 ** step))
    return pdist.all_gather(shard.to(params.dtype))
