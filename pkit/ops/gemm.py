"""pkit's Hopper GEMM (pkit/kernels/gemm.cu): C = A · Bᵀ with fp32 accumulation and a bf16 C, TMA loads and wgmma;
A and B in bf16, or in FP8 e4m3 with per-tensor scales (C = scale_a · scale_b · A · Bᵀ, as torch._scaled_mm).

A is M × K, B is N × K (K-contiguous, the layout of an nn.Linear weight), C is M × N; all row-major torch tensors on
one GPU, N a multiple of 8 (C's rows are written by TMA in 16-byte units). Tiles that do not divide the shape are
handled (TMA reads zeros past the edges and drops what falls outside C). It is the compute half of pkit's overlap
schedules, and its rate is compared with cuBLAS's in the overlap study.

How the work is cut is a `Plan` (pkit.ops.gemm_plans: tile shape, split-K, pipeline depth, cluster), chosen by
`plan` from the shape and the SMs unless `how=` names one.

Example:
    >>> import torch                                                                        # doctest: +SKIP
    >>> a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)                 # doctest: +SKIP
    >>> b = torch.randn(4096, 8192, device="cuda", dtype=torch.bfloat16)                 # doctest: +SKIP
    >>> c = gemm(a, b)   # ≈ a @ b.T                                                      # doctest: +SKIP
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import replace
from functools import lru_cache

import numpy as np

from ..driver import TENSOR_MAP_BYTES, encode_tiled
from ..kernel_args import KernelArgs, packed
from .gemm_plans import A_BOX_ROWS, BLOCK_M, EPILOGUE_BOX, MAX_SPLITS, SLICE_BYTES, VARIANTS, Plan, plan, smem_bytes

GEMM_THREADS = 384  # a producer warpgroup and two consumer warpgroups
MAX_TARGETS = 8  # gemm.cu kMaxTargets
TENSOR_MAP = np.dtype([("opaque", np.uint64, (TENSOR_MAP_BYTES // 8,))])  # CUtensorMap, passed by value
DTYPES = {"bfloat16": "Bf16", "float8_e4m3fn": "E4m3"}  # torch dtype name → gemm.cu's input type
ITEMSIZES = {"bfloat16": 2, "float8_e4m3fn": 1}  # bytes per input element of each of DTYPES


def _map_struct(*ints: str) -> np.dtype:
    """MAX_TARGETS tensor maps (64-byte aligned: the struct pads to a multiple of 64), then int32 fields."""
    return np.dtype({"names": ["maps", *ints], "formats": [(TENSOR_MAP, (MAX_TARGETS,))] + [np.int32] * len(ints),
                     "offsets": [0] + [MAX_TARGETS * 128 + 4 * i for i in range(len(ints))], "itemsize": 1088})


# gemm.cu's ASources (tensor maps of row blocks of A) and TileTargets (tensor maps the epilogue stores or adds
# into), each with its ints after the maps; tests compile the *_ASSERTS against the kernel.
A_SOURCES = _map_struct("rows_per_source", "count")
A_SOURCES_ASSERTS = ("static_assert(sizeof(ASources) == 1088, \"ASources size\");\n"
                     "static_assert(__builtin_offsetof(ASources, count) == 1028, \"ASources::count\");")
TILE_TARGETS = _map_struct("count", "rows_per_target", "add")
TILE_TARGETS_ASSERTS = ("static_assert(sizeof(TileTargets) == 1088, \"TileTargets size\");\n"
                        "static_assert(__builtin_offsetof(TileTargets, count) == 1024, \"TileTargets::count\");\n"
                        "static_assert(__builtin_offsetof(TileTargets, rows_per_target) == 1028, \"rows_per_target\");\n"
                        "static_assert(__builtin_offsetof(TileTargets, add) == 1032, \"TileTargets::add\");")
# gemm.cu's RowsReady: uint32 flags saying which rows of A are in place (ready = 0: all of A at launch).
ROWS_READY = KernelArgs("RowsReady", (("ready", "ptr"), ("epoch", "u32"), ("rows_per_flag", "i32"),
                                      ("first_row_tile", "i32")))
# gemm.cu's Work: split-K's workspace (fp32 tile sums, per-tile arrival counts) and FP8's scales (0: none).
WORK = KernelArgs("Work", (("partials", "ptr"), ("arrivals", "ptr"), ("scale_a", "ptr"), ("scale_b", "ptr"),
                           ("splits", "i32"), ("whole_tiles", "i32")))


@lru_cache(maxsize=None)
def _kernel(how: Plan, dtype: str):
    import pkit

    return pkit.compile("gemm.cu", kernel_name(how, dtype))


def kernel_name(how: Plan, dtype: str = "bfloat16") -> str:
    """gemm.cu's kernel that runs plan `how` (its splits aside) on inputs of `dtype` (a key of DTYPES), as a name
    expression: gemm_tn (blocks alone), gemm_tn_pair (pairs sharing B), gemm_tn_pair_a (sharing A), and with
    alternate tiles gemm_tn_alternate, gemm_tn_alternate_pair_a, or for 64-row tiles gemm_tn_alternate_short and
    gemm_tn_alternate_short_pair (pairs sharing B).

    >>> kernel_name(Plan(256, 1))
    'gemm_tn<256, 4, pkit::Bf16>'
    >>> kernel_name(Plan(128, 1, 8, 2, alternate=True, rows=64), "float8_e4m3fn")
    'gemm_tn_alternate_short_pair<128, 8, pkit::E4m3>'
    """
    pair = how.cluster > 1
    if how.rows != BLOCK_M:
        kernel = "gemm_tn_alternate_short" + ("_pair" if pair else "")
    elif how.alternate:
        kernel = "gemm_tn_alternate" + ("_pair_a" if how.share_a else "")
    else:
        kernel = "gemm_tn_pair_a" if how.share_a else "gemm_tn_pair" if pair else "gemm_tn"
    return f"{kernel}<{how.block_n}, {how.stages}, pkit::{DTYPES[dtype]}>"


@lru_cache(maxsize=None)
def resident_clusters(how: Plan, dtype: str, device: int) -> int:
    """How many clusters of the kernel of plan `how` and dtype run at once on GPU `device` (one block per SM, each
    with smem_bytes of shared memory; a cluster's blocks share a GPC, so fewer than SMs / cluster may fit)."""
    import cupy as cp
    from cupy_backends.cuda.api import driver

    import pkit

    from ..driver import max_active_clusters

    sms = pkit.devices()[device].sms
    function = _kernel(how, dtype).on(device)
    smem = smem_bytes(how.block_n, how.stages, how.rows)
    with cp.cuda.Device(device):
        driver.funcSetAttribute(function.ptr, driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem)
        return max_active_clusters(function.ptr, sms // how.cluster * how.cluster, GEMM_THREADS, smem)


def tensor_map(tensor, box_rows: int, box_cols: int):
    """The TMA descriptor of a row-major bf16 or FP8 matrix, read in boxes of box_rows × box_cols (128-byte
    swizzle: box_cols × its element size must be 128), as one kernel argument."""
    rows, cols = tensor.shape
    return _encoded(tensor.data_ptr(), rows, cols, box_rows, box_cols, tensor.element_size())


@lru_cache(maxsize=256)
def _encoded(address: int, rows: int, cols: int, box_rows: int, box_cols: int, itemsize: int = 2):
    """tensor_map's descriptor, encoded once per (address, shape, box, element size): it holds no more than these."""
    return packed(encode_tiled(address, rows, cols, box_rows, box_cols, itemsize))


def _maps(dtype: np.dtype, entries, cols: int, box_rows: int, box_cols: int, arg: str, itemsize: int = 2):
    """A one-element struct of `dtype` whose maps describe `entries`, (device address, rows) pairs of row-major
    tensors of `cols` columns of `itemsize`-byte elements that TMA reaches in box_rows × box_cols boxes (`arg`
    names them in errors); the caller fills its ints."""
    if not 1 <= len(entries) <= MAX_TARGETS:
        raise ValueError(f"{arg}: expected 1 to {MAX_TARGETS} (address, rows) pairs, got {len(entries)}")
    struct = np.zeros(1, dtype=dtype)
    for q, (address, rows) in enumerate(entries):
        if address % 16:
            raise ValueError(f"{arg}: address {address:#x} is not 16-byte aligned (TMA reaches it)")
        struct["maps"][0, q] = np.frombuffer(_encoded(address, rows, cols, box_rows, box_cols, itemsize).raw,
                                             dtype=TENSOR_MAP)[0]
    return struct


def _check(a, b, out) -> tuple[int, int, int]:
    """(M, N, K) of C = A · Bᵀ, or a ValueError naming the argument at fault."""
    import torch

    for name, t in (("a", a), ("b", b)):
        if (not isinstance(t, torch.Tensor) or str(t.dtype).removeprefix("torch.") not in DTYPES or t.dim() != 2
                or not t.is_cuda):
            raise ValueError(f"{name}: expected a 2-D bfloat16 or float8_e4m3fn CUDA tensor, got "
                             f"{getattr(t, 'dtype', type(t))} of shape {tuple(getattr(t, 'shape', ()))}")
        if not t.is_contiguous() or t.data_ptr() % 16:
            raise ValueError(f"{name}: expected a contiguous tensor starting at a 16-byte boundary (TMA reads it)")
    if b.dtype != a.dtype:
        raise ValueError(f"b: expected {a.dtype} as a is, got {b.dtype}")
    (m, k), (n, kb) = a.shape, b.shape
    align = 16 // a.element_size()
    if kb != k or k % align or k == 0:
        raise ValueError(f"b: expected N × K with K = {k} (a's columns), a positive multiple of {align}; got "
                         f"{tuple(b.shape)}")
    if n % 8:
        raise ValueError(f"b: expected a number of rows N that is a multiple of 8 (TMA writes C's rows in 16-byte "
                         f"units), got {n}")
    if b.device != a.device:
        raise ValueError(f"b: expected a tensor on {a.device}, got {b.device}")
    if out is not None and (out.shape != (m, n) or out.dtype != torch.bfloat16 or out.device != a.device
                            or not out.is_contiguous()):
        raise ValueError(f"out: expected a contiguous {m} × {n} bfloat16 tensor on {a.device}")
    return m, n, k


@lru_cache(maxsize=256)
def a_sources(sources: tuple[tuple[int, int], ...], k: int, rows_per_source: int = 1 << 30, itemsize: int = 2):
    """gemm.cu's ASources: rows of A from `sources`, (device address, rows) pairs of row-major tensors of `k`
    columns of `itemsize`-byte elements (a peer's address as this GPU sees it is fine); source q holds rows from
    q · rows_per_source. One source (the default rows_per_source covers every row) is a plain GEMM's A."""
    if rows_per_source <= 0 or rows_per_source % BLOCK_M:
        raise ValueError(f"rows_per_source: expected a positive multiple of {BLOCK_M}, got {rows_per_source}")
    struct = _maps(A_SOURCES, sources, k, A_BOX_ROWS, SLICE_BYTES // itemsize, "sources", itemsize)
    struct["rows_per_source"], struct["count"] = rows_per_source, len(sources)
    return packed(struct.tobytes())


def tile_targets(targets, n: int, rows_per_target: int = 0, *, add: bool = True):
    """gemm.cu's TileTargets for bf16 tensors of `n` columns given as (device address, rows) pairs (a peer's
    address as this GPU sees it is fine): tiles are added into all of them (`add=False`: stored), or with
    `rows_per_target` > 0 row r into target r // rows_per_target at row r % rows_per_target."""
    return _tile_targets(tuple(tuple(t) for t in targets), n, rows_per_target, add)


@lru_cache(maxsize=256)
def _tile_targets(targets: tuple[tuple[int, int], ...], n: int, rows_per_target: int, add: bool):
    """tile_targets, packed once per distinct set of targets (schedules pass the same ones call after call)."""
    if rows_per_target < 0 or rows_per_target % BLOCK_M:
        raise ValueError(f"rows_per_target: expected 0 or a positive multiple of {BLOCK_M}, got {rows_per_target}")
    struct = _maps(TILE_TARGETS, targets, n, EPILOGUE_BOX, EPILOGUE_BOX, "targets")
    struct["count"], struct["rows_per_target"], struct["add"] = len(targets), rows_per_target, add
    return packed(struct.tobytes())


_WORKSPACES: OrderedDict[tuple[int, int], tuple] = OrderedDict()
_KEPT_WORKSPACES = 8  # streams whose workspaces are kept, most recently used first


def _workspace(device: int, stream: int, partial_bytes: int, counts: int) -> tuple[int, int]:
    """(partials, arrivals) device addresses of split-K's workspace for GEMMs on `stream` of `device`: at least
    `partial_bytes` for the units' fp32 partials (each written before it is read) and `counts` zeroed uint32
    arrival counts (the kernel leaves them zero). One per stream, so GEMMs on concurrent streams never share one;
    it grows and is kept for the most recent _KEPT_WORKSPACES streams. Allocated in the stream's order by torch's
    caching allocator, a workspace let go is handed to no other stream, nor reused on its own before the work
    queued there is done; nothing waits."""
    import torch

    from ..gpus import torch_stream

    key = (device, stream)
    partials, arrivals = _WORKSPACES.pop(key, (None, None))
    while len(_WORKSPACES) >= _KEPT_WORKSPACES:
        _WORKSPACES.popitem(last=False)
    with torch_stream(device):  # allocated in that stream's order: let go, no other stream gets them until it is done
        if partials is None or partials.numel() * 4 < partial_bytes:
            partials = torch.empty(max(partial_bytes // 4, 1), dtype=torch.float32, device=device)
        if arrivals is None or arrivals.numel() < counts:
            arrivals = torch.zeros(max(counts, 1), dtype=torch.int32, device=device)
    _WORKSPACES[key] = (partials, arrivals)
    return partials.data_ptr(), arrivals.data_ptr()


def _scale_address(scale, name: str, device) -> int:
    """The device address of a one-element float32 scale tensor on `device` (FP8's scale_a or scale_b)."""
    import torch

    if not (isinstance(scale, torch.Tensor) and scale.dtype == torch.float32 and scale.numel() == 1
            and scale.device == device):
        raise ValueError(f"{name}: expected a one-element float32 tensor on {device}, got "
                         f"{getattr(scale, 'dtype', type(scale))} of shape {tuple(getattr(scale, 'shape', ()))}")
    return scale.data_ptr()


def _check_options(dtype: str, scale_a, scale_b, blocks, sms: int) -> None:
    """`gemm`'s scales (both for float8_e4m3fn inputs, neither for bfloat16) and `blocks` (at most one per SM of
    `sms`), else a ValueError naming them."""
    fp8 = dtype != "bfloat16"
    if fp8 != (scale_a is not None) or fp8 != (scale_b is not None):
        raise ValueError(f"scale_a, scale_b: expected both for float8_e4m3fn inputs and neither for bfloat16, got "
                         f"{dtype} with scale_a={'a tensor' if scale_a is not None else None}, "
                         f"scale_b={'a tensor' if scale_b is not None else None}")
    if blocks is not None and not (isinstance(blocks, (int, np.integer)) and 1 <= blocks <= sms):
        raise ValueError(f"blocks: expected an integer in [1, {sms}] (one block per SM at most), got {blocks!r}")


def _checked_plan(how: Plan) -> Plan:
    """`how` if it names one of gemm.cu's kernels (VARIANTS) and a split count gemm runs with it, else a ValueError
    naming it."""
    kernel = (how.block_n, how.stages, how.cluster, how.alternate, how.share_a, how.rows)
    if kernel not in VARIANTS or not 1 <= how.splits <= (1 if how.alternate else MAX_SPLITS) or (
            how.split_tail and how.alternate):
        raise ValueError(f"how: expected a Plan whose (block_n, stages, cluster, alternate, share_a, rows) is one of "
                         f"{VARIANTS}, "
                         f"with splits in [1, {MAX_SPLITS}] (1 and no split tail with alternate tiles), got {how}")
    return how


def _work(how: Plan, m: int, n: int, grid: int, device: int, scale_a: int, scale_b: int):
    """gemm.cu's Work for `how` on `grid` blocks: the split units' workspace (on the current stream's) and the
    whole tiles before them (a split tail's whole waves), and FP8's scale addresses (0: none)."""
    import cupy as cp

    whole = how.whole_tiles(m, n, grid // how.cluster)
    split_units = how.units(m, n, grid // how.cluster) - whole * how.cluster  # in blocks' tiles
    partials = arrivals = 0
    if how.splits > 1 and split_units:
        with cp.cuda.Device(device):
            stream = cp.cuda.get_current_stream().ptr
        partials, arrivals = _workspace(device, stream, split_units * BLOCK_M * how.block_n * 4,
                                        2 * split_units // how.splits)
    return WORK.pack(partials=partials, arrivals=arrivals, splits=how.splits, whole_tiles=whole,
                     scale_a=scale_a, scale_b=scale_b)


def launch_blocks(how: Plan, m: int, n: int, blocks: int, dtype: str, device: int) -> int:
    """The persistent blocks `gemm` launches for an M × N output under `how` on at most `blocks` SMs of GPU
    `device`: one per unit of work at most, whole clusters, no more clusters than run at once (resident_clusters).
    A split-tail plan's whole waves are counted on those clusters."""
    clusters = blocks // how.cluster
    if how.cluster > 1:
        clusters = min(clusters, resident_clusters(_kernel_plan(how), dtype, device))
    if clusters < 1:
        raise ValueError(f"blocks: expected at least {how.cluster} for a plan in clusters of {how.cluster}, "
                         f"got {blocks}")
    return min(how.units(m, n, clusters) // how.cluster, clusters) * how.cluster


def _kernel_plan(how: Plan) -> Plan:
    """`how` as the kernel that runs it is keyed: its splits and split tail are arguments, not kernels."""
    return replace(how, splits=1, split_tail=False)


def gemm(a, b, out=None, *, blocks: int | None = None, ready: int = 0, epoch: int = 1, rows_per_flag: int = BLOCK_M,
         first_row: int = 0, add_into=None, a_from=None, scale_a=None, scale_b=None, how: Plan | None = None):
    """C = A · Bᵀ (fp32 accumulation, bf16 C) on A's GPU, enqueued on CuPy's current stream there (as every pkit
    op; by default that is the legacy stream torch uses too); returns C. A and B are bf16, or float8_e4m3fn with
    `scale_a` and `scale_b` (one-element float32 tensors: C = scale_a · scale_b · A · Bᵀ, as torch._scaled_mm).

    `blocks`: persistent blocks (default one per SM, at most one per unit of work); fewer leave SMs to other
    kernels. `how`: the Plan (tile width, split-K; default `plan` for the shape on those blocks).
    Overlap schedules pass `ready`, the device address of uint32 flags: rows r.. of A are read only once
    flag r // rows_per_flag reaches `epoch` (a multiple of 128 rows per flag), and row tiles are taken starting
    with the one holding `first_row` (rows this GPU already has). A flag that never comes raises
    pkit.PeerTimeout at the next synchronize.
    `add_into` (`tile_targets(...)`): instead of storing C, add its tiles into those tensors (TMA reduce-add;
    the epilogue of GEMM + reduce-scatter and GEMM + all-reduce); `out` is then left untouched.
    `a_from` (`a_sources(...)`): read A's rows from those tensors (a peer's too) instead of from `a`, which then
    only gives the shape: the fused all-gather.
    """
    import torch

    import pkit

    m, n, k = _check(a, b, out)
    dtype = str(a.dtype).removeprefix("torch.")
    fp8 = dtype != "bfloat16"
    sms = pkit.devices()[a.device.index].sms
    _check_options(dtype, scale_a, scale_b, blocks, sms)
    if ready and (rows_per_flag <= 0 or rows_per_flag % BLOCK_M or not 0 <= first_row < max(m, 1)):
        raise ValueError(f"rows_per_flag, first_row: expected a positive multiple of {BLOCK_M} and a row of A, "
                         f"got {rows_per_flag} and {first_row}")
    how = _checked_plan(how or plan(m, n, k, blocks or sms, a.element_size()))
    if out is None and add_into is None:
        out = torch.empty((m, n), dtype=torch.bfloat16, device=a.device)
    if m == 0 or n == 0:
        return out
    device = a.device.index
    grid = launch_blocks(how, m, n, blocks or sms, dtype, device)
    work = _work(how, m, n, grid, device,
                 _scale_address(scale_a, "scale_a", a.device) if fp8 else 0,
                 _scale_address(scale_b, "scale_b", a.device) if fp8 else 0)
    rows = ROWS_READY.pack(ready=ready, epoch=epoch, rows_per_flag=rows_per_flag,
                           first_row_tile=first_row // BLOCK_M)  # in 128-row tiles, whatever the plan's rows
    row_elements = SLICE_BYTES // a.element_size()
    _kernel(_kernel_plan(how), dtype)((grid,), (GEMM_THREADS,),
                                (a_sources(((a.data_ptr(), m),), k, itemsize=a.element_size()) if a_from is None
                                 else a_from,
                                 tensor_map(b, how.block_n if how.share_a else how.block_n // how.cluster,
                                            row_elements), np.int32(m), np.int32(n),
                                 np.int32(k), rows,
                                 tile_targets(((out.data_ptr(), m),), n, add=False) if add_into is None else add_into,
                                 work),
                                shared_mem=smem_bytes(how.block_n, how.stages, how.rows), device=device)
    return out
