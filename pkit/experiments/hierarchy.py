"""The memory and interconnect hierarchy seen from one GPU: latency and bandwidth from shared memory to
the peer GPU over NVLink and the host over PCIe, an nvbandwidth-style matrix, and a message-size sweep.

The pieces live beside this module: pointer-chase latency in `hierarchy_chase`, the bandwidth matrix in
`hierarchy_matrix`, buffers and level names in `hierarchy_memory`. Here: read bandwidth per level, the
ladder that joins it with latency, and the peer-copy size sweep with its half-bandwidth points.

Example:
    >>> from pkit.experiments import hierarchy
    >>> hierarchy.ladder(device=0, peer=1)[["level", "latency_ns", "bandwidth_GBps"]]   # doctest: +SKIP
    >>> hierarchy.matrix_table(hierarchy.bandwidth_matrix((0, 1)))                       # doctest: +SKIP
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from ..launch import THREADS
from .hierarchy_chase import LADDER, latency_ladder, working_set_sweep  # noqa: F401 - the study's interface
from .hierarchy_matrix import (TESTCASES, bandwidth_matrix, format_matrix, key_paths, matrix_table,  # noqa: F401
                               print_matrix)
from .hierarchy_memory import HBM, HOST, L1, L2, LEVELS, PEER, SHARED, pinned  # noqa: F401

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
BLOCKS_PER_SM = 4


@dataclass(frozen=True)
class ReadPlan:
    """How to read one level at full speed: kernel (pkit/kernels/read_bandwidth.cu), where, how much."""

    level: str
    kernel: str  # read_block_shared / read_block_l1 (every block reads the set) or read_grid_l2 (grid splits it)
    memory: str  # device, peer or host
    working_set_bytes: int
    passes: int


READS = (
    ReadPlan(SHARED, "read_block_shared", "device", 16 * KiB, 2000),
    ReadPlan(L1, "read_block_l1", "device", 16 * KiB, 2000),
    ReadPlan(L2, "read_grid_l2", "device", 16 * MiB, 200),
    ReadPlan(HBM, "read_grid_l2", "device", 2 * GiB, 1),
    ReadPlan(PEER, "read_grid_l2", "peer", 1 * GiB, 1),
    ReadPlan(HOST, "read_grid_l2", "host", 256 * MiB, 1),
)
_READ_LOADS = {"read_block_shared": "ld.shared.v4", "read_block_l1": "ld.global.ca.v4",
               "read_grid_l2": "ld.global.cg.v4"}


def _check_pair(device, peer) -> None:
    for name, value in (("device", device), ("peer", peer)):
        if not isinstance(value, (int, np.integer)) or value < 0:
            raise ValueError(f"{name}: expected a GPU id >= 0, got {value!r}")
    if device == peer:
        raise ValueError(f"peer: expected a GPU other than device={device}, got {peer}")


def _read_source(plan: ReadPlan, device: int, peer: int, stack) -> int:
    """Address of the plan's working set (allocated on the device, the peer or pinned host memory)."""
    import cupy as cp

    if plan.memory == "host":
        return stack.enter_context(pinned(plan.working_set_bytes))[0]
    with cp.cuda.Device(peer if plan.memory == "peer" else device):
        buffer = cp.zeros(plan.working_set_bytes, dtype=cp.uint8)
    stack.callback(lambda: buffer)  # keep the buffer alive until the plan is measured
    return buffer.data.ptr


def level_bandwidth(device: int = 0, peer: int = 1, reps: int = 10, warmup: int = 3,
                    plans: Sequence[ReadPlan] = READS) -> pd.DataFrame:
    """Read bandwidth of each level from GPU `device`'s SMs, all of them reading at once (16-byte loads).

    Shared memory and L1: every block rereads its own 16 KiB `passes` times; L2: the grid rereads 16 MiB;
    HBM (2 GiB), `peer`'s HBM over NVLink (1 GiB) and pinned host memory over PCIe (256 MiB): one pass,
    each larger than 3× the L2 or uncacheable. Grid: 4 blocks of 512 threads per SM. Timing: `pkit.bench`,
    `warmup` + `reps` launches, medians. Columns: level, memory, load, working_set_bytes, read_bytes (per
    launch), bandwidth_GBps (10⁹ B/s read), time_median_us, cv.

    Example:
        >>> level_bandwidth(0, 1)[["level", "bandwidth_GBps"]]                          # doctest: +SKIP
    """
    _check_pair(device, peer)
    if not isinstance(reps, (int, np.integer)) or reps < 1 or not isinstance(warmup, (int, np.integer)) or warmup < 0:
        raise ValueError(f"reps, warmup: expected reps >= 1 and warmup >= 0, got {reps!r}, {warmup!r}")
    if not plans or not all(isinstance(p, ReadPlan) and p.working_set_bytes % 16 == 0 for p in plans):
        raise ValueError(f"plans: expected ReadPlans with working sets in multiples of 16 bytes, got {plans!r}")
    from contextlib import ExitStack

    import cupy as cp

    import pkit

    if any(p.memory == "peer" for p in plans):
        pkit.Team([device, peer])
    blocks = BLOCKS_PER_SM * pkit.devices()[device].sms
    with cp.cuda.Device(device):
        sink = cp.zeros(1, dtype=cp.uint32)
    rows = []
    for plan in plans:
        kernel = pkit.compile("read_bandwidth.cu", plan.kernel)
        per_block = plan.kernel != "read_grid_l2"
        read_bytes = plan.passes * plan.working_set_bytes * (blocks if per_block else 1)
        shared_mem = plan.working_set_bytes if plan.kernel == "read_block_shared" else 0
        with ExitStack() as stack:
            args = (np.uint64(_read_source(plan, device, peer, stack)), np.uint64(plan.working_set_bytes // 16),
                    np.uint32(plan.passes), sink)
            r = pkit.bench(lambda: kernel((blocks,), (THREADS,), args, shared_mem=shared_mem, device=device),
                           devices=[device], warmup=warmup, reps=reps, hide_launch=True)
        rows.append({"level": plan.level, "memory": plan.memory, "load": _READ_LOADS[plan.kernel],
                     "working_set_bytes": plan.working_set_bytes, "read_bytes": read_bytes,
                     "bandwidth_GBps": r.gbps(read_bytes), "time_median_us": r.median_us, "cv": r.cv})
    return pd.DataFrame(rows)


def ladder(device: int = 0, peer: int = 1, latency_reps: int = 5, bandwidth_reps: int = 10) -> pd.DataFrame:
    """Latency (`latency_ladder`) and read bandwidth (`level_bandwidth`) of every level, one row per level.

    Latency columns keep their names (latency_ns, latency_cycles, latency_cv, working_set_bytes ...);
    bandwidth columns: bandwidth_GBps, bandwidth_cv, read_working_set_bytes, read_bytes. Partition rows
    (L2 near/far) carry no bandwidth.

    Example:
        >>> ladder(0, 1)[["level", "latency_ns", "bandwidth_GBps"]]                     # doctest: +SKIP
    """
    _check_pair(device, peer)
    latency = latency_ladder(device, peer, reps=latency_reps).rename(columns={"cv": "latency_cv"})
    bandwidth = level_bandwidth(device, peer, reps=bandwidth_reps).rename(
        columns={"cv": "bandwidth_cv", "working_set_bytes": "read_working_set_bytes", "time_median_us": "read_time_us",
                 "load": "read_load"}).drop(columns=["memory"])
    return latency.merge(bandwidth, on="level", how="left")


def ladder_summary(frame: pd.DataFrame) -> pd.DataFrame:
    """The ladder as a reader compares it: per level (and L2 partition, when the frame has them) the latency
    in ns and SM cycles, its CV, the read bandwidth in GB/s and its CV, and `latency_vs_hbm`: the latency as
    a multiple of local HBM's (×). Columns of `ladder` that are absent are left out; level and latency_ns
    are required, and an HBM row for the ratio.

    Example:
        >>> df = pd.DataFrame({"level": [HBM, PEER, HOST], "latency_ns": [320.0, 960.0, 1280.0],
        ...                    "bandwidth_GBps": [4476.0, 374.0, 51.0]})
        >>> ladder_summary(df).to_dict("list")["latency_vs_hbm"]
        [1.0, 3.0, 4.0]
    """
    missing = {"level", "latency_ns"} - set(frame.columns)
    if missing or not (frame["level"] == HBM).any():
        raise ValueError(f"frame: expected a ladder with level and latency_ns columns and an {HBM!r} row, "
                         f"missing {sorted(missing) or [HBM]}")
    hbm = float(frame.loc[frame["level"] == HBM, "latency_ns"].iloc[0])
    keep = [c for c in ("level", "kind", "load", "working_set_bytes", "latency_ns", "latency_cycles", "latency_cv",
                        "bandwidth_GBps", "bandwidth_cv") if c in frame.columns]
    return frame[keep].assign(latency_vs_hbm=frame["latency_ns"] / hbm).reset_index(drop=True)


def peer_size_sweep(sizes_bytes: Sequence[int] | None = None, src: int = 0, dst: int = 1, reps: int = 20,
                    warmup: int = 5) -> pd.DataFrame:
    """One-way GPU `src` → GPU `dst` copies by size: copy engine, SM push and SM pull (pkit's copy16).

    Default sizes: 4 KiB to 1 GiB in powers of two. The measurement is the quickstart's
    (`quickstart.peer_copy_sweep`: verified copies, buffers rotated past L2, launches queued); this adds
    latency_us, the median time of one copy, which small messages are made of.

    Example:
        >>> peer_size_sweep([1 << 20, 1 << 30])                                         # doctest: +SKIP
    """
    import pkit

    from .peer_copies import check_sizes_and_pair
    from .quickstart import peer_copy_sweep

    sizes = [4 * KiB << k for k in range(19)] if sizes_bytes is None else list(sizes_bytes)
    _check_pair(src, dst)
    check_sizes_and_pair(sizes, src, dst, "sizes_bytes")
    frame = peer_copy_sweep(pkit.compile("copy.cu", "copy16"), sizes, src, dst, reps=reps, warmup=warmup)
    return frame.assign(latency_us=frame["time_median_us"])


def half_bandwidth_point(frame: pd.DataFrame, by: str = "mechanism") -> pd.DataFrame:
    """Per group: peak bandwidth and the message size that first reaches half of it (n½, interpolated
    linearly in log₂ size between the two measured sizes around it; the smallest size if it already does).

    Example:
        >>> df = pd.DataFrame({"mechanism": ["ce"] * 3, "bytes": [1024, 2048, 4096],
        ...                    "bandwidth_GBps": [10.0, 30.0, 40.0]})
        >>> half_bandwidth_point(df).round(1).to_dict("records")
        [{'mechanism': 'ce', 'peak_GBps': 40.0, 'half_GBps': 20.0, 'half_bytes': 1448.2}]
    """
    missing = {by, "bytes", "bandwidth_GBps"} - set(frame.columns)
    if missing:
        raise ValueError(f"frame: missing columns {sorted(missing)}")
    rows = []
    for name, group in frame.groupby(by, sort=True):
        group = group.sort_values("bytes")
        size, gbps = np.log2(group["bytes"].to_numpy(dtype=float)), group["bandwidth_GBps"].to_numpy(dtype=float)
        peak = gbps.max()
        i = int(np.argmax(gbps >= peak / 2))
        x = size[0] if i == 0 else size[i - 1] + (peak / 2 - gbps[i - 1]) / (gbps[i] - gbps[i - 1]) * (size[i] - size[i - 1])
        rows.append({by: name, "peak_GBps": peak, "half_GBps": peak / 2, "half_bytes": float(2 ** x)})
    return pd.DataFrame(rows)
