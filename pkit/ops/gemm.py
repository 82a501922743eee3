"""pkit's Hopper GEMM (pkit/kernels/gemm.cu): C = A · Bᵀ in bf16 with fp32 accumulation, TMA loads and wgmma.

A is M × K, B is N × K (K-contiguous, the layout of an nn.Linear weight), C is M × N; all row-major bf16 torch
tensors on one GPU, N a multiple of 8 (C's rows are written by TMA in 16-byte units). Tiles that do not divide
the shape are handled (TMA reads zeros past the edges and drops what falls outside C). It is the compute half of
pkit's overlap schedules, and its rate is compared with cuBLAS's in the overlap study.

Example:
    >>> import torch; from pkit.ops.gemm import gemm                                    # doctest: +SKIP
    >>> a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)                 # doctest: +SKIP
    >>> b = torch.randn(4096, 8192, device="cuda", dtype=torch.bfloat16)                 # doctest: +SKIP
    >>> c = gemm(a, b)   # ≈ a @ b.T                                                      # doctest: +SKIP
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..driver import TENSOR_MAP_BYTES, encode_tiled_bf16
from ..kernel_args import KernelArgs, packed

BLOCK_M, BLOCK_N, BLOCK_K = 128, 256, 64  # tile of C per block, K slice per stage (gemm.cu)
THREADS = 384  # a producer warpgroup and two consumer warpgroups
SMEM_BYTES = 230464  # gemm.cu kSmemBytes: 4 stages of A and B slices, 2 epilogue boxes, mbarriers, alignment
MAX_TARGETS = 8  # gemm.cu kMaxTargets
EPILOGUE_BOX = 64  # rows and columns of the epilogue's TMA boxes
TENSOR_MAP = np.dtype([("opaque", np.uint64, (TENSOR_MAP_BYTES // 8,))])  # CUtensorMap, passed by value


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


@lru_cache(maxsize=None)
def _kernel():
    import pkit

    return pkit.compile("gemm.cu", "gemm_bf16_tn")


def tensor_map(tensor, box_rows: int, box_cols: int):
    """The TMA descriptor of a row-major bf16 matrix, read in boxes of box_rows × box_cols (128-byte swizzle:
    box_cols × 2 bytes must be 128), as one kernel argument."""
    rows, cols = tensor.shape
    return _encoded(tensor.data_ptr(), rows, cols, box_rows, box_cols)


@lru_cache(maxsize=256)
def _encoded(address: int, rows: int, cols: int, box_rows: int, box_cols: int):
    """tensor_map's descriptor, encoded once per (address, shape, box): it holds no more than these."""
    return packed(encode_tiled_bf16(address, rows, cols, box_rows, box_cols))


def _maps(dtype: np.dtype, entries, cols: int, box_rows: int, box_cols: int, arg: str) -> np.ndarray:
    """A one-element struct of `dtype` whose maps describe `entries`, (device address, rows) pairs of row-major
    bf16 tensors of `cols` columns that TMA reaches in box_rows × box_cols boxes (`arg` names them in errors);
    the caller fills its ints."""
    if not 1 <= len(entries) <= MAX_TARGETS:
        raise ValueError(f"{arg}: expected 1 to {MAX_TARGETS} (address, rows) pairs, got {len(entries)}")
    struct = np.zeros(1, dtype=dtype)
    for q, (address, rows) in enumerate(entries):
        if address % 16:
            raise ValueError(f"{arg}: address {address:#x} is not 16-byte aligned (TMA reaches it)")
        struct["maps"][0, q] = np.frombuffer(_encoded(address, rows, cols, box_rows, box_cols).raw,
                                             dtype=TENSOR_MAP)[0]
    return struct


def _check(a, b, out) -> tuple[int, int, int]:
    """(M, N, K) of C = A · Bᵀ, or a ValueError naming the argument at fault."""
    import torch

    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, torch.Tensor) or t.dtype != torch.bfloat16 or t.dim() != 2 or not t.is_cuda:
            raise ValueError(f"{name}: expected a 2-D bfloat16 CUDA tensor, got {getattr(t, 'dtype', type(t))} "
                             f"of shape {tuple(getattr(t, 'shape', ()))}")
        if not t.is_contiguous() or t.data_ptr() % 16:
            raise ValueError(f"{name}: expected a contiguous tensor starting at a 16-byte boundary (TMA reads it)")
    (m, k), (n, kb) = a.shape, b.shape
    if kb != k or k % 8 or k == 0:
        raise ValueError(f"b: expected N × K with K = {k} (a's columns), a positive multiple of 8; got {tuple(b.shape)}")
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
def a_sources(sources: tuple[tuple[int, int], ...], k: int, rows_per_source: int = 1 << 30):
    """gemm.cu's ASources: rows of A from `sources`, (device address, rows) pairs of row-major bf16 tensors of `k`
    columns (a peer's address as this GPU sees it is fine); source q holds rows from q · rows_per_source.
    One source (the default rows_per_source covers every row) is a plain GEMM's A."""
    if rows_per_source <= 0 or rows_per_source % BLOCK_M:
        raise ValueError(f"rows_per_source: expected a positive multiple of {BLOCK_M}, got {rows_per_source}")
    struct = _maps(A_SOURCES, sources, k, BLOCK_M, BLOCK_K, "sources")
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


def gemm(a, b, out=None, *, blocks: int | None = None, ready: int = 0, epoch: int = 1, rows_per_flag: int = BLOCK_M,
         first_row: int = 0, add_into=None, a_from=None):
    """C = A · Bᵀ (bf16, fp32 accumulation) on A's GPU, enqueued on CuPy's current stream there (as every pkit op;
    by default that is the legacy stream torch uses too); returns C.

    `blocks`: persistent blocks (default one per SM, at most one per tile); fewer leave SMs to other kernels.
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
    tiles = -(-m // BLOCK_M) * -(-n // BLOCK_N)
    sms = pkit.devices()[a.device.index].sms
    if blocks is not None and not (isinstance(blocks, (int, np.integer)) and 1 <= blocks <= sms):
        raise ValueError(f"blocks: expected an integer in [1, {sms}] (one block per SM at most), got {blocks!r}")
    if ready and (rows_per_flag <= 0 or rows_per_flag % BLOCK_M or not 0 <= first_row < max(m, 1)):
        raise ValueError(f"rows_per_flag, first_row: expected a positive multiple of {BLOCK_M} and a row of A, "
                         f"got {rows_per_flag} and {first_row}")
    if out is None and add_into is None:
        out = torch.empty((m, n), dtype=torch.bfloat16, device=a.device)
    if m == 0 or n == 0:
        return out
    rows = ROWS_READY.pack(ready=ready, epoch=epoch, rows_per_flag=rows_per_flag,
                           first_row_tile=first_row // BLOCK_M)
    _kernel()((min(tiles, blocks or sms),), (THREADS,),
              (a_sources(((a.data_ptr(), m),), k) if a_from is None else a_from,
               tensor_map(b, BLOCK_N, BLOCK_K), np.int32(m), np.int32(n), np.int32(k), rows,
               tile_targets(((out.data_ptr(), m),), n, add=False) if add_into is None else add_into),
              shared_mem=SMEM_BYTES, device=a.device.index)
    return out
