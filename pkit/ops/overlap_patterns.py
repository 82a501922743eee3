"""The overlap patterns and their schedules, in one registry.

A pattern is a tensor-parallel GEMM paired with a collective: all-gather + GEMM (`ag_gemm`), GEMM + reduce-scatter
(`gemm_rs`), GEMM + all-reduce (`gemm_ar`). Its entry says which op class runs it (`pkit.ops.overlap`), its per-GPU
roofline cost (`pkit.roofline`), which dimension its sweep varies, the NCCL collective it overlaps and PyTorch's
fused op for it. Each schedule says the GEMM it runs, what moves its bytes, the SMs it spends on communication,
the options a sweep times it over, and how figures draw it. A schedule is a method of the op class, of the same
name.

The op classes, the overlap study (`pkit.experiments.overlap`), its figures (`pkit.figures`) and the tests read
this registry; docs/overlap.md says how to add a schedule.

Example:
    >>> from pkit.ops.overlap_patterns import PATTERNS, gemm_of
    >>> PATTERNS["ag_gemm"].names == tuple(s.name for s in PATTERNS["ag_gemm"].schedules)  # serial first
    True
    >>> PATTERNS["gemm_rs"].nccl_op, gemm_of("ce_chunks"), gemm_of("tma_add")
    ('reduce_scatter', 'cublas', 'pkit_gemm')
    >>> PATTERNS["ag_gemm"].schedule("sm_pull").variants(comm_sms=[8, 16])
    [{'comm_sms': 8}, {'comm_sms': 16}]
    >>> PATTERNS["gemm_ar"].schedule("tma_add").structure
    Structure(overlap='fused', gemm_calls='one', moves='tiles_to_owners', hbm_per_link_byte=2.0)
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Callable, Mapping

from ..roofline import ag_gemm_cost, gemm_ar_cost, gemm_rs_cost

GEMMS = ("pkit_gemm", "cublas")
"""The GEMMs a schedule runs: pkit's (pkit.ops.gemm, which waits on ready flags) and cuBLAS (torch.matmul)."""


@dataclass(frozen=True)
class Look:
    """How figures draw a schedule: `hue`, a colour of pkit's palette by name (`pkit.figures.HUES`), a matplotlib
    `marker`, and a dashed line or not."""

    hue: str
    marker: str
    dashed: bool = False


OVERLAPS = ("none", "chunks", "fused")
"""How a schedule overlaps its communication with its GEMM: 'none' (the collective, then the GEMM), 'chunks' (the
bytes move in chunks beside the GEMM, which takes each chunk as it lands or each output chunk as it is done),
'fused' (the GEMM's own loads or stores move the bytes, tile by tile, as it multiplies)."""

MOVES = ("collective", "rows_per_column_tile", "tiles_to_owners")
"""What a schedule moves over each GPU's link: 'collective' (the pattern's collective: its bus factor, CollectiveOp's,
times its bytes), 'rows_per_column_tile' (every column tile of the GEMM loads the peers' rows again: the gathered
bytes times ⌈N_local / BLOCK_N⌉), 'tiles_to_owners' (every output tile added into each owner's output that is not
this GPU's: (W − 1)/W of the output for a scatter, W − 1 times the output where every rank owns all of it)."""


@dataclass(frozen=True)
class Structure:
    """A schedule's structure, as the overlap model (pkit.experiments.overlap.model) reads it: what overlaps what
    (`overlap`, one of OVERLAPS), whether its GEMM runs as one call or one call per chunk (`gemm_calls`: 'one',
    'per_chunk'), what it moves (`moves`, one of MOVES) and the bytes of this GPU's HBM each byte over its link costs
    (`hbm_per_link_byte`: 2 where what arrives is written to HBM and what leaves is read from it; 1 where one side
    stays in shared memory). Its chunks (the op's `chunk_rows` for 'chunks', the GEMM's tile waves for 'fused'), the
    SMs it takes (its `communication` option) and its GEMM (`gemm`) are the schedule's own fields."""

    overlap: str
    gemm_calls: str
    moves: str
    hbm_per_link_byte: float = 2.0

    def __post_init__(self):
        for name, value, known in (("overlap", self.overlap, OVERLAPS), ("gemm_calls", self.gemm_calls,
                                   ("one", "per_chunk")), ("moves", self.moves, MOVES)):
            if value not in known:
                raise ValueError(f"{name}: expected one of {list(known)}, got {value!r}")


SERIAL = Structure("none", "one", "collective")
CHUNKS = Structure("chunks", "one", "collective")


@dataclass(frozen=True)
class Schedule:
    """One way to run a pattern: `name` (its op's method, and the schedule column of recorded rows), a one-line
    `description`, the GEMM it runs (`gemm`, one of GEMMS), what moves its bytes (`transfer`: a peer mechanism of
    pkit.ops.transfers, 'nccl' for NCCL's collective, '' where PyTorch chooses), the SMs it spends on communication
    ('none', "NCCL's", "PyTorch's", or the option that sets them), `options` (each option it takes → the values a
    sweep times by default) and its legend words and `look`; a schedule named after the transfer mechanism it uses
    (sm_pull, tma_pull) has neither and is drawn as that mechanism."""

    name: str
    description: str
    gemm: str
    transfer: str
    communication: str = "none"
    options: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    label: str = ""
    look: Look | None = None
    structure: Structure | None = None

    @property
    def sms_option(self) -> str:
        """The option that sets the SMs it takes from the GEMM ('' for none)."""
        return self.communication if self.communication in self.options else ""

    def variants(self, **values) -> list[dict]:
        """The option sets a sweep times: every combination of its options' values, `values` (option name → values)
        replacing the defaults of the options it names; [{}] for a schedule without options."""
        grids = [values.get(name, default) for name, default in self.options.items()]
        return [dict(zip(self.options, (int(v) for v in point))) for point in itertools.product(*grids)]


@dataclass(frozen=True)
class Pattern:
    """A tensor-parallel GEMM with its collective: `name`, `title` (figures' words), `op_class` (its op in
    pkit.ops.overlap) and `op_options` (given to it besides the shape), `cost(m, k, n, gpus)` (per-GPU roofline
    cost, pkit.roofline), `sharded` (the GEMM dimension the weights are split along: 'n', each GPU holds N_local =
    n columns; 'k', each GPU holds K_local = k / gpus), `swept` (what its sweep varies, as figures label the axis),
    `nccl_op` (the collective its serial schedule runs and the others overlap), `torch_fused` (PyTorch's fused op,
    '' for none), its `schedules`, serial first, and `flow`: 'in' where bytes arrive and are then multiplied (each
    GPU's own rows first), 'out' where products are computed and then leave."""

    name: str
    title: str
    op_class: str
    cost: Callable[..., dict]
    sharded: str
    swept: str
    nccl_op: str
    torch_fused: str
    schedules: tuple[Schedule, ...]
    op_options: Mapping[str, object] = field(default_factory=dict)
    flow: str = "in"

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.schedules)

    def schedule(self, name: str) -> Schedule:
        """The schedule called `name`, or a ValueError naming the pattern's schedules."""
        for s in self.schedules:
            if s.name == name:
                return s
        raise ValueError(f"schedule: expected one of {list(self.names)} ({self.name}), got {name!r}")

    def flops(self, m: int, k: int, n: int, gpus: int) -> float:
        """The GEMM's FLOPs per GPU of one call at the shape of a recorded row (m, k, n as `cost` takes them):
        2·m·k·n, K split over the GPUs where the weights are K-sharded (the reduction's additions, which `cost`
        also counts, are not GEMM work)."""
        return 2.0 * m * (k // gpus if self.sharded == "k" else k) * n

    def inner(self, frame):
        """The swept size of each row of a sweep's frame (columns n, k, gpus): N_local or K_local."""
        return frame["n"] if self.sharded == "n" else frame["k"] // frame["gpus"]


_SERIAL = dict(gemm="cublas", transfer="nccl", communication="NCCL's", label="serial (NCCL + cuBLAS)",
               look=Look("black", "o"), structure=SERIAL)


def _partial_schedules(collective: str) -> tuple[Schedule, ...]:
    """GEMM+RS's and GEMM+AR's schedules (PartialGemm's), `collective` the one serial runs, in words."""
    return (Schedule("serial", f"cuBLAS partial products, then NCCL {collective}", **_SERIAL),
            Schedule("tma_add", "the pkit GEMM's epilogue adds each tile into its owners' outputs (TMA reduce, NVLink)",
                     "pkit_gemm", "tma_push", label="TMA reduce-add", look=Look("green", "^"),
                     structure=Structure("fused", "one", "tiles_to_owners")))


PATTERNS: dict[str, Pattern] = {p.name: p for p in (
    Pattern("ag_gemm", "all-gather + GEMM", "AllGatherGemm", ag_gemm_cost, "n",
            "N_local (columns of each GPU's weight shard)", "all_gather", "fused_all_gather_matmul", (
                Schedule("serial", "NCCL all-gather, then one cuBLAS GEMM", **_SERIAL),
                Schedule("ce_chunks", "copy-engine chunks on a side stream, a cuBLAS GEMM per chunk as it lands",
                         "cublas", "ce", label="copy engine, chunked", look=Look("orange", "P"),
                         structure=Structure("chunks", "per_chunk", "collective")),
                Schedule("ce_flags", "copy-engine chunks each followed by a flag; one pkit GEMM waits per chunk",
                         "pkit_gemm", "ce", label="copy engine + flags", look=Look("vermillion", "X"), structure=CHUNKS),
                Schedule("sm_pull", "comm_sms SMs pull peers' chunks and flag them; the pkit GEMM on the other SMs",
                         "pkit_gemm", "sm_pull", "comm_sms", {"comm_sms": (16,)}, structure=CHUNKS),
                Schedule("tma_pull", "no copy: the pkit GEMM's producers read peers' rows over NVLink as they "
                         "multiply them", "pkit_gemm", "tma_pull",
                         structure=Structure("fused", "one", "rows_per_column_tile", hbm_per_link_byte=1.0)))),
    Pattern("gemm_rs", "GEMM + reduce-scatter", "PartialGemm", gemm_rs_cost, "k", "K_local (each GPU's slice of K)",
            "reduce_scatter", "fused_matmul_reduce_scatter", _partial_schedules("reduce-scatter"), {"scatter": True},
            "out"),
    Pattern("gemm_ar", "GEMM + all-reduce", "PartialGemm", gemm_ar_cost, "k", "K_local (each GPU's slice of K)",
            "all_reduce", "", _partial_schedules("all-reduce"), {"scatter": False}, "out"),
)}
"""Every overlap pattern by name, in the order studies and figures show them."""

TORCH = (
    Schedule("torch_serial", "PyTorch: the NCCL collective, then torch.matmul, one process per GPU", "cublas",
             "nccl", "NCCL's", label="PyTorch serial (NCCL + matmul)", look=Look("grey", "x", dashed=True)),
    Schedule("torch_async_tp", "PyTorch's fused op on symmetric memory (async TP), one process per GPU", "cublas",
             "", "PyTorch's", label="PyTorch async-TP (fused, symm. memory)", look=Look("wine", "<", dashed=True)),
)
"""PyTorch's schedules of the patterns it fuses (`torch_fused`), run by pkit.experiments.overlap.pytorch."""

OPTIONS = tuple(dict.fromkeys(o for p in PATTERNS.values() for s in p.schedules for o in s.options))
"""Every option a schedule takes, in registry order: a column of each recorded row (0 where a schedule has none)."""


def schedules() -> dict[str, Schedule]:
    """Every schedule by name, each once (pkit's in pattern order, then PyTorch's); a name shared by patterns
    names one schedule (the same GEMM, words and look), its first entry."""
    first: dict[str, Schedule] = {}
    for s in [s for p in PATTERNS.values() for s in p.schedules] + list(TORCH):
        first.setdefault(s.name, s)
    return first


def gemm_of(schedule: str) -> str:
    """The GEMM `schedule` runs (one of GEMMS): cuBLAS for serial and ce_chunks, pkit's for the fused ones."""
    every = schedules()
    if schedule not in every:
        raise ValueError(f"schedule: expected one of {list(every)}, got {schedule!r}")
    return every[schedule].gemm
