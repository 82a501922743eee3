"""Time one callable on every rank of the process group, ParallelKernelBench style (runs inside a worker).

Warm-up calls, then measured calls. Before each measured call all ranks meet at a barrier and the device
is synchronised; a sample is the wall time from there to a device-wide `torch.cuda.synchronize()` after
the call, so work left on side streams counts. The reported sample is the slowest rank's (an all-reduce
MAX per iteration). When one call's inputs are smaller than 3× the GPU's L2, calls rotate over several
clones of the inputs (`pkit.timing.rotations_past_l2`) so repeats are not served from L2. On the CPU
(gloo) there is no L2 to defeat and one input set is used.

Times include the synchronisation latency (a few µs on a GPU), for reference and candidate alike.
"""
from __future__ import annotations

import time
from typing import Callable

import torch
import torch.distributed as dist

from .checks import clone_tree, leaves


def synchronize(device: torch.device) -> None:
    """Wait for all work on `device` (every stream); nothing to wait for on the CPU."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def input_bytes(inputs) -> int:
    """Bytes held by the tensors among `inputs`."""
    return sum(t.numel() * t.element_size() for _, t in leaves(inputs) if isinstance(t, torch.Tensor))


def rotations(inputs, device: torch.device) -> int:
    """How many input sets to cycle through: enough to pass 3× the L2 on a GPU, 1 on the CPU."""
    nbytes = input_bytes(inputs)
    if device.type != "cuda" or nbytes == 0:
        return 1
    from ..timing import rotations_past_l2

    return rotations_past_l2(nbytes, torch.cuda.get_device_properties(device).L2_cache_size)


def time_calls(fn: Callable, inputs: tuple, *, device: torch.device, warmup: int, iters: int) -> tuple[list, int]:
    """(per-iteration times of the slowest rank in ms, number of input sets rotated); collective call."""
    groups = rotations(inputs, device)
    sets = [inputs] + [clone_tree(inputs) for _ in range(groups - 1)]
    for i in range(warmup):
        fn(*sets[i % groups])
    synchronize(device)
    samples = []
    for i in range(iters):
        dist.barrier()
        synchronize(device)
        start = time.perf_counter()
        fn(*sets[i % groups])
        synchronize(device)
        samples.append((time.perf_counter() - start) * 1e3)
    slowest = torch.tensor(samples, dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return slowest.cpu().tolist(), groups
