"""Communication-aware roofline: the least time a per-GPU cost (FLOPs, HBM bytes, link bytes, sync steps) can take.

Three rates bound the work: FLOPs over the matmul rate of the inputs' dtype (T_c), HBM bytes over memory
bandwidth (T_m), link bytes over one direction of the GPU's NVLink (T_l). Each cross-GPU synchronisation
step costs a latency α that no overlap hides. The floor, which is also the overlap bound of a schedule
that runs compute and communication at once, is max(T_c, T_l, T_m) + α·steps; running them one after the
other takes T_c + T_l + α·steps. Ceilings come from a GPU's datasheet (`pkit.hardware`, α = 0) or from
measurements on this machine (`Ceilings.measured`, from `pkit.experiments.ceilings`).

Example:
    >>> from pkit.roofline import Ceilings, floor, ag_gemm_cost
    >>> c = Ceilings.datasheet("H200")
    >>> f = floor({"flops": 2 * 8192**3, "hbm_bytes": 3 * 2 * 8192**2, "link_bytes": 0}, c)
    >>> f.bound, round(f.time_s * 1e3, 3)
    ('compute', 1.111)
    >>> round(floor({"flops": 2 * 8192**3, "hbm_bytes": 0, "link_bytes": 0}, c, "float32").time_s * 1e3, 2)
    16.44
    >>> f = floor(ag_gemm_cost(m=8192, k=8192, n_local=1024, n_gpus=2), c)  # all-gather + GEMM on 2 GPUs
    >>> f.bound, round(f.time_s * 1e6), round(f.serial_s * 1e6)
    ('link', 149, 288)
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping

from .hardware import GPUS

DTYPES = ("bfloat16", "float16", "tfloat32", "float32")
"""Input dtypes with a matmul rate; tfloat32 is float32 inputs multiplied on tensor cores (TF32)."""
_ALIASES = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "tf32": "tfloat32", "fp32": "float32",
            "float": "float32"}

MEASURED = {"gemm": ("TFLOP/s", 1e12), "hbm": ("GB/s read+write", 1e9), "link": ("GB/s one direction", 1e9),
            "sync": ("us", 1e-6)}
"""The rows `Ceilings.measured` reads: ceiling name → (unit of its `value` column, that unit in SI)."""


def dtype_name(dtype) -> str:
    """The canonical name in `DTYPES` of `dtype` ('bf16', 'torch.bfloat16', ... are accepted)."""
    name = str(dtype).removeprefix("torch.").lower()
    name = _ALIASES.get(name, name)
    if name not in DTYPES:
        raise ValueError(f"dtype: expected one of {list(DTYPES)} (or {sorted(_ALIASES)}), got {dtype!r}")
    return name


@dataclass(frozen=True)
class Ceilings:
    """Rates a kernel cannot beat, with their origin.

    flops_per_s: FLOP/s used when no dtype is named (the bf16 tensor rate for datasheet and measured
    ceilings); hbm_bytes_per_s: bytes read plus written per second; link_bytes_per_s: one direction of one
    GPU's links; sync_s: α, seconds per cross-GPU synchronisation step; flops_per_s_by_dtype: FLOP/s by
    input dtype name (`DTYPES`), defaulting to {'bfloat16': flops_per_s}.
    """

    flops_per_s: float
    hbm_bytes_per_s: float
    link_bytes_per_s: float
    origin: str
    sync_s: float = 0.0
    flops_per_s_by_dtype: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self):
        for name in ("flops_per_s", "hbm_bytes_per_s", "link_bytes_per_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: expected a positive rate, got {getattr(self, name)!r}")
        if not self.sync_s >= 0:
            raise ValueError(f"sync_s: expected a latency >= 0 seconds, got {self.sync_s!r}")
        rates = {dtype_name(d): float(r) for d, r in self.flops_per_s_by_dtype.items()} or {
            "bfloat16": self.flops_per_s}
        if not all(r > 0 for r in rates.values()):
            raise ValueError(f"flops_per_s_by_dtype: expected positive rates, got {rates}")
        object.__setattr__(self, "flops_per_s_by_dtype", rates)

    def flops_rate(self, dtype=None) -> float:
        """FLOP/s for inputs of `dtype` (None: `flops_per_s`)."""
        if dtype is None:
            return self.flops_per_s
        name = dtype_name(dtype)
        if name not in self.flops_per_s_by_dtype:
            raise ValueError(f"dtype: these ceilings ({self.origin}) have rates for "
                             f"{list(self.flops_per_s_by_dtype)}, got {dtype!r}")
        return self.flops_per_s_by_dtype[name]

    @classmethod
    def datasheet(cls, gpu: str = "H200") -> "Ceilings":
        """Vendor figures of `gpu` (a key of `pkit.hardware.GPUS`); datasheets state no sync latency, so α = 0."""
        if gpu not in GPUS:
            raise ValueError(f"gpu: expected one of {list(GPUS)}, got {gpu!r}")
        g = GPUS[gpu]
        return cls(g.bf16_dense_tflops * 1e12, g.hbm_tbps * 1e12, g.nvlink_gbps_per_direction * 1e9,
                   f"{gpu} datasheet: {g.source}", 0.0, {d: r * 1e12 for d, r in g.dense_tflops.items()})

    @classmethod
    def measured(cls, frame, provenance: dict | None = None) -> "Ceilings":
        """Ceilings from a `pkit.experiments.ceilings.measure` frame (columns ceiling, dtype, value, unit and
        optionally verified; units as in `MEASURED`): the fastest verified GEMM per dtype (bfloat16 required),
        the fastest HBM copy and link rate, the smallest sync step. `provenance` (a recorded result's) names
        the machine and commit in `origin`.
        """
        missing = {"ceiling", "dtype", "value", "unit"} - set(frame.columns)
        if missing:
            raise ValueError(f"frame: expected columns ceiling, dtype, value, unit; missing {sorted(missing)}")
        rows = frame[frame["verified"].astype(bool)] if "verified" in frame.columns else frame
        absent = [c for c in MEASURED if c not in set(rows["ceiling"])]
        if absent:
            raise ValueError(f"frame: expected verified rows for ceilings {list(MEASURED)}; none for {absent}")
        values = {}
        for name, (unit, scale) in MEASURED.items():
            part = rows[rows["ceiling"] == name]
            wrong = sorted(set(part["unit"]) - {unit})
            if wrong:
                raise ValueError(f"frame: expected unit {unit!r} for ceiling {name!r}, got {wrong}")
            values[name] = part["value"].astype(float) * scale
        gemm = rows[rows["ceiling"] == "gemm"].assign(rate=values["gemm"])
        by_dtype = {dtype_name(d): float(r) for d, r in gemm.groupby("dtype")["rate"].max().items()}
        if "bfloat16" not in by_dtype:
            raise ValueError(f"frame: expected gemm rows for bfloat16 (the default rate), got {sorted(by_dtype)}")
        origin = "measured"
        if provenance:
            origin += (f" on {provenance.get('machine', 'an unnamed machine')} at "
                       f"{provenance.get('pkit_commit', 'an unknown commit')}")
        return cls(by_dtype["bfloat16"], float(values["hbm"].max()), float(values["link"].max()), origin,
                   float(values["sync"].min()), by_dtype)


@dataclass(frozen=True)
class Floor:
    """The roofline's terms (seconds): T_c, T_m, T_l and the sync latency α·steps."""

    compute_s: float
    hbm_s: float
    link_s: float
    sync_s: float = 0.0

    @property
    def time_s(self) -> float:
        """The floor, and the overlap bound: max(T_c, T_m, T_l) + α·steps (compute, memory traffic and link
        transfers run at once; synchronisation steps wait for each other and add)."""
        return max(self.compute_s, self.hbm_s, self.link_s) + self.sync_s

    @property
    def serial_s(self) -> float:
        """T_c + T_l + α·steps: compute, then communication, one after the other. T_m is not added: the
        memory traffic belongs to the GEMM and overlaps its own compute (T_c already covers it when it is
        the larger, as in any GEMM worth overlapping)."""
        return self.compute_s + self.link_s + self.sync_s

    @property
    def bound(self) -> str:
        """The term that sets the floor: compute, hbm, link, or sync when α·steps exceeds all three."""
        largest = max((self.compute_s, "compute"), (self.hbm_s, "hbm"), (self.link_s, "link"))
        return "sync" if self.sync_s > largest[0] else largest[1]


def floor(cost: dict, ceilings: Ceilings | None = None, dtype=None) -> Floor:
    """The roofline of `cost` (keys flops, hbm_bytes, link_bytes, optional sync_steps; per GPU) under
    `ceilings` (default: H200 datasheet), with FLOPs at the matmul rate of `dtype` (default the bf16 rate).
    """
    missing = {"flops", "hbm_bytes", "link_bytes"} - set(cost)
    if missing:
        raise ValueError(f"cost: expected keys flops, hbm_bytes, link_bytes; missing {sorted(missing)}")
    if any(cost[k] < 0 for k in ("flops", "hbm_bytes", "link_bytes")) or cost.get("sync_steps", 0) < 0:
        raise ValueError(f"cost: expected non-negative values, got {cost}")
    c = ceilings or Ceilings.datasheet()
    return Floor(cost["flops"] / c.flops_rate(dtype), cost["hbm_bytes"] / c.hbm_bytes_per_s,
                 cost["link_bytes"] / c.link_bytes_per_s, c.sync_s * cost.get("sync_steps", 0))


def overlap_efficiency(time_s: float, serial_s: float, bound_s: float) -> float:
    """(serial − time) / (serial − bound): 1 when a schedule reaches the overlap bound, 0 when it is no faster
    than running compute and communication one after the other (negative: slower); NaN when serial equals
    the bound (nothing to overlap). All three in seconds (or any one unit).

    >>> overlap_efficiency(1.5e-3, serial_s=2e-3, bound_s=1e-3)
    0.5
    """
    for name, value in (("time_s", time_s), ("serial_s", serial_s), ("bound_s", bound_s)):
        if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise ValueError(f"{name}: expected a positive, finite time, got {value!r}")
    if serial_s < bound_s:
        raise ValueError(f"serial_s: expected a time >= bound_s ({bound_s!r}), got {serial_s!r}")
    return (serial_s - time_s) / (serial_s - bound_s) if serial_s > bound_s else math.nan


def _check_shape(n_gpus: int, itemsize: int, **dims: int) -> None:
    for name, value in {**dims, "n_gpus": n_gpus, "itemsize": itemsize}.items():
        if not (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
            raise ValueError(f"{name}: expected a positive integer, got {value!r}")


def gemm_cost(m: int, k: int, n: int, itemsize: int = 2, out_itemsize: int = 2) -> dict:
    """Cost of one GEMM on one GPU, C (m × n) = A (m × k) · B (k × n): 2·m·k·n FLOPs; HBM, the least it must
    move: A and B read once (`itemsize` bytes an element), C written once (`out_itemsize`, 2: bf16); no link, no sync.

    >>> gemm_cost(m=4, k=3, n=2)
    {'flops': 48.0, 'hbm_bytes': 52.0, 'link_bytes': 0.0, 'sync_steps': 0}
    """
    _check_shape(1, itemsize, m=m, k=k, n=n, out_itemsize=out_itemsize)
    return {"flops": 2.0 * m * k * n, "hbm_bytes": float(itemsize * (m * k + k * n) + out_itemsize * m * n),
            "link_bytes": 0.0, "sync_steps": 0}


def ag_gemm_cost(m: int, k: int, n_local: int, n_gpus: int, itemsize: int = 2) -> dict:
    """Per-GPU cost of all-gather + GEMM: A (m × k) is row-sharded, m/n_gpus rows per GPU (n_gpus must divide m);
    each GPU multiplies the gathered A by its B (k × n_local) into m × n_local. `itemsize` bytes per element
    (2: bf16). FLOPs: 2·m·k·n_local. Link: the (n_gpus − 1)/n_gpus of A it receives. One sync step (the shards
    have landed).

    HBM, the least any schedule must move: its own A slice read once, B read once, the output written once,
    itemsize · (m·k/n_gpus + k·n_local + m·n_local). The gathered A is not counted again: a fused kernel can load
    the peers' rows over the link straight into shared memory (TMA or loads from the peer's memory) and multiply
    them there, so they need never land in this GPU's HBM; and the one read of a GPU's own slice can feed its
    GEMM and the peers' loads alike. Staging the gathered A in HBM first (all-gather, then GEMM) costs
    2 · (n_gpus − 1)/n_gpus of A more, which is a schedule's overhead, not part of the floor.

    >>> ag_gemm_cost(m=4, k=3, n_local=2, n_gpus=2)
    {'flops': 48.0, 'hbm_bytes': 40.0, 'link_bytes': 12.0, 'sync_steps': 1}
    """
    _check_shape(n_gpus, itemsize, m=m, k=k, n_local=n_local)
    rows = m // n_gpus
    if rows * n_gpus != m:
        raise ValueError(f"m: expected a multiple of n_gpus ({n_gpus}), got {m!r}")
    return {"flops": 2.0 * m * k * n_local, "hbm_bytes": float(itemsize * (rows * k + k * n_local + m * n_local)),
            "link_bytes": float((n_gpus - 1) * rows * k * itemsize), "sync_steps": 1}


def gemm_rs_cost(m: int, k: int, n: int, n_gpus: int, itemsize: int = 2) -> dict:
    """Per-GPU cost of GEMM + reduce-scatter: A (m × k) and B (k × n) are K-sharded, k/n_gpus per GPU (n_gpus must
    divide m and k); each GPU computes an m × n partial product and the partials are reduce-scattered along m,
    m/n_gpus rows each. Convention: partial sums travel in the input dtype (`itemsize`, 2: bf16), as PyTorch's
    tensor-parallel layers reduce them; pass itemsize=4 for fp32 partials. FLOPs: the GEMM's 2·m·(k/n_gpus)·n and
    the (n_gpus − 1)/n_gpus·m·n additions of the reduction. Link: the (n_gpus − 1)/n_gpus of the partial it sends.
    One sync step.

    HBM, the least any schedule must move: its A and B shards read once and its m/n_gpus × n output written once.
    The partial itself is not counted: a fused kernel can send each tile to its owner as it leaves the SMs and
    add the tiles that arrive into its own output, so no m × n partial need land in HBM.

    >>> gemm_rs_cost(m=4, k=6, n=2, n_gpus=2)
    {'flops': 52.0, 'hbm_bytes': 44.0, 'link_bytes': 8.0, 'sync_steps': 1}
    """
    _check_shape(n_gpus, itemsize, m=m, k=k, n=n)
    for name, value in (("m", m), ("k", k)):
        if value % n_gpus:
            raise ValueError(f"{name}: expected a multiple of n_gpus ({n_gpus}), got {value!r}")
    rows, k_local = m // n_gpus, k // n_gpus
    foreign = (n_gpus - 1) * rows * n  # partial sums sent away, as many added from peers
    return {"flops": float(2 * m * k_local * n + foreign), "hbm_bytes": float(itemsize * ((m + n) * k_local + rows * n)),
            "link_bytes": float(foreign * itemsize), "sync_steps": 1}


def gemm_ar_cost(m: int, k: int, n: int, n_gpus: int, itemsize: int = 2) -> dict:
    """Per-GPU cost of GEMM + all-reduce: as `gemm_rs_cost`, but every GPU ends with the whole m × n sum, which it
    writes to its HBM. Link: 2(n_gpus − 1)/n_gpus of the partial (reduce-scatter, then all-gather: the
    bandwidth-optimal all-reduce), hence two sync steps.

    >>> gemm_ar_cost(m=4, k=6, n=2, n_gpus=2)
    {'flops': 52.0, 'hbm_bytes': 52.0, 'link_bytes': 16.0, 'sync_steps': 2}
    """
    cost = gemm_rs_cost(m, k, n, n_gpus, itemsize)
    return dict(cost, hbm_bytes=cost["hbm_bytes"] + float(itemsize * (n_gpus - 1) * (m // n_gpus) * n),
                link_bytes=2 * cost["link_bytes"], sync_steps=2)
