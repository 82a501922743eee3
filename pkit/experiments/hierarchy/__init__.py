"""The memory and interconnect hierarchy seen from one GPU: latency and bandwidth from shared memory to
the peer GPU over NVLink (when the machine has one) and the host over PCIe, an nvbandwidth-style matrix, and
message-size sweeps along copy routes.

The pieces live beside this module: pointer-chase latency in `chase`, the bandwidth matrix in
`matrix`, buffers and level names in `memory`. Here: read bandwidth per level, the
ladder that joins it with latency, and the size sweeps with their half-bandwidth points. Every function
measures the machine's GPUs by default: GPU 0, and GPU 1 as its peer where there is one.

Example:
    >>> from pkit.experiments import hierarchy
    >>> hierarchy.ladder()[["level", "latency_ns", "bandwidth_GBps"]]                    # doctest: +SKIP
    >>> hierarchy.matrix_table(hierarchy.bandwidth_matrix())                             # doctest: +SKIP
    >>> hierarchy.half_bandwidth_point(hierarchy.size_sweep())                           # doctest: +SKIP
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from ...launch import THREADS
from ...ops.transfers import Route, check_mechanisms, check_routes, default_route, gpu_count
from .chase import (LADDER, check_peer, device_and_peer, latency_ladder,  # noqa: F401 - the interface
                              without_peer, working_set_sweep)
from .matrix import (TESTCASES, bandwidth_matrix, engine_table, format_matrix, key_paths,  # noqa: F401
                               matrix_table, plot_matrix, print_matrix)
from .memory import HBM, HOST, L1, L2, LEVELS, PEER, SHARED, pinned  # noqa: F401

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


def _read_source(plan: ReadPlan, device: int, peer: int | None, stack) -> int:
    """Address of the plan's working set (allocated on the device, the peer or pinned host memory)."""
    import cupy as cp

    if plan.memory == "host":
        return stack.enter_context(pinned(plan.working_set_bytes))[0]
    with cp.cuda.Device(peer if plan.memory == "peer" else device):
        buffer = cp.zeros(plan.working_set_bytes, dtype=cp.uint8)
    stack.callback(lambda: buffer)  # keep the buffer alive until the plan is measured
    return buffer.data.ptr


def level_bandwidth(device: int | None = None, peer: int | None = None, reps: int = 10, warmup: int = 3,
                    plans: Sequence[ReadPlan] = READS) -> pd.DataFrame:
    """Read bandwidth of each level from GPU `device`'s SMs (default GPU 0), all of them reading at once
    (16-byte loads). `peer` None: the next GPU, or no peer row on a one-GPU machine (`device_and_peer`).

    Shared memory and L1: every block rereads its own 16 KiB `passes` times; L2: the grid rereads 16 MiB;
    HBM (2 GiB), `peer`'s HBM over NVLink (1 GiB) and pinned host memory over PCIe (256 MiB): one pass,
    each larger than 3× the L2 or uncacheable. Grid: 4 blocks of 512 threads per SM. Timing: `pkit.bench`,
    `warmup` + `reps` launches, medians. Columns: level, memory, load, working_set_bytes, read_bytes (per
    launch), bandwidth_GBps (10⁹ B/s read), time_median_us, cv.

    Example:
        >>> level_bandwidth()[["level", "bandwidth_GBps"]]                              # doctest: +SKIP
    """
    check_peer(device, peer)
    if not isinstance(reps, (int, np.integer)) or reps < 1 or not isinstance(warmup, (int, np.integer)) or warmup < 0:
        raise ValueError(f"reps, warmup: expected reps >= 1 and warmup >= 0, got {reps!r}, {warmup!r}")
    if not plans or not all(isinstance(p, ReadPlan) and p.working_set_bytes % 16 == 0 for p in plans):
        raise ValueError(f"plans: expected ReadPlans with working sets in multiples of 16 bytes, got {plans!r}")
    from contextlib import ExitStack

    import cupy as cp

    import pkit

    device, peer = device_and_peer(device, peer)
    plans = without_peer(plans, peer)
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


def ladder(device: int | None = None, peer: int | None = None, latency_reps: int = 5,
           bandwidth_reps: int = 10) -> pd.DataFrame:
    """Latency (`latency_ladder`) and read bandwidth (`level_bandwidth`) of every level seen from GPU `device`
    (default 0), one row per level; `peer` None: the next GPU, or no peer rung on a one-GPU machine.

    Latency columns keep their names (latency_ns, latency_cycles, latency_cv, working_set_bytes ...);
    bandwidth columns: bandwidth_GBps, bandwidth_cv, read_working_set_bytes, read_bytes. Partition rows
    (L2 near/far) carry no bandwidth.

    Example:
        >>> ladder()[["level", "latency_ns", "bandwidth_GBps"]]                         # doctest: +SKIP
    """
    device, peer = device_and_peer(device, peer)
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


def _sizes(sizes_bytes: Sequence[int] | None) -> list[int]:
    from ..peer_copies import check_sizes

    return [4 * KiB << k for k in range(19)] if sizes_bytes is None else check_sizes(sizes_bytes, "sizes_bytes")


def size_routes(n_gpus: int | None = None) -> list[Route]:
    """`size_sweep`'s default routes: GPU0 → GPU1 on a machine with two GPUs or more, else GPU0's local copy
    and host → device.

    Example:
        >>> [r.label for r in size_routes(2)], [r.label for r in size_routes(1)]
        (['GPU0 → GPU1'], ['GPU0 → GPU0', 'CPU → GPU0'])
    """
    n = gpu_count() if n_gpus is None else n_gpus
    return check_routes([Route(0, 1)] if n >= 2 else [Route(0, 0), Route(None, 0)], "routes", n)


def size_sweep(sizes_bytes: Sequence[int] | None = None, routes=None, mechanisms: Sequence[str] = ("ce", "sm"),
               reps: int = 20, warmup: int = 5) -> pd.DataFrame:
    """One-way copies by size along each route (Routes or labels such as 'CPU → GPU0'; default `size_routes`:
    what the machine has), by each of `mechanisms` the route has (names or families: 'sm' is sm_push and
    sm_pull between two GPUs, pkit's copy16 on every SM otherwise; 'ce' the copy engine).

    Default sizes: 4 KiB to 1 GiB in powers of two. Each copy is verified, buffers rotate past L2 and
    launches queue behind a spin kernel (`peer_copies.time_copy`). Bandwidth counts the bytes copied once.
    Columns: route, mechanism, bytes, time_{median,min,max,iqr}_us, cv, bandwidth_GBps (10⁹ B/s),
    verified, rotations, latency_us (the median time of one copy, which small messages are made of).

    Example:
        >>> size_sweep([1 << 20, 1 << 30], routes=["GPU0 → GPU0", "CPU → GPU0"])        # doctest: +SKIP
    """
    from ..mechanisms import measure_copy, plan

    sizes = _sizes(sizes_bytes)
    check_mechanisms(mechanisms)
    routes = size_routes() if routes is None else check_routes(routes)
    rows = [measure_copy(route, size, m, reps=reps, warmup=warmup)
            for route, names in plan(routes, mechanisms) for size in sizes for m in names]
    frame = pd.DataFrame(rows).drop(columns="blocks")
    return frame.assign(latency_us=frame["time_median_us"])


def peer_size_sweep(sizes_bytes: Sequence[int] | None = None, src: int | None = None, dst: int | None = None,
                    reps: int = 20, warmup: int = 5) -> pd.DataFrame:
    """One-way GPU `src` → GPU `dst` copies by size (default GPU 0 → GPU 1; needs two GPUs, `size_sweep`
    measures any machine): SM push, SM pull (pkit's copy16) and the copy engine, per size in that order.
    Columns as `size_sweep`'s.

    Example:
        >>> peer_size_sweep([1 << 20, 1 << 30])                                         # doctest: +SKIP
    """
    from ..peer_copies import check_sizes_and_pair

    sizes = _sizes(sizes_bytes)
    if src is not None and dst is not None:
        check_sizes_and_pair(sizes, src, dst, "sizes_bytes")
    route = default_route(src, dst)
    if route.kind != "peer":
        raise ValueError(f"src, dst: expected two different GPUs (a peer copy), got {route.label}; this machine "
                         f"has {gpu_count()} GPU: hierarchy.size_sweep() measures its local and host routes")
    return size_sweep(sizes, [route], ("sm_push", "sm_pull", "ce"), reps, warmup)


def half_bandwidth_point(frame: pd.DataFrame, by: str | Sequence[str] | None = None) -> pd.DataFrame:
    """Per group (`by`: a column or a list of columns; default route and mechanism, or mechanism alone when
    the frame has no route column): peak bandwidth and the message size that first reaches half of it (n½,
    interpolated linearly in log₂ size between the two measured sizes around it; the smallest size if it
    already does).

    Example:
        >>> df = pd.DataFrame({"mechanism": ["ce"] * 3, "bytes": [1024, 2048, 4096],
        ...                    "bandwidth_GBps": [10.0, 30.0, 40.0]})
        >>> half_bandwidth_point(df).round(1).to_dict("records")
        [{'mechanism': 'ce', 'peak_GBps': 40.0, 'half_GBps': 20.0, 'half_bytes': 1448.2}]
        >>> flat = df.assign(route="GPU0 → GPU0", bandwidth_GBps=[40.0] * 3)
        >>> two = pd.concat([df.assign(route="CPU → GPU0"), flat])
        >>> half_bandwidth_point(two)[["route", "mechanism", "half_bytes"]].round(1).values.tolist()
        [['CPU → GPU0', 'ce', 1448.2], ['GPU0 → GPU0', 'ce', 1024.0]]
    """
    keys = (["route", "mechanism"] if "route" in frame.columns else ["mechanism"]) if by is None else (
        [by] if isinstance(by, str) else list(by))
    missing = {*keys, "bytes", "bandwidth_GBps"} - set(frame.columns)
    if missing:
        raise ValueError(f"frame: missing columns {sorted(missing)}")
    rows = []
    for name, group in frame.groupby(keys, sort=True):
        group = group.sort_values("bytes")
        size, gbps = np.log2(group["bytes"].to_numpy(dtype=float)), group["bandwidth_GBps"].to_numpy(dtype=float)
        peak = gbps.max()
        i = int(np.argmax(gbps >= peak / 2))
        x = size[0] if i == 0 else size[i - 1] + (peak / 2 - gbps[i - 1]) / (gbps[i] - gbps[i - 1]) * (size[i] - size[i - 1])
        rows.append({**dict(zip(keys, name)), "peak_GBps": peak, "half_GBps": peak / 2, "half_bytes": float(2 ** x)})
    return pd.DataFrame(rows)


def plot_ladder(ladder: pd.DataFrame, provenance: dict, device: int = 0, peer: int | None = None):
    """The ladder (`ladder`'s frame) as two bar charts, latency (ns and SM cycles above each bar, L2's near and
    far partitions as marks across its bar) and read bandwidth (GB/s), log scales; title from `provenance`.
    Returns the figure.

    Example:
        >>> import matplotlib; matplotlib.use("Agg")
        >>> df = pd.DataFrame({"kind": ["level", "level", "partition"], "level": [L1, L2, "L2 near"],
        ...                    "latency_ns": [20.0, 200.0, 180.0], "latency_cycles": [40, 400, 360],
        ...                    "bandwidth_GBps": [9e4, 1e4, None], "reps": [3, 3, 3]})
        >>> fig = plot_ladder(df, {"machine": "m", "gpus": ["G"]})
        >>> [ax.get_title() for ax in fig.axes]
        ['Latency (pointer chase, one thread)', 'Bandwidth (all SMs reading)']
    """
    from ... import figures

    levels = ladder[ladder["kind"] == "level"]
    fig, (lat_ax, bw_ax) = figures.subplots(1, 2, figsize=(11, 4.8))
    x = np.arange(len(levels))
    lat_ax.bar(x, levels["latency_ns"], color=figures.BLUE)
    _mark_partitions(lat_ax, ladder, list(levels["level"]).index(L2))
    top = ladder.loc[ladder["kind"] == "partition", "latency_ns"].max()  # L2's label above its partitions (NaN: none)
    for xi, (name, ns, cyc) in enumerate(zip(levels["level"], levels["latency_ns"], levels["latency_cycles"])):
        lat_ax.annotate(f"{ns:.0f} ns\n{cyc:.0f} cyc", (xi, max(ns, top) if name == L2 else ns),
                        xytext=(0, 3), textcoords="offset points", ha="center", fontsize=8)
    lat_ax.set(yscale="log", ylabel="latency per dependent load (ns)", title="Latency (pointer chase, one thread)")
    bw_ax.bar(x, levels["bandwidth_GBps"], color=figures.GREEN)
    for xi, gbps in enumerate(levels["bandwidth_GBps"]):
        bw_ax.annotate(f"{gbps:,.0f}", (xi, gbps), xytext=(0, 3), textcoords="offset points", ha="center", fontsize=8)
    bw_ax.set(yscale="log", ylabel="read bandwidth (GB/s)", title="Bandwidth (all SMs reading)")
    for ax in (lat_ax, bw_ax):
        ax.set_xticks(x, [name.replace(" (", "\n(") for name in levels["level"]], fontsize=8)
        ax.grid(axis="x", visible=False)
        ax.margins(y=0.25)
    figures.suptitle(fig, f"From GPU{device}: each rung of the hierarchy "
                          + (f"(peer: GPU{peer})" if peer is not None else "(one GPU: no peer rung)"), provenance)
    figures.caption(fig, f"Latency: median over {int(levels['reps'].max())} launches of the time per hop of one "
                         "thread's pointer chase (cycles by the SM clock); L2 near/far: the two groups the per-hop "
                         "times split into. Bandwidth: median over repeated launches of every SM reading the level. "
                         "No error bars: each bar is one median (spreads as CVs in the table above).")
    return fig


def _mark_partitions(ax, ladder: pd.DataFrame, x: int) -> None:
    """L2's near and far partitions (the ladder's 'partition' rows) as marks across the bar at `x`, each labelled
    left of it, one below the other."""
    from ... import figures

    parts = ladder[ladder["kind"] == "partition"].sort_values("latency_ns")
    for k, row in enumerate(parts.itertuples()):
        ax.plot([x - 0.4, x + 0.4], [row.latency_ns] * 2, color=figures.VERMILLION, lw=1.5)
        ax.annotate(f"{row.level}: {row.latency_ns:.0f} ns", (x - 0.4, row.latency_ns), xytext=(-6, 9 * (2 * k - 1)),
                    textcoords="offset points", ha="right", va="center", fontsize=7.5, color=figures.VERMILLION,
                    arrowprops={"arrowstyle": "-", "color": figures.VERMILLION, "lw": 0.6})


def plot_working_set(sweep: pd.DataFrame, provenance: dict, device: int = 0, l2_bytes: float | None = None):
    """The working-set sweep (`working_set_sweep`'s frame): latency per dependent load (ns, log) by working set
    (bytes, log₂), with the datasheet L2 size (`l2_bytes`, default the H200's) as a labelled dashed line. Returns
    the figure.

    Example:
        >>> import matplotlib; matplotlib.use("Agg")
        >>> df = pd.DataFrame({"working_set_bytes": [4096, 1 << 20, 1 << 30], "latency_ns": [20.0, 150.0, 300.0],
        ...                    "reps": [3, 3, 3]})
        >>> fig = plot_working_set(df, {"machine": "m", "gpus": ["G"]})
        >>> [t.get_text() for t in fig.axes[0].texts]
        [' L2 size (datasheet)']
    """
    from matplotlib.ticker import FuncFormatter

    from ... import figures, hardware

    fig, ax = figures.subplots()
    ax.plot(sweep["working_set_bytes"], sweep["latency_ns"], marker="o", color=figures.BLUE)
    l2 = l2_bytes or hardware.GPUS["H200"].l2_mib * MiB
    ax.axvline(l2, color="0.4", ls="--", lw=1)
    ax.text(l2, 0.04, " L2 size (datasheet)", transform=ax.get_xaxis_transform(), fontsize=8, color="0.25")
    figures.size_axis(ax, sweep["working_set_bytes"])
    ax.set(yscale="log", xlabel="working set (bytes chased through)", ylabel="latency per dependent load (ns)")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(FuncFormatter(lambda v, _: f"{v:g}" if str(round(v))[0] in "235" else ""))
    figures.suptitle(fig, f"GPU{device}: random pointer chase through L1, L2 and HBM", provenance, world_size=1)
    figures.caption(fig, f"Each point: median over {int(sweep['reps'].max())} launches of the time per hop (one thread, "
                         "ld.global.ca, one 128-byte line per slot in random order); only GPU"
                         f"{device} takes part. Dashed: the datasheet L2 size.")
    return fig
