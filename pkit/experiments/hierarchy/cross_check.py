"""pkit's bandwidth matrix checked against a plain torch measurement of the same copies on the same GPU.

The copy engine's local copy (`device_local_copy`, read + write counted) and host → device copy
(`host_to_device_memcpy_ce`, pinned host memory) are the two paths every machine has; torch's `Tensor.copy_`
moves the same bytes with the same engines, timed independently with CUDA events. A ratio far from 1 would say
that pkit's timing, not the machine, set a number.

Example:
    >>> import pandas as pd
    >>> matrix = pd.DataFrame({"testcase": ["device_local_copy", "host_to_device_memcpy_ce"], "src": ["GPU0", "CPU"],
    ...                        "dst": ["GPU0", "GPU0"], "bytes": [1 << 29] * 2, "bandwidth_GBps": [4100.0, 55.0]})
    >>> table = compare(matrix, {"device_local_copy": 4000.0, "host_to_device_memcpy_ce": 55.0}, device=0)
    >>> table[["testcase", "pkit_GBps", "torch_GBps", "ratio"]].round(3).values.tolist()
    [['device_local_copy', 4100.0, 4000.0, 1.025], ['host_to_device_memcpy_ce', 55.0, 55.0, 1.0]]
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd

CHECKED_TESTCASES = ("device_local_copy", "host_to_device_memcpy_ce")
"""The matrix testcases the torch measurement repeats (GB/s of what each counts: read + write, one direction)."""


def _torch_GBps(torch, copy: Callable, counted_bytes: int, reps: int, warmup: int) -> float:
    """10⁹ `counted_bytes` per second of `copy()`, the median of `reps` CUDA-event-timed calls after `warmup`. Each
    call's events queue behind a short spin kernel (torch.cuda._sleep), so they bracket the copy, not the host's
    launch of it (as pkit.bench's hide_launch does)."""
    for _ in range(warmup):
        copy()
    torch.cuda.synchronize()
    times_ms = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(1_000_000)  # about half a millisecond of clock cycles
        start.record()
        copy()
        end.record()
        end.synchronize()
        times_ms.append(start.elapsed_time(end))
    return counted_bytes / (float(np.median(times_ms)) * 1e-3) / 1e9


def torch_rates(device: int = 0, nbytes: int = 512 << 20, reps: int = 20, warmup: int = 3) -> dict[str, float]:
    """GB/s of torch's `copy_` on GPU `device` for each of CHECKED_TESTCASES: a device-to-device copy of `nbytes`
    within the GPU (read + write counted) and a non-blocking copy from pinned host memory (one direction)."""
    import torch

    if not torch.cuda.is_available() or device >= torch.cuda.device_count():
        raise ValueError(f"device: expected a CUDA GPU torch can use, got {device}; torch sees "
                         f"{torch.cuda.device_count() if torch.cuda.is_available() else 0}")
    with torch.cuda.device(device):
        src, dst = (torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{device}") for _ in range(2))
        host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
        return {"device_local_copy": _torch_GBps(torch, lambda: dst.copy_(src), 2 * nbytes, reps, warmup),
                "host_to_device_memcpy_ce": _torch_GBps(torch, lambda: dst.copy_(host, non_blocking=True), nbytes,
                                                        reps, warmup)}


def compare(matrix: pd.DataFrame, torch_GBps: dict[str, float], device: int = 0) -> pd.DataFrame:
    """The matrix's CHECKED_TESTCASES rows on GPU `device` (largest size) beside `torch_GBps` (testcase → GB/s):
    columns testcase, src, dst, bytes, pkit_GBps, torch_GBps, ratio (pkit over torch)."""
    missing = {"testcase", "src", "dst", "bytes", "bandwidth_GBps"} - set(matrix.columns)
    if missing:
        raise ValueError(f"matrix: missing columns {sorted(missing)}")
    gpu = f"GPU{device}"
    rows = matrix[matrix["testcase"].isin(list(torch_GBps)) & (matrix["dst"] == gpu)]
    rows = rows[rows["bytes"] == rows.groupby("testcase")["bytes"].transform("max")]
    if set(rows["testcase"]) != set(torch_GBps):
        raise ValueError(f"matrix: expected rows of {sorted(torch_GBps)} into {gpu}, got {sorted(set(rows['testcase']))}")
    out = rows[["testcase", "src", "dst", "bytes"]].assign(pkit_GBps=rows["bandwidth_GBps"].to_numpy(),
                                                           torch_GBps=rows["testcase"].map(torch_GBps).to_numpy())
    return out.assign(ratio=out["pkit_GBps"] / out["torch_GBps"]).reset_index(drop=True)


def cross_check(matrix: pd.DataFrame, device: int = 0, reps: int = 20, warmup: int = 3) -> pd.DataFrame:
    """`compare` of a bandwidth matrix measured on this machine with `torch_rates` measured now, at the matrix's
    own copy size.

    Example:
        >>> cross_check(hierarchy.bandwidth_matrix([0]))                                   # doctest: +SKIP
    """
    sized = matrix[matrix["testcase"].isin(CHECKED_TESTCASES)]
    if sized.empty:
        raise ValueError(f"matrix: expected rows of {list(CHECKED_TESTCASES)}")
    return compare(matrix, torch_rates(device, int(sized["bytes"].max()), reps, warmup), device)
