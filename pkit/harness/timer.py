"""Time one callable on every rank, ParallelKernelBench style (runs inside a worker, before the candidate loads).

The clocks and synchronisation functions are bound when this module is imported, which the worker does
before it imports a candidate, so a candidate that later replaces `time.perf_counter` or
`torch.cuda.synchronize` does not change what this timer reads. (A candidate in the same process can still
reach this module, or the torch internals that `torch.cuda.synchronize` calls, such as `torch._C._cuda_synchronize`;
the evaluating process therefore checks the reported times against the wall time it saw from outside, see
`pkit.harness.integrity.timing_mismatch`.)

Before each measured call the ranks meet at a barrier (a lone rank has none to meet: no collective is run for it)
and the device is synchronised; a sample is the wall time from there to a device-wide synchronisation after the
call, so work left on side streams counts.
Times include the synchronisation latency (a few µs on a GPU), for reference and candidate alike.
"""
from __future__ import annotations

import time

import torch
import torch.distributed as dist

from .checks import leaves

_clock = time.perf_counter
_cuda_synchronize = torch.cuda.synchronize
_barrier = dist.barrier


def synchronize(device: torch.device) -> None:
    """Wait for all work on `device` (every stream); nothing to wait for on the CPU."""
    if device.type == "cuda":
        _cuda_synchronize(device)


def input_bytes(inputs) -> int:
    """Bytes held by the tensors among `inputs`."""
    return sum(t.numel() * t.element_size() for _, t in leaves(inputs) if isinstance(t, torch.Tensor)
               and t.layout == torch.strided)


def l2_rotations(nbytes: int, device: torch.device) -> int:
    """Input sets needed so repeats are not served from L2 (at least 3x the GPU's L2); 1 on the CPU."""
    if device.type != "cuda" or nbytes == 0:
        return 1
    from ..timing import rotations_past_l2

    return rotations_past_l2(nbytes, torch.cuda.get_device_properties(device).L2_cache_size)


def timed_call(fn, inputs: tuple, device: torch.device, ranks: int) -> tuple[object, float]:
    """(output, milliseconds) of one call after the `ranks` ranks' barrier and a device sync; a collective call."""
    if ranks > 1:
        _barrier()
    synchronize(device)
    start = _clock()
    out = fn(*inputs)
    synchronize(device)
    return out, (_clock() - start) * 1e3


def clock() -> float:
    """Seconds on the clock bound before any candidate was imported."""
    return _clock()
