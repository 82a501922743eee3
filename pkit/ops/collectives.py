"""Collectives over a `pkit.Team`: all-gather, reduce-scatter, all-reduce (one-shot, two-shot), all-to-all.

Inputs and outputs are SymmetricArrays (float32 or bfloat16 for reductions; any dtype to move). Each call
enqueues one kernel per local GPU on its current stream; `team.synchronize()` waits. Sizes count elements
of the whole collective as nccl-tests does: all-gather's output and reduce-scatter's input hold
`size × share` elements; all-reduce and all-to-all buffers are equal on every rank.

Mechanisms: "sm" (register-level 16-byte loads/stores with in-kernel barriers; any team size, also one
process per GPU) and "ce" (copy engine, `cudaMemcpyPeerAsync` ordered by events; all-gather and
all-to-all, one process driving every GPU). "auto" picks by op and size (see `choose`).

Example:
    >>> import pkit
    >>> from pkit.ops.collectives import Collectives
    >>> team = pkit.Team([0, 1]); coll = Collectives(team)                       # doctest: +SKIP
    >>> x = team.empty((1 << 20,), "bfloat16"); y = team.empty((1 << 20,), "bfloat16")   # doctest: +SKIP
    >>> coll.all_reduce(y, x); team.synchronize()                                 # doctest: +SKIP
"""
from __future__ import annotations

from functools import cached_property

import numpy as np

from ..errors import PkitError

THREADS = 512
MAX_TEAM = 8  # the kernels keep one flag row per rank in registers
REDUCIBLE = {"float32": "f32", "bfloat16": "bf16"}
CE_ALL_TO_ALL_MIN_SHARE = 64 << 20  # "auto" all-to-all: copy engine from this per-rank share up
ONE_SHOT_MAX_BYTES = 256 << 10  # "auto" all-reduce: one shot up to here (and always on 2 GPUs), else two shot


class Collectives:
    """Collective operations on one Team."""

    def __init__(self, team):
        if team.size > MAX_TEAM:
            raise ValueError(f"team: expected at most {MAX_TEAM} GPUs, got {team.size}")
        self.team = team

    @cached_property
    def _module(self):
        import pkit

        return pkit.compile_cubin("collectives.cu")

    def _kernel(self, name: str):
        from ..compiler import Kernel

        return Kernel(self._module, name)

    def _launch(self, name: str, n16: int, args) -> None:
        """Launch on every local rank; `args(rank)` gives the kernel's leading arguments."""
        import pkit
        from ..team import _BARRIER_BLOCKS

        team = self.team
        sms = min(pkit.devices()[team.devices[r]].sms for r in team.local_ranks)
        grid = max(1, min(sms, _BARRIER_BLOCKS, -(-n16 // THREADS)))
        flags = team.barrier_flags
        team.launch(self._kernel(name), (grid,), (THREADS,),
                    lambda r: (*args(r), flags.table(r), np.int32(r), np.int32(team.size)))

    def _check(self, arg: str, array, count: int, dtype: str | None = None) -> None:
        if array.team is not self.team:
            raise ValueError(f"{arg}: expected a SymmetricArray of this team")
        if int(np.prod(array.shape)) != count:
            raise ValueError(f"{arg}: expected {count} elements, got shape {array.shape}")
        if dtype is not None and array.dtype != dtype:
            raise ValueError(f"{arg}: expected dtype {dtype}, got {array.dtype}")

    def _share(self, arg: str, array, total: int) -> int:
        """Bytes of one rank's share, checked to split evenly into 16-byte packs."""
        size = self.team.size
        item = array.storage_dtype.itemsize
        if total % size or (total // size * item) % 16:
            raise ValueError(f"{arg}: {total} elements of {array.dtype} do not split into {size} shares of a "
                             "multiple of 16 bytes; pad the buffer (e.g. to a multiple of "
                             f"{16 // np.gcd(16, item) * size} elements)")
        return total // size * item

    def _suffix(self, array) -> str:
        if array.dtype not in REDUCIBLE:
            raise ValueError(f"dtype: reductions support {sorted(REDUCIBLE)}, got {array.dtype}")
        return REDUCIBLE[array.dtype]

    def all_gather(self, out, inp, mechanism: str = "auto") -> None:
        """out[r] = concatenation over ranks q of inp[q] (inp: one share, out: size × share elements)."""
        share = int(np.prod(inp.shape))
        self._check("out", out, share * self.team.size, inp.dtype)
        nbytes = self._share("out", out, share * self.team.size)
        if choose("all_gather", nbytes, mechanism) == "ce":
            return self._copy_engine(out, inp, nbytes, lambda r, q: (q, 0, r * nbytes))
        self._launch("all_gather", nbytes // 16,
                     lambda r: (self._local(inp, r), out.table(r), np.uint64(nbytes // 16)))

    def all_to_all(self, out, inp, mechanism: str = "auto") -> None:
        """out[r][q-th share] = inp[q][r-th share], equal shares."""
        total = int(np.prod(inp.shape))
        self._check("out", out, total, inp.dtype)
        nbytes = self._share("inp", inp, total)
        if choose("all_to_all", nbytes, mechanism) == "ce":
            return self._copy_engine(out, inp, nbytes, lambda r, q: (q, q * nbytes, r * nbytes))
        self._launch("all_to_all", nbytes // 16,
                     lambda r: (self._local(inp, r), out.table(r), np.uint64(nbytes // 16)))

    def reduce_scatter(self, out, inp, mechanism: str = "auto") -> None:
        """out[r] = sum over ranks q of the r-th share of inp[q] (inp: size × share, out: share)."""
        self._only_sm(mechanism)
        share = int(np.prod(out.shape))
        self._check("inp", inp, share * self.team.size, out.dtype)
        nbytes = self._share("inp", inp, share * self.team.size)
        self._launch(f"reduce_scatter_{self._suffix(inp)}", nbytes // 16,
                     lambda r: (inp.table(r), self._local(out, r), np.uint64(nbytes // 16)))

    def all_reduce(self, out, inp, algorithm: str = "auto", mechanism: str = "auto") -> None:
        """out[r] = sum over ranks q of inp[q]; algorithm 'one_shot', 'two_shot' or 'auto' (by size)."""
        self._only_sm(mechanism)
        total = int(np.prod(inp.shape))
        self._check("out", out, total, inp.dtype)
        suffix = self._suffix(inp)
        nbytes = total * inp.storage_dtype.itemsize
        if algorithm == "auto":
            splits = total % self.team.size == 0 and (total // self.team.size * inp.storage_dtype.itemsize) % 16 == 0
            algorithm = "one_shot" if nbytes <= ONE_SHOT_MAX_BYTES or self.team.size == 2 or not splits else "two_shot"
        if algorithm == "one_shot":
            if nbytes % 16:
                raise ValueError(f"inp: {nbytes} bytes is not a multiple of 16; pad the buffer")
            self._launch(f"all_reduce_one_shot_{suffix}", nbytes // 16,
                         lambda r: (inp.table(r), self._local(out, r), np.uint64(nbytes // 16)))
        elif algorithm == "two_shot":
            share = self._share("inp", inp, total)
            self._launch(f"all_reduce_two_shot_{suffix}", share // 16,
                         lambda r: (inp.table(r), out.table(r), np.uint64(share // 16)))
        else:
            raise ValueError(f"algorithm: expected 'one_shot', 'two_shot' or 'auto', got {algorithm!r}")

    def _local(self, array, rank: int):
        return array[rank] if self.team.rank is None else array.local

    @staticmethod
    def _only_sm(mechanism: str) -> None:
        if mechanism not in ("auto", "sm"):
            raise ValueError(f"mechanism: reductions run on SMs ('sm' or 'auto'), got {mechanism!r}")

    def _copy_engine(self, out, inp, nbytes: int, plan) -> None:
        """Copy-engine moves: rank r copies `nbytes` from inp[r] + src_off to out[q] + dst_off for each q,
        where plan(r, q) = (q, src_off, dst_off); event waits order them like the kernels' barriers."""
        import cupy as cp

        team = self.team
        if team.rank is not None:
            raise PkitError("mechanism: the copy engine path needs one process driving every GPU; use 'sm'")
        ready = {}
        for r in range(team.size):
            with cp.cuda.Device(team.devices[r]):
                ready[r] = cp.cuda.Event(disable_timing=True)
                ready[r].record()
        done = {}
        for r in range(team.size):
            with cp.cuda.Device(team.devices[r]):
                stream = cp.cuda.get_current_stream()
                for q in range(team.size):
                    stream.wait_event(ready[q])
                for step in range(team.size):
                    q, src_off, dst_off = plan(r, (r + step) % team.size)
                    cp.cuda.runtime.memcpyPeerAsync(out[q].data.ptr + dst_off, team.devices[q],
                                                    inp[r].data.ptr + src_off, team.devices[r], nbytes, stream.ptr)
                done[r] = cp.cuda.Event(disable_timing=True)
                done[r].record()
        for r in range(team.size):
            with cp.cuda.Device(team.devices[r]):
                for q in range(team.size):
                    cp.cuda.get_current_stream().wait_event(done[q])


def choose(op: str, share_bytes: int, mechanism: str) -> str:
    """The mechanism for a collective: the override if given, else what measured faster on 2×H200
    (results/h200x2-nv18/collectives_pkit_nccl.csv): the copy engine for all-to-all from 64 MiB shares
    up (S ≥ 128 MiB on 2 GPUs), SM kernels for everything else."""
    if mechanism not in ("auto", "sm", "ce"):
        raise ValueError(f"mechanism: expected 'auto', 'sm' or 'ce', got {mechanism!r}")
    if mechanism != "auto":
        return mechanism
    return "ce" if op == "all_to_all" and share_bytes >= CE_ALL_TO_ALL_MIN_SHARE else "sm"


def bus_bandwidth_factor(op: str, ranks: int) -> float:
    """nccl-tests' busbw / algbw factor: all-reduce 2(n−1)/n; all-gather, reduce-scatter, all-to-all (n−1)/n."""
    if ranks < 1:
        raise ValueError(f"ranks: expected a positive team size, got {ranks}")
    factors = {"all_reduce": 2 * (ranks - 1) / ranks, "all_gather": (ranks - 1) / ranks,
               "reduce_scatter": (ranks - 1) / ranks, "all_to_all": (ranks - 1) / ranks}
    if op not in factors:
        raise ValueError(f"op: expected one of {sorted(factors)}, got {op!r}")
    return factors[op]


def bandwidths(op: str, total_bytes: int, ranks: int, seconds: float) -> tuple[float, float]:
    """(algbw, busbw) in GB/s for a collective over `total_bytes` (nccl-tests' S) taking `seconds`."""
    if seconds <= 0 or total_bytes < 0:
        raise ValueError(f"seconds, total_bytes: expected positive time and non-negative size, got {seconds}, {total_bytes}")
    algbw = total_bytes / seconds / 1e9
    return algbw, algbw * bus_bandwidth_factor(op, ranks)
