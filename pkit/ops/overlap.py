"""Tensor-parallel GEMMs with communication hidden under compute, over a one-process Team: all-gather + GEMM
(`AllGatherGemm`), GEMM + reduce-scatter and GEMM + all-reduce (`PartialGemm`). Each schedule is a method of its op;
the registry of patterns and schedules is `pkit.ops.overlap_patterns`.

Every rank r holds A_r, its M/n rows of the tokens (M × K over the team), and B_r, its N_local × K shard of the
weight (nn.Linear layout); it computes out_r = [A_0; …; A_{n−1}] · B_rᵀ, M × N_local, bf16 with fp32
accumulation. `AllGatherGemm` owns the buffers: write A_r into `shard(r)` and B_r into `weight(r)`, call
`run(schedule)`, read `out(r)`. Schedules (one line each in `list_schedules()`):

  serial     NCCL all-gather, then one cuBLAS GEMM (torch.matmul): the PyTorch baseline
  ce_chunks  peers' rows come by copy engine in chunks on a side stream; a cuBLAS GEMM per chunk as it lands,
             ordered by events (no SM spends time on communication)
  ce_flags   the same copies, each followed by a flag write (a stream memory operation); one pkit GEMM over
             all rows whose producer waits for each chunk's flag (pkit/kernels/gemm.cu, RowsReady)
  tma_pull   no copy: the pkit GEMM reads each rank's rows where they lie, its producers fetching peers' tiles over
             NVLink by TMA (the intra-SM fused way; link bytes grow with N_local / 256)
  sm_pull    `comm_sms` SMs run pull_rows (pkit/kernels/overlap.cu), which copies the peers' rows chunk by
             chunk, all its blocks on each chunk, and releases each chunk's flag; the pkit GEMM runs on the
             other SMs

Each run enqueues on CuPy's current stream of every GPU and returns; `team.synchronize()` waits. Every rank
starts with its own rows, so the first chunks travel while they are multiplied.

Example:
    >>> import pkit; from pkit.ops.overlap import AllGatherGemm                          # doctest: +SKIP
    >>> team = pkit.Team(pkit.team.team_devices())  # every GPU here, one rank each            # doctest: +SKIP
    >>> op = AllGatherGemm(team, m=8192, k=8192, n_local=4096)                                # doctest: +SKIP
    >>> op.run("ce_flags"); op.team.synchronize()                                          # doctest: +SKIP
"""
from __future__ import annotations

from contextlib import contextmanager
from functools import cached_property, lru_cache

import numpy as np

from ..gpus import on_device as _on
from ..gpus import torch_stream as _torch_stream
from ..kernel_args import KernelArgs
from ..launch import THREADS
from .gemm import BLOCK_M, a_sources, gemm, tile_targets
from .overlap_patterns import PATTERNS, Pattern

PULL_ROWS = KernelArgs("PullRows", (("gathered", "ptr"), ("ready", "ptr"), ("arrivals", "ptr"),
                                    ("chunk16", "u64"), ("chunks_per_rank", "i32"), ("epoch", "u32"),
                                    ("rank", "i32"), ("size", "i32")))
CHUNK_ROWS = 1024  # rows per copy and per ready flag (a multiple of the GEMM's 128-row tile)


class _OnTeam:
    """What every overlap op shares: a one-process Team, positive shape arguments, NCCL on the team, and `run`."""

    pattern = ""  # its key in pkit.ops.overlap_patterns.PATTERNS

    def __init__(self, team, **dims: int):
        if team.rank is not None:
            raise ValueError("team: expected a one-process Team (pkit.Team([...])); the schedules drive every GPU")
        for name, value in dims.items():
            if not (isinstance(value, (int, np.integer)) and value > 0):
                raise ValueError(f"{name}: expected a positive integer, got {value!r}")
        self.team = team
        self.working = range(team.size)  # the ranks whose work runs: all (an emulation runs one, with stand-in peers)

    def run(self, schedule: str, **options) -> None:
        """Schedule `schedule` (one of PATTERNS[self.pattern].names) once, e.g. run("sm_pull", comm_sms=16)."""
        PATTERNS[self.pattern].schedule(schedule)  # a ValueError naming the pattern's schedules if it has none such
        getattr(self, schedule)(**options)

    @cached_property
    def _nccl(self):
        from .baselines import NcclCollectives

        return NcclCollectives(self.team)


class AllGatherGemm(_OnTeam):
    """Buffers and schedules of out_r = all-gathered A · B_rᵀ on a one-process Team."""

    pattern = "ag_gemm"

    def __init__(self, team, m: int, k: int, n_local: int, chunk_rows: int = CHUNK_ROWS):
        super().__init__(team, m=m, k=k, n_local=n_local, chunk_rows=chunk_rows)
        if m % (team.size * chunk_rows) or chunk_rows % BLOCK_M:
            raise ValueError(f"m, chunk_rows: expected m to split into {team.size} shards of whole chunks and "
                             f"chunk_rows a multiple of {BLOCK_M}; got m={m}, chunk_rows={chunk_rows}")
        if k % 8 or n_local % 8:
            raise ValueError(f"k, n_local: expected multiples of 8 (TMA moves rows in 16-byte units), got {k} and "
                             f"{n_local}")
        self.m, self.k, self.n_local, self.chunk_rows = m, k, n_local, chunk_rows
        self.gathered = team.zeros((m, k), "bfloat16")
        self.weights = team.zeros((n_local, k), "bfloat16")
        self.outputs = team.zeros((m, n_local), "bfloat16")
        self.ready = team.zeros((m // chunk_rows,), "uint32")
        self.arrivals = team.zeros((m // chunk_rows,), "uint32")  # pull_rows' blocks done per chunk
        self._epoch = 0
        # torch views per rank, made once (DLPack on every call would cost host time inside timed schedules)
        self._a = [self.gathered.torch(r) for r in range(team.size)]
        self._b = [self.weights.torch(r) for r in range(team.size)]
        self._c = [self.outputs.torch(r) for r in range(team.size)]

    @property
    def shard_rows(self) -> int:
        return self.m // self.team.size

    def shard(self, rank: int):
        """Rank `rank`'s own rows of A (a torch view into its gathered buffer): write A_r here."""
        return self._a[rank][rank * self.shard_rows:(rank + 1) * self.shard_rows]

    def weight(self, rank: int):
        """Rank `rank`'s N_local × K weight shard B_r (a torch view)."""
        return self._b[rank]

    def out(self, rank: int):
        """Rank `rank`'s M × N_local output (a torch view)."""
        return self._c[rank]

    # --- the schedules -------------------------------------------------------------------------------

    def serial(self) -> None:
        team = self.team
        self._collective()
        for r in self.working:
            with _torch_stream(team.devices[r]):
                _matmul(self._a[r], self.weight(r), self.out(r))

    def _collective(self) -> None:
        """The serial schedule's collective: NCCL's all-gather, in place."""
        self._nccl.all_gather_in_place(self.gathered)

    def ce_chunks(self, timeline: list | None = None) -> None:
        """`timeline`: a list that gets (rank, "copy" or "gemm", first row, start event, end event) per chunk."""
        import cupy as cp

        team, stamp = self.team, _Stamps(timeline)
        with self._exchange() as side:
            for r in self.working:
                with _torch_stream(team.devices[r]), stamp(r, "gemm", r * self.shard_rows):
                    self._matmul_rows(r, r * self.shard_rows, self.shard_rows)
            for r in self.working:
                for q, row in self._peer_chunks(r):
                    with cp.cuda.Device(team.devices[r]):
                        with stamp(r, "copy", row, side[r]):
                            self._copy_rows(r, q, row, side[r])
                        landed = cp.cuda.Event(disable_timing=True)
                        landed.record(side[r])
                        cp.cuda.get_current_stream().wait_event(landed)
                        with _torch_stream(team.devices[r]), stamp(r, "gemm", row):
                            self._matmul_rows(r, row, self.chunk_rows)

    def ce_flags(self) -> None:
        import cupy as cp

        team, epoch = self.team, self._next_epoch()
        with self._exchange() as side:
            for r in self.working:
                with cp.cuda.Device(team.devices[r]):
                    main = cp.cuda.get_current_stream()
                    for row in range(r * self.shard_rows, (r + 1) * self.shard_rows, self.chunk_rows):
                        self._write_flag(r, row, epoch, main)
                    self._gemm(r, epoch)
            for r in self.working:
                for q, row in self._peer_chunks(r):
                    self._copy_rows(r, q, row, side[r])
                    self._write_flag(r, row, epoch, side[r])

    def sm_pull(self, comm_sms: int = 16) -> None:
        import cupy as cp

        import pkit

        team, epoch = self.team, self._next_epoch()
        sms = min(pkit.devices()[d].sms for d in team.devices)
        if not (isinstance(comm_sms, (int, np.integer)) and 1 <= comm_sms < sms):
            raise ValueError(f"comm_sms: expected an integer in [1, {sms - 1}], got {comm_sms!r}")
        kernel = _pull_kernel()
        with self._exchange() as side:
            for r in self.working:
                call = PULL_ROWS.pack(gathered=self.gathered.table(r).data.ptr, ready=self.ready.address(r),
                                      arrivals=self.arrivals.address(r),
                                      chunk16=self.chunk_rows * self.k * 2 // 16,
                                      chunks_per_rank=self.shard_rows // self.chunk_rows, epoch=epoch, rank=r,
                                      size=team.size)
                kernel((comm_sms,), (THREADS,), (call,), device=team.devices[r], stream=side[r])
                with cp.cuda.Device(team.devices[r]):
                    self._gemm(r, epoch, blocks=sms - comm_sms)

    def tma_pull(self) -> None:
        """No copy at all: each GPU's pkit GEMM reads every rank's rows where they lie (its own, and its peers' over
        NVLink by TMA), as its producers stream A. Every column tile re-reads its rows, so link bytes grow with
        N_local / 256: the schedule for narrow weight shards."""
        import cupy as cp

        team, rows = self.team, self.shard_rows
        team.meet()  # every rank's shard is in place before anyone reads it
        for r in self.working:
            sources = tuple((self.gathered.addresses[r][q] + q * rows * self.k * 2, rows) for q in range(team.size))
            with cp.cuda.Device(team.devices[r]):
                gemm(self._a[r], self.weight(r), self.out(r), a_from=a_sources(sources, self.k, rows))
        team.meet()  # no rank overwrites its shard while a peer may still read it

    # --- pieces --------------------------------------------------------------------------------------

    @cached_property
    def _side(self) -> list:
        import cupy as cp

        return [_on(d, lambda: cp.cuda.Stream(non_blocking=True)) for d in self.team.devices]

    @contextmanager
    def _exchange(self):
        """Side streams that start when every rank's inputs are ready (its current stream's work so far), and
        current streams that end only when every rank's side stream is done (no rank overwrites rows a peer is
        still reading)."""
        self.team.fork(self._side)
        yield self._side
        self.team.join(self._side)

    def _peer_chunks(self, rank: int):
        """(peer, first row) of every chunk rank `rank` receives, next rank first (the GEMM's order)."""
        n = self.team.size
        for step in range(1, n):
            q = (rank + step) % n
            for row in range(q * self.shard_rows, (q + 1) * self.shard_rows, self.chunk_rows):
                yield q, row

    def _copy_rows(self, rank: int, peer: int, row: int, stream) -> None:
        """Copy engine: chunk_rows rows of `peer`'s shard, from `row`, into rank's gathered A (on `stream`)."""
        import cupy as cp

        offset, nbytes = row * self.k * 2, self.chunk_rows * self.k * 2
        with cp.cuda.Device(self.team.devices[rank]):
            cp.cuda.runtime.memcpyPeerAsync(self.gathered.address(rank) + offset, self.team.devices[rank],
                                            self.gathered.address(peer) + offset, self.team.devices[peer], nbytes,
                                            stream.ptr)

    def _write_flag(self, rank: int, row: int, epoch: int, stream) -> None:
        """Set the ready flag of the chunk holding `row` on rank's GPU to `epoch`, in `stream` order (after the
        stream's earlier work, with a memory barrier)."""
        import cupy as cp

        from ..driver import stream_write_value32

        with cp.cuda.Device(self.team.devices[rank]):
            stream_write_value32(stream.ptr, self.ready.address(rank) + 4 * (row // self.chunk_rows), epoch)

    def _gemm(self, rank: int, epoch: int, blocks: int | None = None) -> None:
        gemm(self._a[rank], self.weight(rank), self.out(rank), blocks=blocks,
             ready=self.ready.address(rank), epoch=epoch, rows_per_flag=self.chunk_rows,
             first_row=rank * self.shard_rows)

    def _matmul_rows(self, rank: int, row: int, rows: int) -> None:
        _matmul(self._a[rank][row:row + rows], self.weight(rank), self.out(rank)[row:row + rows])

    def _next_epoch(self) -> int:
        from .collectives import next_epoch

        self._epoch = next_epoch(self._epoch)
        return self._epoch


class PartialGemm(_OnTeam):
    """GEMM + reduce-scatter and GEMM + all-reduce: K-sharded operands, partial products summed across ranks.

    Rank r holds A_r (M × K/n, its slice of the activations' K) and B_r (N × K/n); the partial products
    P_r = A_r · B_rᵀ sum to A · Bᵀ. `scatter=True` (GEMM+RS): rank r's output is rows [r·M/n, (r+1)·M/n) of the
    sum (M/n × N); `scatter=False` (GEMM+AR): every rank's output is the whole sum (M × N). Write `lhs(r)` and
    `weight(r)`, call `run(schedule)` ("serial" or "tma_add", PATTERNS["gemm_rs"].names), read `out(r)`.
    """

    def __init__(self, team, m: int, k_local: int, n: int, scatter: bool):
        super().__init__(team, m=m, k_local=k_local, n=n)
        if scatter and m % (team.size * BLOCK_M):
            raise ValueError(f"m: expected {team.size} shards of whole {BLOCK_M}-row tiles, got m={m}")
        if k_local % 8 or n % 8:
            raise ValueError(f"k_local, n: expected multiples of 8, got {k_local} and {n}")
        self.m, self.k_local, self.n, self.scatter = m, k_local, n, scatter
        self.out_rows = m // team.size if scatter else m
        self.lhs_buffers = team.zeros((m, k_local), "bfloat16")
        self.weights = team.zeros((n, k_local), "bfloat16")
        self.partials = team.zeros((m, n), "bfloat16")  # the serial schedule's P_r
        self.outputs = team.zeros((self.out_rows, n), "bfloat16")
        self._a = [self.lhs_buffers.torch(r) for r in range(team.size)]
        self._b = [self.weights.torch(r) for r in range(team.size)]
        self._p = [self.partials.torch(r) for r in range(team.size)]
        self._c = [self.outputs.torch(r) for r in range(team.size)]

    @property
    def pattern(self) -> str:
        return "gemm_rs" if self.scatter else "gemm_ar"

    def lhs(self, rank: int):
        """A_r, rank `rank`'s M × K/n slice of the activations (a torch view)."""
        return self._a[rank]

    def weight(self, rank: int):
        """B_r, rank `rank`'s N × K/n slice of the weight (a torch view)."""
        return self._b[rank]

    def out(self, rank: int):
        return self._c[rank]

    def serial(self) -> None:
        """cuBLAS partial products, then NCCL's reduce-scatter or all-reduce (bf16), the pattern's `nccl_op`."""
        for r in self.working:
            with _torch_stream(self.team.devices[r]):
                _matmul(self._a[r], self._b[r], self._p[r])
        self._collective()

    def _collective(self) -> None:
        """The serial schedule's collective: NCCL's reduce-scatter or all-reduce of the partials."""
        getattr(self._nccl, PATTERNS[self.pattern].nccl_op)(self.outputs, self.partials)

    def tma_add(self) -> None:
        """Every rank's outputs zeroed; each GPU's pkit GEMM adds its tiles into the owners' outputs (its own and
        its peers', over NVLink) from its epilogue: no partial product is stored, no separate collective runs."""
        import cupy as cp

        team = self.team
        for r in self.working:
            with _torch_stream(team.devices[r]):
                self._c[r].zero_()
        team.meet()  # no GPU adds into an output its owner is still zeroing or reading
        for r in self.working:
            targets = tile_targets([(self.outputs.addresses[r][q], self.out_rows) for q in range(team.size)],
                                   self.n, rows_per_target=self.out_rows if self.scatter else 0)
            with cp.cuda.Device(team.devices[r]):
                gemm(self._a[r], self._b[r], add_into=targets)
        team.meet()  # no owner reads its output before every rank's adds


class _Stamps:
    """CUDA events around pieces of a schedule, appended to `timeline` (nothing is recorded when it is None)."""

    def __init__(self, timeline: list | None):
        self.timeline = timeline

    @contextmanager
    def __call__(self, rank: int, kind: str, row: int, stream=None):
        """Events on `stream` (default: the current stream) before and after the block."""
        import cupy as cp

        if self.timeline is None:
            yield
            return
        stream = stream or cp.cuda.get_current_stream()
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record(stream)
        yield
        end.record(stream)
        self.timeline.append((rank, kind, row, start, end))


def _matmul(a, b, out) -> None:
    import torch

    torch.matmul(a, b.T, out=out)


@lru_cache(maxsize=None)
def _pull_kernel():
    import pkit

    return pkit.compile("overlap.cu", "pull_rows")


def op_class(pattern: Pattern) -> type:
    """The op class that runs `pattern`'s schedules (its `op_class`: AllGatherGemm or PartialGemm)."""
    return {"AllGatherGemm": AllGatherGemm, "PartialGemm": PartialGemm}[pattern.op_class]


def make(pattern: Pattern, team, **shape):
    """`pattern`'s op on `team` at `shape` (the op class's own arguments, e.g. m, k, n_local)."""
    return op_class(pattern)(team, **shape, **pattern.op_options)


def list_schedules():
    """The schedules of every pattern (pkit.ops.overlap_patterns) as a DataFrame: pattern, name, description,
    sms_for_communication, gemm (the GEMM it runs) and options (what a sweep times it over by default).

    >>> list_schedules()[["pattern", "name", "gemm"]].values.tolist()[:2]
    [['ag_gemm', 'serial', 'cublas'], ['ag_gemm', 'ce_chunks', 'cublas']]
    """
    import pandas as pd

    return pd.DataFrame([{"pattern": p.name, "name": s.name, "description": s.description,
                          "sms_for_communication": s.communication, "gemm": s.gemm,
                          "options": ", ".join(f"{k}={list(v)}" for k, v in s.options.items())}
                         for p in PATTERNS.values() for s in p.schedules])
