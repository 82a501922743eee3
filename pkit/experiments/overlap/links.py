"""The links of the overlap model (`pkit.experiments.overlap.model`): one system's per-GPU one-way rates by
mechanism and NCCL's collective times, measured on 2×H200 (`recorded_link`, `measured_link`), modelled for another
system from the datasheet (`modelled_link`) or as one GPU emulates a link (`emulated_link`).

Example:
    >>> from pkit.results import REPO_ROOT
    >>> two = recorded_link("h200x2-nv18", root=REPO_ROOT / "results")
    >>> two.gpus, modelled_link(two, 8).gpus, round(emulated_link(two, 2, 100.0, "asked").rate("ce"), 6)
    (2, 8, 100.0)
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Mapping

import numpy as np
import pandas as pd

from ...hardware import GPUS
from ...ops.collective_ops import bus_bandwidth_factor


@dataclass(frozen=True)
class Link:
    """One system's links as the model sees them: per-GPU one-way GB/s of the copy engine (`ce_GBps`), of SM pulls
    on k SMs (`sm_pull`), of TMA loads and stores (`tma_GBps`: mechanism → GB/s), NCCL's time of an op
    (`nccl_s(op, total_bytes, gpus)`), where each came from (`source`, `measured`), and the link's ceiling for the
    overlap bound (`ceiling_GBps`, from `ceiling_source`)."""

    name: str
    gpus: int
    ce_GBps: float
    sm_pull: Callable[[int], float]
    tma_GBps: Mapping[str, float]
    nccl_s: Callable[[str, float, int], float]
    source: str
    measured: bool
    ceiling_GBps: float
    ceiling_source: str
    gpu: str = "H200"

    TRANSFERS = ("ce", "sm_pull", "tma_pull", "tma_push")
    """The transfers (a schedule's `transfer`) the model has a rate for."""

    def rate(self, transfer: str, sms: int = 16) -> float:
        """One-way GB/s per GPU of a schedule's `transfer` (pkit.ops.overlap_patterns): the copy engine, SM pulls on
        `sms` SMs, TMA pulls or pushes."""
        if transfer not in self.TRANSFERS:
            raise ValueError(f"transfer: expected one of {list(self.TRANSFERS)} (the model has no rate for others), "
                             f"got {transfer!r}")
        if transfer == "ce":
            return float(self.ce_GBps)
        return float(self.sm_pull(sms)) if transfer == "sm_pull" else float(self.tma_GBps[transfer])

    def scaled(self, ratio: float, **fields) -> "Link":
        """This link with every mechanism's rate times `ratio` and `fields` replaced (name, gpus, nccl_s, ...)."""
        return replace(self, ce_GBps=self.ce_GBps * ratio, sm_pull=lambda k: self.sm_pull(k) * ratio,
                       tma_GBps={m: r * ratio for m, r in self.tma_GBps.items()}, **fields)


LINK_RECORDS = ("collectives_pkit_nccl", "mechanisms_sm_sweep", "mechanisms_size_sweep")
"""The recorded experiments `recorded_link` reads."""


def recorded_link(machine: str, root=None) -> Link:
    """`measured_link` from `machine`'s recorded LINK_RECORDS (under `root`, default pkit.results.results_root())."""
    from ... import results

    nccl, sms, sizes = (results.load(e, machine, root=root) for e in LINK_RECORDS)
    return measured_link(nccl.frame, sms.frame, sizes.frame, nccl.provenance)


def _loglog(xs, ys) -> Callable[[float], float]:
    """Piecewise-linear interpolation in log-log space, flat beyond the ends."""
    lx, ly = np.log(np.asarray(xs, float)), np.log(np.asarray(ys, float))
    return lambda x: float(np.exp(np.interp(np.log(x), lx, ly)))


def measured_link(collectives: pd.DataFrame, sm_sweep: pd.DataFrame, sizes: pd.DataFrame, provenance: dict) -> Link:
    """2×H200's links from recorded studies: NCCL's bf16 collective times by size (collectives_pkit_nccl, log-log
    interpolated), SM pulls by blocks and TMA's best pull and push (mechanisms_sm_sweep), the copy engine at the
    largest size (mechanisms_size_sweep), which is also the link's ceiling."""
    nccl = collectives[(collectives["implementation"] == "nccl") & (collectives["dtype"] == "bfloat16")]
    by_op = {op: _loglog(g["bytes"], g["time_median_us"] * 1e-6) for op, g in nccl.groupby("op")}
    pull = sm_sweep[sm_sweep["mechanism"] == "sm_pull"].sort_values("blocks")
    sm_pull = lambda k: float(np.interp(k, pull["blocks"], pull["bandwidth_GBps"]))  # noqa: E731
    tma = {m: float(sm_sweep.loc[sm_sweep["mechanism"] == m, "bandwidth_GBps"].max()) for m in ("tma_pull", "tma_push")}
    big = sizes[sizes["bytes"] == sizes["bytes"].max()]
    ce = float(big.loc[big["mechanism"] == "ce", "bandwidth_GBps"].iloc[0])
    gpus = int(provenance.get("gpu_count") or 2)
    machine = provenance.get("machine")
    largest = f"{int(big['bytes'].iloc[0]) >> 20} MiB"

    def nccl_s(op: str, total_bytes: float, n: int) -> float:
        if n != gpus:
            raise ValueError(f"gpus: NCCL was measured at {gpus} GPUs, got {n}")
        return by_op[op](total_bytes)

    return Link(f"{gpus}×H200, NV18 (measured links)", gpus, ce, sm_pull, tma, nccl_s,
                f"results/{machine}: collectives_pkit_nccl, mechanisms_sm_sweep, mechanisms_size_sweep", True, ce,
                f"results/{machine}/mechanisms_size_sweep: the copy engine at {largest}")


def _bus_s(op: str, total_bytes: float, n: int, GBps: float) -> float:
    """Seconds for `op`'s bus bytes (CollectiveOp's bus factor at `n` ranks times `total_bytes`) at `GBps`."""
    return bus_bandwidth_factor(op, n) * total_bytes / (GBps * 1e9)


def modelled_link(measured: Link, gpus: int, gpu: str = "H200", nvlink_GBps: float | None = None) -> Link:
    """A `gpus`-GPU NVSwitch system of `gpu`s (per-GPU NVLink one way from the datasheet, or `nvlink_GBps`): every
    measured rate of `measured` scaled by the datasheet ratio, and NCCL's time at W GPUs from its measured bus
    bandwidth at the same per-GPU bytes (bus factor: CollectiveOp's), scaled to this link. Its ceiling: the
    datasheet's NVLink (or `nvlink_GBps`)."""
    sheet = GPUS[gpu]
    one_way = nvlink_GBps or sheet.nvlink_gbps_per_direction
    scale = one_way / GPUS[measured.gpu].nvlink_gbps_per_direction

    def nccl_s(op: str, total_bytes: float, n: int) -> float:
        # busbw at the measured world size, at the size with the same bytes per GPU, scaled to this link
        two = measured.gpus
        bus2 = _bus_s(op, total_bytes * two / n, two, 1.0) / measured.nccl_s(op, total_bytes * two / n, two)
        return _bus_s(op, total_bytes, n, bus2 * scale)

    where = f"{gpu} datasheet: {sheet.source}" if nvlink_GBps is None else "given"
    return measured.scaled(scale, name=f"{gpus}×{gpu}, NVSwitch (modelled links)", gpus=gpus, nccl_s=nccl_s,
                           source=f"datasheet NVLink {one_way:.0f} GB/s one way per GPU (pkit.hardware), rates scaled "
                                  f"from {measured.name}", measured=False, gpu=gpu, ceiling_GBps=one_way,
                           ceiling_source=f"NVLink {one_way:.0f} GB/s one way per GPU ({where})")


def emulated_link(measured: Link, gpus: int, rate_GBps: float, rate_source: str) -> Link:
    """A link of `rate_GBps` one way per GPU as one GPU emulates it (pkit.experiments.overlap.emulated): the copy
    engine at that rate, SM and TMA transfers at `measured`'s rates scaled alike, the collective of the serial
    schedule its bus bytes (CollectiveOp's bus factor) at that rate, as the emulation moves them. `rate_source`
    says where the rate comes from; it is also the bound's link ceiling."""
    if not rate_GBps > 0:
        raise ValueError(f"rate_GBps: expected a positive rate, got {rate_GBps!r}")
    return measured.scaled(rate_GBps / measured.ce_GBps, name=f"{gpus} GPUs, link emulated at {rate_GBps:.0f} GB/s",
                           gpus=gpus, nccl_s=lambda op, total, n: _bus_s(op, total, n, rate_GBps),
                           source=f"one GPU, link emulated at {rate_GBps:.0f} GB/s ({rate_source})", measured=False,
                           ceiling_GBps=float(rate_GBps), ceiling_source=rate_source)
