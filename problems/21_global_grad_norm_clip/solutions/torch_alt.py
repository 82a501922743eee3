"""Per-tensor norms with torch.linalg.vector_norm, all-gather of the local norms, norm of norms;
scaling in the gradient dtype, as torch.nn.utils.clip_grad_norm_ does."""
import torch
import torch.distributed as dist


def solution(max_norm, *grads):
    per_tensor = torch.stack([torch.linalg.vector_norm(g, dtype=torch.float32) for g in grads])
    local = torch.linalg.vector_norm(per_tensor).reshape(1)
    norms = [torch.empty_like(local) for _ in range(dist.get_world_size())]
    dist.all_gather(norms, local)
    norm = torch.linalg.vector_norm(torch.cat(norms))
    scale = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    return (norm, *(g * scale.to(g.dtype) for g in grads))
