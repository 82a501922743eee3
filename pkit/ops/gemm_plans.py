"""How pkit's GEMM (pkit.ops.gemm, pkit/kernels/gemm.cu) cuts its work: the `Plan` (the tile's width and rows, split-K,
the pipeline's depth, the cluster: blocks alone, pairs sharing B's loads or A's, consumers sharing a tile or taking
alternate ones), the kernels there are (VARIANTS) and their shared memory, and `plan`, which picks for a shape and a
number of SMs the plan of least estimated time under a `PlanRule` fitted to a recorded sweep of plans.

Split-K cuts each tile's K into `splits` units that leave their fp32 partials in slots in L2, the last one adding
them up and writing the tile; it is for shapes with fewer tiles than SMs.

Example:
    >>> plan(8192, 8192, 8192, sms=132).splits   # plenty of tiles: no split
    1
    >>> plan(1024, 256, 8192, sms=132).splits > 1  # 16 tiles at most for 132 SMs: K is split
    True
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

BLOCK_M, BLOCK_K = 128, 64  # rows of a tile of C; bf16 elements of a K slice (128 bytes; FP8: 128 elements)
TILE_WIDTHS = (256, 128, 64)  # columns of a tile of C (gemm.cu's BN), widest first
BLOCK_N = TILE_WIDTHS[0]
STAGE_COUNTS = {256: (4, 3), 128: (6,), 64: (8,)}  # gemm.cu's stage counts S for each tile width, deepest first
CLUSTER_SIZES = (1, 2)  # blocks per cluster: gemm.cu's gemm_tn (alone), gemm_tn_pair and gemm_tn_pair_a (pairs)
A_BOX_ROWS = 64  # gemm.cu kABoxRows: A is read in boxes of this many rows (an A-sharing pair's block loads one)
ALTERNATE_WIDTHS = (128,)  # tile widths of gemm.cu's gemm_tn_alternate: a whole tile's accumulator in one warpgroup
SHORT_ROWS = 64  # rows of gemm.cu's short tiles (gemm_tn_alternate_short*: alternate tiles of one accumulator each)
SHORT_STAGE_COUNTS = {128: (8,)}  # their stage counts for each tile width
VARIANTS = tuple((width, stages, cluster, False, False, BLOCK_M) for width, counts in STAGE_COUNTS.items()
                 for stages in counts for cluster in CLUSTER_SIZES) + tuple(
    (width, stages, 2, False, True, BLOCK_M) for width, counts in STAGE_COUNTS.items() for stages in counts) + tuple(
    (width, stages, cluster, True, cluster > 1, BLOCK_M) for width in ALTERNATE_WIDTHS
    for stages in STAGE_COUNTS[width] for cluster in CLUSTER_SIZES) + tuple(
    (width, stages, cluster, True, False, SHORT_ROWS) for width, counts in SHORT_STAGE_COUNTS.items()
    for stages in counts for cluster in CLUSTER_SIZES
)  # gemm.cu's kernels: (tile width, stages, blocks per cluster, consumers on alternate tiles, pairs sharing A, rows)
MAX_SPLITS = 16  # the most units one tile's K is cut into
TAIL_WIDTHS = (256,)  # tile widths offered with a split tail (Plan.split_tail): 128-wide plans with a tail ran far
# slower than the widest tiles at every shape that had one in a diagnostic on an H100, and each costs the sweep time
SLICE_BYTES = 128  # bytes of a row of A or B in one K slice: one TMA box row, the 128-byte swizzle's span
_SMEM_LIMIT = 232448  # gemm.cu kSmemLimit: the most dynamic shared memory a Hopper block may have (227 KiB)
_SMEM_FIXED = 1024 + 256  # gemm.cu kFixedBytes: alignment, mbarriers
EPILOGUE_BOX = 64  # rows and columns of the epilogue's TMA boxes
_BOX_BYTES = EPILOGUE_BOX * EPILOGUE_BOX * 2  # gemm.cu kBoxBytes: one bf16 box


def boxes(block_n: int, stages: int, rows: int = BLOCK_M) -> int:
    """Epilogue boxes per consumer of a block with tiles `rows` × `block_n` and `stages` stages: as many as fit
    beside the stages, up to block_n / 64 (gemm.cu Shape::kBoxes)."""
    spare = (_SMEM_LIMIT - _SMEM_FIXED - stages * (rows + block_n) * SLICE_BYTES) // (2 * _BOX_BYTES)
    return min(spare, block_n // EPILOGUE_BOX)


def smem_bytes(block_n: int, stages: int, rows: int = BLOCK_M) -> int:
    """Dynamic shared memory of a block with tiles `rows` × `block_n` and `stages` stages (gemm.cu
    Shape::kSmemBytes)."""
    return stages * (rows + block_n) * SLICE_BYTES + 2 * boxes(block_n, stages, rows) * _BOX_BYTES + _SMEM_FIXED


SHAPE_ASSERTS = "\n".join(f"static_assert(Shape<{w}, {s}, {r}>::kSmemBytes == {smem_bytes(w, s, r)}, "
                          f"\"smem_bytes({w}, {s}, {r})\");" for w, s, *_, r in VARIANTS)


@dataclass(frozen=True)
class Plan:
    """How a GEMM's work is cut: tiles of C `block_n` columns wide and `rows` rows (BLOCK_M; SHORT_ROWS for
    alternate tiles of one accumulator each), each tile's K in `splits`
    units (split-K; 1: none), through `stages` shared-memory stages (0: the deepest of STAGE_COUNTS[block_n];
    fewer leave room for an outbox as wide as the tile, so its epilogue never waits), run by blocks in clusters
    of `cluster` (CLUSTER_SIZES): a pair takes two tiles above each other and loads each slice of B once for both,
    or with `share_a` two tiles beside each other, loading each slice of A once for both.
    With `alternate` (ALTERNATE_WIDTHS, no split-K, blocks alone or pairs sharing A) a block's two consumers take
    alternate tiles and turns at the tensor cores, one writing its tile while the other multiplies.
    With `split_tail` only the tiles of the last, partial wave are cut into `splits` units (the whole waves before
    it run a tile a unit), so that they fill the SMs the wave would leave idle."""

    block_n: int
    splits: int
    stages: int = 0
    cluster: int = 1
    alternate: bool = False
    share_a: bool = False
    rows: int = BLOCK_M
    split_tail: bool = False

    def __post_init__(self):
        counts = STAGE_COUNTS if self.rows == BLOCK_M else SHORT_STAGE_COUNTS
        if not self.stages and self.block_n in counts:
            object.__setattr__(self, "stages", counts[self.block_n][0])

    def tiles(self, m: int, n: int) -> int:
        """Tiles of C the blocks take, counting, where the cluster does not divide the row tiles (column tiles, for
        pairs sharing A), the ones past the last that a cluster's last block takes to keep its partner's loads in
        step (it writes nothing)."""
        rows, cols = math.ceil(m / self.rows), math.ceil(n / self.block_n)
        if self.share_a:
            return rows * math.ceil(cols / self.cluster) * self.cluster
        return math.ceil(rows / self.cluster) * self.cluster * cols

    def whole_tiles(self, m: int, n: int, clusters: int | None = None) -> int:
        """Cluster tiles run a unit each before the split ones, on `clusters` clusters at once (split_tail: the
        whole waves; else none, every tile cut into `splits` units)."""
        if not self.split_tail:
            return 0
        if clusters is None or clusters < 1:
            raise ValueError(f"clusters: expected the clusters that run at once for a split-tail plan, got {clusters}")
        tiles = self.tiles(m, n) // self.cluster
        return tiles - tiles % clusters if tiles > clusters else 0

    def units(self, m: int, n: int, clusters: int | None = None) -> int:
        """Units of work in blocks' tiles (a cluster's unit counted once per block), on `clusters` clusters at once
        (needed with split_tail)."""
        whole = self.whole_tiles(m, n, clusters)
        return (whole + (self.tiles(m, n) // self.cluster - whole) * self.splits) * self.cluster

    def waves(self, m: int, n: int, clusters: int) -> tuple[int, int]:
        """(whole waves, rounds of split units) of the work on `clusters` clusters at once: a split tail's waves of
        a unit a tile, then its tail's units; without a split tail no whole waves and every unit in rounds."""
        whole = self.whole_tiles(m, n, clusters)
        return whole // clusters, math.ceil((self.units(m, n, clusters) // self.cluster - whole) / clusters)


@dataclass(frozen=True)
class PlanRule:
    """plan's estimate of a plan's time, in the time a block takes over one K slice of a 128 × 256 tile in the
    deepest pipeline: the waves of units over the SMs times each unit's K slices plus `unit_overhead` slices
    (filling the pipeline, writing the tile), a slice of a 128-wide tile costing `narrow_slice` of a 256-wide one,
    of a 64-wide tile `slim_slice`, of a 64-row tile `short_slice` of a 128-row one, and a slice of a shallower
    pipeline `shallow_slice` of a deep one; a unit whose outbox is narrower than its tile also costs
    `waiting_epilogue` slices (it waits for its boxes to drain); with split-K each unit costs
    `split_overhead` slices per split (its fp32 partial left in L2, the last unit reading the others' back); a
    slice of a block in a pair costs `paired_slice` of one alone (B's loads shared; `shared_a_slice` in a pair
    sharing A's), and pairs fill the SMs in twos;
    a block whose consumers take alternate tiles pays `alternate_overhead` slices a unit instead of unit_overhead
    (one's epilogue runs under the other's products); a split-tail plan's whole waves cost their share of the SMs'
    time (the tail's units fill the SMs they leave) and each unit of its tail `tail_overhead` slices more.
    The defaults count MMA work and bytes alone, but for slim_slice and short_slice, which stay at a whole slice
    (64-wide and 64-row tiles never favoured), and tail_overhead, infinite (split tails never chosen), until a sweep
    that ran them is fitted;
    `pkit.experiments.overlap.gemm.fit_plan_rule` fits them to a recorded plan sweep, and `plan` uses the fit
    shipped in pkit/data/gemm_plan_rule.json."""

    narrow_slice: float = 0.5
    unit_overhead: float = 2.0
    slim_slice: float = 1.0
    short_slice: float = 1.0
    split_overhead: float = (BLOCK_M * 128 * 4) / ((BLOCK_M + 128) * SLICE_BYTES)  # partial bytes / slice bytes
    shallow_slice: float = 1.0
    waiting_epilogue: float = 0.0
    paired_slice: float = 1.0
    shared_a_slice: float = 1.0
    alternate_overhead: float = 2.0
    tail_overhead: float = math.inf

    def width_slice(self, block_n: int) -> float:
        """A K slice of a tile `block_n` wide, in slices of the widest (TILE_WIDTHS)."""
        return {TILE_WIDTHS[0]: 1.0, 128: self.narrow_slice, 64: self.slim_slice}[block_n]

    def slice_cost(self, how: "Plan") -> float:
        """One K slice of a unit of `how` against one of a 128 × 256 tile alone in the deepest pipeline, but for its
        width (`width_slice`): its depth, its cluster and its rows."""
        shallow = how.rows == BLOCK_M and how.stages < STAGE_COUNTS[how.block_n][0]
        paired = 1.0 if how.cluster == 1 else self.shared_a_slice if how.share_a else self.paired_slice
        return (self.shallow_slice if shallow else 1.0) * paired * (1.0 if how.rows == BLOCK_M else self.short_slice)

    def unit_cost(self, how: "Plan", k_slices: int, splits: int) -> float:
        """The estimated time of one unit of `how` over k_slices K slices cut into `splits`, in slices of the widest
        tile's."""
        per_unit = math.ceil(k_slices / splits) * self.slice_cost(how) + (
            self.alternate_overhead if how.alternate else self.unit_overhead)
        if boxes(how.block_n, how.stages, how.rows) < how.block_n // EPILOGUE_BOX:
            per_unit += self.waiting_epilogue
        if splits > 1:
            per_unit += self.split_overhead * splits + (self.tail_overhead if how.split_tail else 0.0)
        return per_unit * self.width_slice(how.block_n)

    def cost(self, how: "Plan", m: int, n: int, k_slices: int, sms: int) -> float:
        """The estimated time of `how` for an M × N output over k_slices K slices on `sms` blocks: its whole tiles'
        share of the clusters' time, then the rounds of its split units."""
        whole, rounds = how.waves(m, n, sms // how.cluster)
        cost = whole * self.unit_cost(how, k_slices, 1) if whole else 0.0
        return cost + (rounds * self.unit_cost(how, k_slices, how.splits) if rounds else 0.0)


RULE_FILE = Path(__file__).resolve().parents[1] / "data" / "gemm_plan_rule.json"


@lru_cache(maxsize=1)
def plan_rule() -> PlanRule:
    """The fitted rule (RULE_FILE, written by `python -m pkit.experiments.overlap.gemm fit`), else the defaults."""
    if not RULE_FILE.exists():
        return PlanRule()
    return PlanRule(**json.loads(RULE_FILE.read_text())["rule"])


def k_slices(k: int, itemsize: int = 2) -> int:
    """The K slices (SLICE_BYTES of each row) a GEMM of `itemsize`-byte inputs runs over, at least one."""
    return max(1, math.ceil(k / (SLICE_BYTES // itemsize)))


def cheapest(options, m: int, n: int, slices: int, sms: int, rule: PlanRule) -> Plan:
    """Of the plans `options`, the one with the least estimated time under `rule` for an M × N output over `slices`
    K slices on `sms` blocks: ties go to taller tiles, wider tiles, fewer splits, deeper pipelines, blocks alone,
    pairs sharing B and consumers sharing tiles."""
    return min(options, key=lambda p: (rule.cost(p, m, n, slices, sms), -p.rows, -p.block_n, p.splits, -p.stages,
                                       p.cluster, p.share_a, p.alternate))


def plan_options(m: int, n: int, k: int, sms: int, itemsize: int = 2, splits=range(1, MAX_SPLITS + 1)) -> list[Plan]:
    """The plans `plan` chooses among for an M × N × K GEMM of `itemsize`-byte inputs on `sms` blocks: every kernel
    variant (VARIANTS; pairs where there are two blocks) with each of `splits` up to the K slices; split-K only
    while the units stay within two per SM (it is for shapes with few tiles, and its workspace holds a partial per
    unit), and never with alternate tiles; and where the tiles leave a last wave partial, the deepest 128-row
    tiles of each of TAIL_WIDTHS and cluster with that wave split (`split_tail`) into the most of `splits` that fit
    it in one round."""
    slices = k_slices(k, itemsize)
    options = [Plan(w, s, st, c, alt, sa, r) for w, st, c, alt, sa, r in VARIANTS for s in splits
               if c <= sms and s <= slices and (s == 1 or not alt and Plan(w, s, st, c).units(m, n) <= 2 * sms)]
    for width, cluster in ((w, c) for w in TAIL_WIDTHS for c in CLUSTER_SIZES if c <= sms):
        clusters, tailed = sms // cluster, Plan(width, 1, 0, cluster, split_tail=True)
        whole = tailed.whole_tiles(m, n, clusters)
        tail = tailed.tiles(m, n) // cluster - whole if whole else 0
        fits = [s for s in splits if 2 <= s <= min(slices, clusters // tail)] if tail else []
        if fits:
            options.append(Plan(width, max(fits), 0, cluster, split_tail=True))
    return options


@lru_cache(maxsize=4096)
def plan(m: int, n: int, k: int, sms: int, itemsize: int = 2, rule: PlanRule | None = None) -> Plan:
    """The `cheapest` of `plan_options` (under `rule`, default `plan_rule()`) for an M × N × K GEMM of
    `itemsize`-byte inputs (2: bf16, 1: FP8) on `sms` blocks."""
    return cheapest(plan_options(m, n, k, sms, itemsize), m, n, k_slices(k, itemsize), sms, rule or plan_rule())
