"""Projection on paper: pkit's problems on systems larger than the 2×H200 machine, from datasheets. Every number
here is modelled (the roofline of each problem's cost model), never measured, and every row says so
(`modelled` is True): keep these rows apart from measured points.

Each problem's `cost(world_size, size, dtype)` (per GPU: FLOPs, HBM bytes, link bytes, optional sync steps) is
evaluated at a system's world size W, strong scaling: the problem's global shapes at `size`, split over W GPUs
the way its cost function splits them. W enters differently per problem: sharded dimensions shrink per-GPU work
as 1/W; collectives send (W−1)/W or 2(W−1)/W of a buffer; gathers of fixed-size partial results (top-k, kNN,
norms) send W−1 copies; MoE rows cross with the probability that a remote rank holds one of a token's experts;
halos stay constant. A cost is not evaluable at W when it floors a size parameter that W does not divide (4096
tokens over 72 GPUs, 64 experts over 576): its numbers would describe another problem, so the row says why in
`not_evaluable` instead of guessing. The large sizes are powers of two, so at 72 and 576 GPUs only the problems
whose cost splits no size parameter evaluate; `SYSTEMS` also holds 64 GPUs of an NVL72 and 512 GPUs (64 nodes),
which power-of-two shapes divide.

The cost is bounded by `pkit.roofline.floor` under the system's datasheet ceilings (`SYSTEMS`). A system has W
GPUs in NVLink domains of G GPUs (all-to-all through NVSwitch) and, when W > G, one NIC per GPU. A GPU's link
bytes L split by the problem's traffic pattern (a key of `TRAFFIC`, which each problem names in its
META["traffic"]) into bytes that stay in its domain and bytes that leave it:

    T_nvlink  = L · f_nv(W, G)  / NVLink rate (one direction)
    T_network = L · f_net(W, G) / NIC rate (one direction)
    T_l       = max(T_nvlink, T_network)
    time      = max(T_c, T_m, T_l) + α · sync_steps          (pkit.roofline.Floor.time_s)

    aggregated   f_nv = (G − 1) W / (G (W − 1))   f_net = (W − G) / (G (W − 1))
    uniform      f_nv = (G − 1) / (W − 1)         f_net = (W − G) / (W − 1)
    neighbour    f_nv = 1                         f_net = 1/2 if W > G else 0      (domains of 3+ GPUs)

aggregated: reductions and gathers (all-reduce, reduce-scatter, all-gather and what fuses them) as a hierarchical
collective: a stage over NVLink inside each domain and a stage among the W/G GPUs of equal local rank, each over
its own NIC, so a byte crosses the network once per domain instead of once per GPU (exact for flat per-GPU bytes
proportional to W − 1). uniform: a personalised all-to-all, each byte bound for one GPU, destinations spread
evenly; bytes for other domains cannot be combined, so they all cross a NIC. neighbour: halo exchange with ranks
numbered domain by domain; a GPU at a domain edge sends one of its two halos over its NIC, an interior GPU both
over NVLink. In one domain (W = G) every pattern gives f_nv = 1 and f_net = 0, and T_l is `floor`'s link term.
The bound is 'network' when T_network sets T_l and T_l sets the floor; otherwise `Floor.bound`.

Assumptions (each row's `assumptions` names its own): the datasheet rates are reached; the two link stages are
pipelined over chunks, so T_l is their maximum (stage by stage takes their sum); the network is a rail-optimised,
non-blocking fat tree; each term is the busiest GPU's; α per synchronisation step is an assumption per system
(`System.alpha_source`) times the steps the cost declares (no extra steps for the hierarchy); FLOPs run at the
rate of the problem's dtype as the harness's roofline takes it (`pkit.harness.problems.flops_dtype`: float32
without tensor cores), and a dtype without a rate (int64 sort keys) only evaluates costs without FLOPs.

Example:
    >>> from pkit.experiments.roofline_gap.projection import SYSTEMS, project, project_cost, split
    >>> [round(b) for b in split(1e6, "aggregated", gpus=576, domain_gpus=8)]  # bytes over NVLink, over the NIC
    [876522, 123478]
    >>> toy = {"flops": 4e12, "hbm_bytes": 1e9, "link_bytes": 1e9}  # per GPU
    >>> for name in ("dgx_h100", "dgx_b200_576"):
    ...     row = project_cost(toy, SYSTEMS[name], "uniform")
    ...     print(name, row["bound"], round(row["time_us"]), "us")
    dgx_h100 compute 4043 us
    dgx_b200_576 network 19757 us
    >>> frame = project(["01_all_reduce"], ["dgx_b200", "dgx_b200_576"])  # every row modelled, none measured
    >>> frame[["system", "bound", "modelled"]].values.tolist()
    [['dgx_b200', 'link', True], ['dgx_b200_576', 'network', True]]
"""
from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterable, Mapping

import pandas as pd

from ...hardware import GPU, GPUS, NIC, NICS, SUPERCHIP_GPUS
from ...harness.problem import load_module
from ...harness.problems import discover, flops_dtype, select
from ...roofline import Ceilings, dtype_name, floor


def _aggregated(gpus: int, domain_gpus: int) -> tuple[float, float]:
    """Reductions and gathers, hierarchical: each byte crosses the network once per domain."""
    per_gpu = domain_gpus * (gpus - 1)
    return (domain_gpus - 1) * gpus / per_gpu, (gpus - domain_gpus) / per_gpu


def _uniform(gpus: int, domain_gpus: int) -> tuple[float, float]:
    """Personalised all-to-all: each byte bound for one GPU, destinations spread evenly."""
    return (domain_gpus - 1) / (gpus - 1), (gpus - domain_gpus) / (gpus - 1)


def _neighbour(gpus: int, domain_gpus: int) -> tuple[float, float]:
    """Halo exchange, ranks numbered domain by domain: an edge GPU sends one of two halos over its NIC."""
    return 1.0, 0.5 if gpus > domain_gpus else 0.0


TRAFFIC = {"aggregated": _aggregated, "uniform": _uniform, "neighbour": _neighbour}
"""Traffic pattern → (f_nv, f_net)(gpus, domain_gpus): the shares of a GPU's link bytes over NVLink and its NIC."""

BOUNDS = ("compute", "hbm", "link", "network", "sync")
"""Terms that can bound a row: link is NVLink, network the NIC stage between domains."""


def _check_layout(gpus, domain_gpus) -> None:
    """`gpus` >= 2 GPUs in whole NVLink domains of `domain_gpus`."""
    for name, value, least in (("gpus", gpus, 2), ("domain_gpus", domain_gpus, 1)):
        if not (isinstance(value, int) and not isinstance(value, bool) and value >= least):
            raise ValueError(f"{name}: expected an integer >= {least}, got {value!r}")
    if domain_gpus > gpus or gpus % domain_gpus:
        raise ValueError(f"domain_gpus: expected a divisor of gpus ({gpus}), got {domain_gpus!r}")


@dataclass(frozen=True)
class System:
    """A modelled system: `gpus` GPUs of datasheet `gpu` in NVLink domains of `domain_gpus` (all-to-all through
    NVSwitch), one `nic` per GPU between domains (None when one domain holds every GPU), and α, `alpha_us`
    microseconds per synchronisation step, with its source (or 'assumed: ...' and why)."""

    description: str
    gpu: GPU
    gpus: int
    domain_gpus: int
    nic: NIC | None
    alpha_us: float
    alpha_source: str

    def __post_init__(self):
        _check_layout(self.gpus, self.domain_gpus)
        if (self.nic is None) != (self.gpus == self.domain_gpus):
            raise ValueError(f"nic: expected a NIC exactly when the {self.gpus} GPUs span several NVLink domains of "
                             f"{self.domain_gpus}, got {self.nic!r}")
        if not (isinstance(self.alpha_us, (int, float)) and math.isfinite(self.alpha_us) and self.alpha_us >= 0):
            raise ValueError(f"alpha_us: expected a latency >= 0 microseconds, got {self.alpha_us!r}")

    @property
    def nvlink_GBps(self) -> float:
        """NVLink per GPU, one direction, GB/s (the datasheet's bidirectional figure halved)."""
        return self.gpu.nvlink_gbps_per_direction

    @property
    def nic_GBps(self) -> float | None:
        """The NIC per GPU, one direction, GB/s; None in one NVLink domain."""
        return self.nic.gbps_per_direction if self.nic else None

    def ceilings(self) -> Ceilings:
        """The datasheet ceilings of one GPU (FLOP/s by dtype, HBM, NVLink one direction) with this system's α."""
        g = self.gpu
        return Ceilings(g.bf16_dense_tflops * 1e12, g.hbm_tbps * 1e12, self.nvlink_GBps * 1e9,
                        f"{g.name} datasheet: {g.source}", self.alpha_us * 1e-6,
                        {d: r * 1e12 for d, r in g.dense_tflops.items()})


_NVLINK_ALPHA = ("assumed: one signal over NVLink and a peer's poll seeing it, about 1 us (the order of a peer-HBM "
                 "load: the 'peer HBM (NVLink)' rung of results/h200x2-nv18/hierarchy_ladder)")
_NVL72_ALPHA = _NVLINK_ALPHA + "; one NVLink Switch tray between any two GPUs, as in the 8-GPU nodes"
_IB_ALPHA = "assumed: an RDMA write and its completion across an InfiniBand fat tree, a few us"


def _cluster(gpu: str, nodes: int, nic: str, what_if: str = "") -> System:
    """`nodes` DGX nodes of 8 `gpu`s (a key of GPUS) joined by InfiniBand, one `nic` (a key of NICS) per GPU."""
    return System(f"{what_if}{nodes} DGX {gpu} nodes ({8 * nodes} GPUs) on InfiniBand, one {nic} "
                  f"{NICS[nic].gbitps:g} Gb/s per GPU", GPUS[gpu], 8 * nodes, 8, NICS[nic], 5.0, _IB_ALPHA)


SYSTEMS: dict[str, System] = {
    "h200_nv18": System("2x H200 joined by NV18, the machine pkit measures on (modelled here from datasheets)",
                        GPUS["H200"], 2, 2, None, 1.0, _NVLINK_ALPHA),
    "dgx_h100": System("DGX H100: 8x H100 SXM, NVLink 4 through NVSwitch (900 GB/s per GPU)",
                       GPUS["H100"], 8, 8, None, 1.0, _NVLINK_ALPHA),
    "dgx_h200": System("DGX H200: 8x H200 SXM, NVLink 4 through NVSwitch (900 GB/s per GPU)",
                       GPUS["H200"], 8, 8, None, 1.0, _NVLINK_ALPHA),
    "dgx_b200": System("DGX B200: 8x B200, NVLink 5 through NVSwitch (1.8 TB/s per GPU)",
                       GPUS["B200"], 8, 8, None, 1.0, _NVLINK_ALPHA),
    "gb200_nvl72_64": System("64 GPUs of one GB200 NVL72 domain: a power-of-two job, which power-of-two shapes "
                             "divide", SUPERCHIP_GPUS["GB200"], 64, 64, None, 1.0, _NVL72_ALPHA),
    "gb200_nvl72": System("GB200 NVL72: 72 GPUs of 36 GB200 superchips, NVLink 5 all-to-all through NVLink Switch "
                          "trays (1.8 TB/s per GPU)", SUPERCHIP_GPUS["GB200"], 72, 72, None, 1.0, _NVL72_ALPHA),
    "dgx_h100_512": _cluster("H100", 64, "ConnectX-7"),
    "dgx_b200_512": _cluster("B200", 64, "ConnectX-7"),
    "dgx_b200_512_cx8": _cluster("B200", 64, "ConnectX-8", "what-if, ConnectX-8 as in DGX B300: "),
    "dgx_h100_576": _cluster("H100", 72, "ConnectX-7"),
    "dgx_b200_576": _cluster("B200", 72, "ConnectX-7"),
}
"""Modelled systems by name; `list_systems()` shows them as a table."""


def list_systems(systems: Mapping[str, System] | None = None) -> pd.DataFrame:
    """One row per system (default `SYSTEMS`): its GPU, layout, rates (GB/s one direction, bf16 TFLOP/s, HBM TB/s),
    α, and bf16 FLOPs per byte of NVLink and of NIC, the ratio that grows as compute outgrows links.

    >>> t = list_systems()
    >>> [round(t.loc[name, "flops_per_nvlink_byte"]) for name in ("dgx_h100", "dgx_b200", "dgx_b200_576")]
    [2199, 2500, 2500]
    >>> round(t.loc["dgx_b200_576", "flops_per_nic_byte"]), float(t.loc["dgx_b200_576", "nic_GBps"])
    (45000, 50.0)
    """
    rows = [{"name": name, "description": s.description, "gpu": s.gpu.name, "gpus": s.gpus,
             "domain_gpus": s.domain_gpus, "domains": s.gpus // s.domain_gpus, "nvlink_GBps": s.nvlink_GBps,
             "nic": s.nic.name if s.nic else None, "nic_GBps": s.nic_GBps, "alpha_us": s.alpha_us,
             "alpha_source": s.alpha_source, "bf16_tflops": s.gpu.bf16_dense_tflops, "hbm_TBps": s.gpu.hbm_tbps,
             "flops_per_nvlink_byte": s.gpu.bf16_dense_tflops * 1e3 / s.nvlink_GBps,
             "flops_per_nic_byte": s.gpu.bf16_dense_tflops * 1e3 / s.nic_GBps if s.nic else math.nan}
            for name, s in _systems(SYSTEMS if systems is None else systems).items()]
    return pd.DataFrame(rows).set_index("name")


def split(link_bytes: float, traffic: str | None, gpus: int, domain_gpus: int) -> tuple[float, float]:
    """(bytes over NVLink, bytes over the NIC) of a GPU's `link_bytes` under pattern `traffic` (a key of
    `TRAFFIC`; None only in one domain) on `gpus` GPUs in NVLink domains of `domain_gpus`.

    >>> [round(b) for b in split(1e6, "uniform", gpus=576, domain_gpus=8)], split(1e6, None, gpus=72, domain_gpus=72)
    ([12174, 987826], (1000000.0, 0.0))
    """
    if not (isinstance(link_bytes, (int, float)) and link_bytes >= 0):
        raise ValueError(f"link_bytes: expected a byte count >= 0, got {link_bytes!r}")
    _check_layout(gpus, domain_gpus)
    if traffic is None and gpus == domain_gpus:
        return float(link_bytes), 0.0
    if traffic not in TRAFFIC:
        raise ValueError(f"traffic: expected one of {list(TRAFFIC)}"
                         f"{'' if gpus == domain_gpus else ' (the GPUs span several NVLink domains)'}, got {traffic!r}")
    nvlink, network = TRAFFIC[traffic](gpus, domain_gpus)
    return link_bytes * nvlink, link_bytes * network


def project_cost(cost: dict, system: System, traffic: str | None = "aggregated", dtype=None) -> dict:
    """The modelled roofline of one per-GPU `cost` (keys of `pkit.roofline.floor`) on `system`: the cost, its link
    bytes split by `traffic` (see `split`), each term in microseconds (compute_us, hbm_us, nvlink_us, network_us,
    link_us = max of the two, sync_us), time_us and the bound (`BOUNDS`). FLOPs at the matmul rate of `dtype`.

    >>> row = project_cost({"flops": 0, "hbm_bytes": 0, "link_bytes": 8e9}, SYSTEMS["dgx_h100_576"], "aggregated")
    >>> round(row["network_bytes"]), round(row["network_us"]), round(row["nvlink_us"]), row["bound"]
    (987826087, 19757, 15583, 'network')
    """
    if not isinstance(system, System):
        raise ValueError(f"system: expected a System (e.g. SYSTEMS['dgx_h100']), got {system!r}")
    f = floor(cost, system.ceilings(), dtype)
    nvlink_bytes, network_bytes = split(cost["link_bytes"], traffic, system.gpus, system.domain_gpus)
    nvlink_s = nvlink_bytes / (system.nvlink_GBps * 1e9)
    network_s = network_bytes / (system.nic_GBps * 1e9) if system.nic else 0.0
    f = replace(f, link_s=max(nvlink_s, network_s))
    bound = "network" if f.bound == "link" and network_s > nvlink_s else f.bound
    return {"flops": cost["flops"], "hbm_bytes": cost["hbm_bytes"], "link_bytes": cost["link_bytes"],
            "nvlink_bytes": nvlink_bytes, "network_bytes": network_bytes, "sync_steps": cost.get("sync_steps", 0),
            "compute_us": f.compute_s * 1e6, "hbm_us": f.hbm_s * 1e6, "nvlink_us": nvlink_s * 1e6,
            "network_us": network_s * 1e6, "link_us": f.link_s * 1e6, "sync_us": f.sync_s * 1e6,
            "time_us": f.time_s * 1e6, "bound": bound}


COLUMNS = ("problem", "category", "dtype", "system", "gpu", "gpus", "domain_gpus", "traffic", "flops", "hbm_bytes",
           "link_bytes", "nvlink_bytes", "network_bytes", "sync_steps", "compute_us", "hbm_us", "nvlink_us",
           "network_us", "link_us", "sync_us", "time_us", "bound", "evaluable", "not_evaluable", "modelled",
           "assumptions")
"""Columns of `project`: costs per GPU (FLOPs, bytes), terms and time in microseconds, `modelled` always True."""


class _WorldSize(int):
    """The world size handed to a cost function, marked so that size parameters know a division by it."""


class _SizeParameter(int):
    """An int of a problem's SIZES that notes each floor division by the world size that leaves a remainder."""

    def __new__(cls, value: int, name: str, floored: list):
        self = super().__new__(cls, value)
        self.name, self.floored = name, floored
        return self

    def __floordiv__(self, other):
        if isinstance(other, _WorldSize) and self % other:
            self.floored.append(f"{self.name}={int(self)}")
        return int(self) // int(other)


@contextmanager
def _watched_sizes(module, size: str, floored: list):
    """Within the block, `module.SIZES[size]`'s integers note inexact divisions by the world size in `floored`."""
    original = module.SIZES
    params = {k: _SizeParameter(v, k, floored) if isinstance(v, int) and not isinstance(v, bool) else v
              for k, v in original[size].items()}
    module.SIZES = {**original, size: params}
    try:
        yield
    finally:
        module.SIZES = original


def _cost_at(module, world_size: int, size: str, dtype: str) -> tuple[dict | None, str]:
    """(the cost of a problem module at `world_size`, '') or (None, why it cannot be evaluated there)."""
    if module is None:
        return None, "no cost model (not a pkit problem)"
    if size not in module.SIZES:
        return None, f"no size {size!r} (sizes {list(module.SIZES)})"
    floored: list[str] = []
    cost, why = None, "the cost model returned None"
    try:
        with _watched_sizes(module, size, floored):
            cost = module.cost(_WorldSize(world_size), size, dtype)
    except (ArithmeticError, ValueError) as e:
        why = f"cost raised {type(e).__name__} at {world_size} GPUs: {e}"
    if floored:  # the root cause, also of an error the floored shard led to
        return None, (f"{', '.join(dict.fromkeys(floored))} not divisible by {world_size} GPUs: the cost function "
                      "would floor the shard, describing a different problem")
    return (cost, "") if cost is not None else (None, why)


def _assumptions(system: System, traffic: str | None, size: str) -> str:
    parts = [f"datasheet rates reached; strong scaling of size {size!r}"]
    if system.nic:
        parts.append(f"{traffic} traffic (f_nv, f_net per module docstring); NVLink and NIC stages pipelined; "
                     "rail-optimised non-blocking network")
    parts.append(f"alpha {system.alpha_us:g} us: {system.alpha_source}")
    return "; ".join(parts)


def _problems(problems) -> list:
    found = discover()
    if problems is None:
        return found
    names = [problems] if isinstance(problems, str) else list(problems)
    if not names or not all(isinstance(n, str) for n in names):
        raise ValueError(f"problems: expected problem names (folder, META name or number), got {problems!r}")
    return select(found, names)


def _systems(systems) -> dict[str, System]:
    if isinstance(systems, Mapping):
        wrong = {k: v for k, v in systems.items() if not isinstance(v, System)}
        if not systems or wrong:
            raise ValueError(f"systems: expected a mapping of names to System, got {dict(wrong) or systems!r}")
        return dict(systems)
    names = [systems] if isinstance(systems, str) else list(systems)
    unknown = [n for n in names if n not in SYSTEMS]
    if not names or unknown:
        raise ValueError(f"systems: expected names from {list(SYSTEMS)} or a mapping to System, got {systems!r}")
    return {n: SYSTEMS[n] for n in names}


def _module(problem):
    """The problem's own module, loaded privately (its SIZES are swapped while a cost is watched), or None."""
    if problem.source.get("kind") != "pkit":
        return None
    return load_module(Path(problem.source["path"]), f"pkit_projection_{problem.name}")


def _row(problem, module, name: str, system: System, size: str, dtype: str) -> dict:
    traffic = None if module is None else module.META.get("traffic")
    row = {"problem": problem.name, "category": problem.category, "dtype": dtype, "system": name,
           "gpu": system.gpu.name, "gpus": system.gpus, "domain_gpus": system.domain_gpus, "traffic": traffic,
           "modelled": True, "assumptions": _assumptions(system, traffic, size)}
    cost, reason = _cost_at(module, system.gpus, size, dtype)
    rate = flops_dtype(dtype)
    if not reason and traffic is None and system.nic:
        reason = "no traffic pattern in the problem's META['traffic'], needed across NVLink domains"
    if not reason and rate is None and cost["flops"] > 0:
        reason = f"dtype {dtype!r} has no FLOP rate in pkit.roofline, but the cost declares FLOPs"
    if reason:
        return {**row, "evaluable": False, "not_evaluable": reason}
    return {**row, **project_cost(cost, system, traffic, rate), "evaluable": True, "not_evaluable": ""}


def project(problems: Iterable[str] | str | None = None, systems: Mapping[str, System] | Iterable[str] = SYSTEMS,
            size: str = "large", dtype: str | None = "bfloat16") -> pd.DataFrame:
    """Modelled (never measured) roofline of every problem on every system: one row per (problem, system), columns
    `COLUMNS`, costs per GPU, times in microseconds, `modelled` True on every row. A row the model cannot evaluate
    has evaluable False, the reason in `not_evaluable` and no numbers.

    problems: names (folder, META name or number; None: every problem in problems/); systems: a mapping name →
    System or names from `SYSTEMS`; size: the problems' size name, strong-scaled to each system's GPU count;
    dtype: run each problem in this dtype where it supports it, else in its first dtype (None: always its first).
    """
    if not isinstance(size, str):
        raise ValueError(f"size: expected a size name such as 'large', got {size!r}")
    wanted = None if dtype is None else dtype_name(dtype)
    chosen, systems = _problems(problems), _systems(systems)
    rows = []
    for problem in chosen:
        module = _module(problem)
        d = wanted if wanted in problem.dtypes else problem.dtypes[0]
        rows += [_row(problem, module, name, system, size, d) for name, system in systems.items()]
    return pd.DataFrame(rows, columns=list(COLUMNS)).astype({"evaluable": bool, "modelled": bool})


def summary(frame: pd.DataFrame, common: bool = False) -> pd.DataFrame:
    """Per system of a `project` frame, ordered by GPU count: problems evaluated and not, and the share of the
    evaluated ones bound by each term (`share_<bound>`, plus share_link_or_network). common: count only problems
    evaluable on every system in the frame, so the shares compare the same set (shares are NaN where a system
    has no problem to count). Modelled, like its input.

    >>> frame = pd.DataFrame({"problem": ["a", "b", "a", "b"], "system": ["s8", "s8", "s576", "s576"],
    ...                       "gpu": "B200", "gpus": [8, 8, 576, 576], "domain_gpus": 8,
    ...                       "bound": ["compute", "link", "network", None], "evaluable": [True, True, True, False]})
    >>> summary(frame)[["system", "evaluated", "not_evaluable", "share_link_or_network"]]
      system  evaluated  not_evaluable  share_link_or_network
    0     s8          2              0                    0.5
    1   s576          1              1                    1.0
    >>> summary(frame, common=True)[["system", "evaluated", "share_compute"]]
      system  evaluated  share_compute
    0     s8          1            1.0
    1   s576          1            0.0
    """
    if not isinstance(frame, pd.DataFrame):
        raise ValueError(f"frame: expected a project() DataFrame, got {type(frame).__name__}")
    missing = {"problem", "system", "gpu", "gpus", "domain_gpus", "bound", "evaluable"} - set(frame.columns)
    if missing:
        raise ValueError(f"frame: expected a project() frame; missing columns {sorted(missing)}")
    systems = frame.drop_duplicates("system").set_index("system")[["gpu", "gpus", "domain_gpus"]]
    evaluable = frame["evaluable"].astype(bool)
    if common:
        everywhere = evaluable.groupby(frame["problem"]).all()
        kept = frame["problem"].isin(everywhere[everywhere].index)
        frame, evaluable = frame[kept], evaluable[kept]
    done = frame[evaluable]
    shares = (pd.crosstab(done["system"], done["bound"], normalize="index")
              .reindex(columns=list(BOUNDS), fill_value=0.0).reindex(systems.index))  # NaN: nothing evaluated
    out = systems.assign(
        evaluated=evaluable.groupby(frame["system"]).sum().reindex(systems.index, fill_value=0),
        not_evaluable=(~evaluable).groupby(frame["system"]).sum().reindex(systems.index, fill_value=0),
        **{f"share_{b}": shares[b] for b in BOUNDS}, share_link_or_network=shares["link"] + shares["network"],
        modelled=True)
    return out.reset_index().sort_values("gpus", kind="stable", ignore_index=True)
