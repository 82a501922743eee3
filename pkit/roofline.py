"""Communication-aware roofline: the least time a per-GPU cost (FLOPs, HBM bytes, link bytes) can take.

The floor is the largest of three terms: FLOPs over the tensor rate, HBM bytes over memory bandwidth,
link bytes over one direction of the GPU's NVLink. Ceilings default to a GPU's datasheet figures
(`pkit.hardware`); pass measured ceilings to judge against what the machine really reaches.

Example:
    >>> from pkit.roofline import Ceilings, floor
    >>> c = Ceilings.datasheet("H200")
    >>> f = floor({"flops": 2 * 8192**3, "hbm_bytes": 3 * 2 * 8192**2, "link_bytes": 0}, c)
    >>> f.bound, round(f.time_s * 1e3, 3)
    ('compute', 1.111)
"""
from __future__ import annotations

from dataclasses import dataclass

from .hardware import GPUS


@dataclass(frozen=True)
class Ceilings:
    """Rates a kernel cannot beat: FLOP/s, HBM byte/s and link byte/s (one direction), with their origin."""

    flops_per_s: float
    hbm_bytes_per_s: float
    link_bytes_per_s: float
    origin: str

    @classmethod
    def datasheet(cls, gpu: str = "H200") -> "Ceilings":
        if gpu not in GPUS:
            raise ValueError(f"gpu: expected one of {list(GPUS)}, got {gpu!r}")
        g = GPUS[gpu]
        return cls(g.bf16_dense_tflops * 1e12, g.hbm_tbps * 1e12, g.nvlink_gbps_per_direction * 1e9,
                   f"{gpu} datasheet: {g.source}")


@dataclass(frozen=True)
class Floor:
    """The three times (seconds) and which one bounds."""

    compute_s: float
    hbm_s: float
    link_s: float

    @property
    def time_s(self) -> float:
        return max(self.compute_s, self.hbm_s, self.link_s)

    @property
    def bound(self) -> str:
        return max((self.compute_s, "compute"), (self.hbm_s, "hbm"), (self.link_s, "link"))[1]


def floor(cost: dict, ceilings: Ceilings | None = None) -> Floor:
    """The roofline floor of `cost` (keys flops, hbm_bytes, link_bytes, per GPU) under `ceilings`."""
    missing = {"flops", "hbm_bytes", "link_bytes"} - set(cost)
    if missing:
        raise ValueError(f"cost: expected keys flops, hbm_bytes, link_bytes; missing {sorted(missing)}")
    if any(cost[k] < 0 for k in ("flops", "hbm_bytes", "link_bytes")):
        raise ValueError(f"cost: expected non-negative values, got {cost}")
    c = ceilings or Ceilings.datasheet()
    return Floor(cost["flops"] / c.flops_per_s, cost["hbm_bytes"] / c.hbm_bytes_per_s,
                 cost["link_bytes"] / c.link_bytes_per_s)
