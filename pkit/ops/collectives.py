"""Collectives over a `pkit.Team`: all-gather, reduce-scatter, all-reduce (one-shot, two-shot), all-to-all.

Inputs and outputs are SymmetricArrays (float32 or bfloat16 for reductions; any dtype to move). Each call
enqueues its work on the current stream of every local GPU (kernels, or for "ce" copies on side streams
that those streams wait for) and returns; `team.synchronize()` waits. docs/collectives.md is the guide. Sizes count elements
of the whole collective as nccl-tests does: all-gather's output and reduce-scatter's input hold
`size × share` elements; all-reduce and all-to-all buffers are equal on every rank.

Mechanisms (the `mechanism` argument; "auto" picks by op and size, see `choose`):
  * "sm": register-level 16-byte loads/stores between two in-kernel team barriers; every op, any team
    size, one process for all GPUs or one per GPU.
  * "ll": low-latency packets (include/pkit/ll.cuh): each value travels with its flag, so there is no barrier
    and no round trip, at twice the bytes on the link; every op (all-reduce one-shot) up to LL_MAX_BYTES
    sent per peer.
  * "ce": the copy engine (`cudaMemcpyPeerAsync`, ordered by events; see pkit/ops/copy_engine.py); every op,
    one process driving every GPU.

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

from ..launch import THREADS

# LL block size (`ll_threads`): small blocks spread sends and polling over more SMs; once each thread of one
# small block per SM would carry more than LL_PACKS_PER_THREAD packs, wide blocks (one pack per thread) take
# over. Each was the faster of the two over its sizes on 2×H200. That comparison is not kept under results/;
# the LL timings with this choice are: results/h200x2-nv18/collectives_latency.csv (all-reduce, back-to-back
# calls) and collectives_pkit_nccl.csv (every op), from notebooks/04_collectives.ipynb. Rerun it after a change.
LL_THREADS = 64
LL_THREADS_WIDE = 256
LL_PACKS_PER_THREAD = 2
# LL line layout (group shift g, see ll_collectives.cu): wide blocks use warp-contiguous groups of 32 packs
# (g = 5), small blocks interleave each pack's two lines (g = 0); on 2×H200 each was the faster layout for its
# block size. Recorded and rerun as for the block size above.
LL_GROUP_SHIFT = {LL_THREADS: 0, LL_THREADS_WIDE: 5}
MAX_TEAM = 8  # the kernels keep one flag row per rank in registers
REDUCIBLE = {"float32": "f32", "bfloat16": "bf16"}
MECHANISMS = ("auto", "sm", "ll", "ce")
LL_MAX_BYTES = 1 << 20  # largest LL payload one rank sends one peer (sizes the staging buffer)
ONE_SHOT_MAX_BYTES = 256 << 10  # "sm" all-reduce: one shot up to here, else two shot (when shares split)
# "auto" thresholds, in bytes one rank sends one peer in the one-shot form (whole buffer for all-reduce,
# one share otherwise); from results/h200x2-nv18/collectives_pkit_nccl.csv (see `choose`)
LL_AUTO_MAX_BYTES = {"all_reduce": 1 << 20, "reduce_scatter": 512 << 10, "all_gather": 512 << 10,
                     "all_to_all": 512 << 10}
CE_MIN_BYTES = {"all_reduce": 256 << 20, "reduce_scatter": 256 << 20}  # one process driving every GPU only


class Collectives:
    """Collective operations on one Team."""

    def __init__(self, team, ce_chunk_bytes: int | None = None, ce_slots: int | None = None):
        """`ce_chunk_bytes`, `ce_slots`: pipeline step and staging depth of the copy-engine reductions
        (defaults in pkit/ops/copy_engine.py)."""
        if team.size > MAX_TEAM:
            raise ValueError(f"team: expected at most {MAX_TEAM} GPUs, got {team.size}")
        self.team = team
        self._ce_options = {k: v for k, v in (("chunk_bytes", ce_chunk_bytes), ("slots", ce_slots)) if v is not None}
        self._epoch = 0  # LL calls so far: the next call's packets carry flag _epoch + 1

    @cached_property
    def _module(self):
        import pkit

        return pkit.compile_cubin("collectives.cu")

    @cached_property
    def _ll_module(self):
        import pkit

        return pkit.compile_cubin("ll_collectives.cu")

    @cached_property
    def _ll_staging(self):
        """Every rank's LL lines: [2 parities][team size senders][2 lines per 16-byte pack], zeroed."""
        return self.team.zeros((2 * self.team.size * _ll_lines_per_sender() * 4,), "uint32")

    @cached_property
    def _copy_engines(self):
        from .copy_engine import CopyEngines

        return CopyEngines(self.team, **self._ce_options)

    def _kernel(self, name: str, module=None):
        from ..compiler import Kernel

        return Kernel(module or self._module, name)

    @cached_property
    def _sms(self) -> int:
        """SMs of the smallest local GPU."""
        import pkit

        return min(pkit.devices()[self.team.devices[r]].sms for r in self.team.local_ranks)

    def _grid(self, n16: int, threads: int) -> int:
        """Blocks for `n16` packs at `threads` per block: at most one per SM of the smallest local GPU, so every
        block is resident (an LL or barrier block never waits on one that has not launched)."""
        return max(1, min(self._sms, -(-n16 // threads)))

    def _launch_ll(self, name: str, inp, out, n16: int) -> None:
        """Launch LL kernel `name` (in, out, n16, staging...) on every local rank with a fresh epoch."""
        team, staging = self.team, self._ll_staging
        self._epoch = next_epoch(self._epoch)
        threads = ll_threads(n16, self._sms)
        team.launch(self._kernel(name, self._ll_module), (self._grid(n16, threads),), (threads,),
                    lambda r: (self._local(inp, r), self._local(out, r), np.uint64(n16), staging.table(r),
                               np.uint64(_ll_lines_per_sender()), np.uint32(self._epoch),
                               np.uint32(LL_GROUP_SHIFT[threads]), np.int32(r), np.int32(team.size)))

    def _mechanism(self, op: str, nbytes: int, mechanism: str) -> str:
        """The mechanism to use, checked against the LL size limit."""
        chosen = choose(op, nbytes, mechanism, single_process=self.team.rank is None)
        if chosen == "ll" and nbytes > LL_MAX_BYTES:
            raise ValueError(f"mechanism: 'll' sends at most {LL_MAX_BYTES} bytes per peer; {op} of this size "
                             f"sends {nbytes}; use 'sm' or 'auto'")
        return chosen

    def _launch(self, name: str, n16: int, args) -> None:
        """Launch on every local rank; `args(rank)` gives the kernel's leading arguments."""
        from ..team import _BARRIER_BLOCKS

        team, flags = self.team, self.team.barrier_flags
        grid = min(_BARRIER_BLOCKS, self._grid(n16, THREADS))  # one barrier flag row per block
        team.launch(self._kernel(name), (grid,), (THREADS,),
                    lambda r: (*args(r), flags.table(r), np.int32(r), np.int32(team.size)))

    def _check_pair(self, out, inp) -> None:
        """Both buffers belong to this team and differ (no collective runs in place)."""
        if inp.team is not self.team:
            raise ValueError("inp: expected a SymmetricArray of this team")
        if out is inp:
            raise ValueError("out: expected a buffer other than inp (collectives do not run in place)")
        if out.team is not self.team:
            raise ValueError("out: expected a SymmetricArray of this team")

    def _check(self, arg: str, array, count: int, dtype: str | None = None) -> None:
        """`array` (argument `arg`, of this team: see `_check_pair`) holds `count` elements of `dtype`."""
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
        self._check_pair(out, inp)
        share = int(np.prod(inp.shape))
        self._check("out", out, share * self.team.size, inp.dtype)
        nbytes = self._share("out", out, share * self.team.size)
        chosen = self._mechanism("all_gather", nbytes, mechanism)
        if chosen == "ce":
            return self._copy_engines.move(out, inp, nbytes, lambda r, q: (q, 0, r * nbytes))
        if chosen == "ll":
            return self._launch_ll("all_gather_ll", inp, out, nbytes // 16)
        self._launch("all_gather", nbytes // 16,
                     lambda r: (self._local(inp, r), out.table(r), np.uint64(nbytes // 16)))

    def all_to_all(self, out, inp, mechanism: str = "auto") -> None:
        """out[r][q-th share] = inp[q][r-th share], equal shares."""
        self._check_pair(out, inp)
        total = int(np.prod(inp.shape))
        self._check("out", out, total, inp.dtype)
        nbytes = self._share("inp", inp, total)
        chosen = self._mechanism("all_to_all", nbytes, mechanism)
        if chosen == "ce":
            return self._copy_engines.move(out, inp, nbytes, lambda r, q: (q, q * nbytes, r * nbytes))
        if chosen == "ll":
            return self._launch_ll("all_to_all_ll", inp, out, nbytes // 16)
        self._launch("all_to_all", nbytes // 16,
                     lambda r: (self._local(inp, r), out.table(r), np.uint64(nbytes // 16)))

    def reduce_scatter(self, out, inp, mechanism: str = "auto") -> None:
        """out[r] = sum over ranks q of the r-th share of inp[q] (inp: size × share, out: share)."""
        self._check_pair(out, inp)
        share = int(np.prod(out.shape))
        self._check("inp", inp, share * self.team.size, out.dtype)
        suffix = self._suffix(inp)
        nbytes = self._share("inp", inp, share * self.team.size)
        chosen = self._mechanism("reduce_scatter", nbytes, mechanism)
        if chosen == "ce":
            return self._copy_engines.reduce(out, inp, nbytes, self._kernel(f"reduce_staged_{suffix}"),
                                             src_offset=lambda r: r * nbytes, out_offset=lambda r: 0, gather=False)
        if chosen == "ll":
            return self._launch_ll(f"reduce_scatter_ll_{suffix}", inp, out, nbytes // 16)
        self._launch(f"reduce_scatter_{suffix}", nbytes // 16,
                     lambda r: (inp.table(r), self._local(out, r), np.uint64(nbytes // 16)))

    def all_reduce(self, out, inp, algorithm: str = "auto", mechanism: str = "auto") -> None:
        """out[r] = sum over ranks q of inp[q].

        `algorithm`: 'one_shot' (every rank reads or receives every input whole), 'two_shot' (reduce-scatter
        then all-gather) or 'auto'. Mechanism 'll' is one-shot; 'sm' and 'ce' run either (auto: one-shot on
        two GPUs, where both move the same bytes over the link and one-shot needs no gather step).
        """
        self._check_pair(out, inp)
        total = int(np.prod(inp.shape))
        self._check("out", out, total, inp.dtype)
        suffix = self._suffix(inp)
        item = inp.storage_dtype.itemsize
        nbytes = total * item
        if algorithm not in ("auto", "one_shot", "two_shot"):
            raise ValueError(f"algorithm: expected 'one_shot', 'two_shot' or 'auto', got {algorithm!r}")
        if mechanism == "auto" and algorithm != "auto":
            mechanism = "sm"  # an explicit algorithm asks for the register-level kernels
        chosen = self._mechanism("all_reduce", nbytes, mechanism)
        fixed = {"ll": "one_shot"}.get(chosen)
        if fixed and algorithm not in ("auto", fixed):
            raise ValueError(f"algorithm: mechanism {chosen!r} runs {fixed!r}, got {algorithm!r}")
        if chosen == "ce":
            return self._all_reduce_ce(out, inp, total, algorithm, suffix)
        self._whole_packs(nbytes)
        if chosen == "ll":
            return self._launch_ll(f"all_reduce_ll_{suffix}", inp, out, nbytes // 16)
        if algorithm == "auto":
            splits = total % self.team.size == 0 and (total // self.team.size * item) % 16 == 0
            algorithm = "one_shot" if nbytes <= ONE_SHOT_MAX_BYTES or not splits else "two_shot"
        if algorithm == "one_shot":
            self._launch(f"all_reduce_one_shot_{suffix}", nbytes // 16,
                         lambda r: (inp.table(r), self._local(out, r), np.uint64(nbytes // 16)))
        else:
            share = self._share("inp", inp, total)
            self._launch(f"all_reduce_two_shot_{suffix}", share // 16,
                         lambda r: (inp.table(r), out.table(r), np.uint64(share // 16)))

    def _all_reduce_ce(self, out, inp, total: int, algorithm: str, suffix: str) -> None:
        engines = self._copy_engines  # first: it refuses one process per GPU
        kernel = self._kernel(f"reduce_staged_{suffix}")
        if algorithm == "one_shot" or (algorithm == "auto" and self.team.size == 2):
            nbytes = self._whole_packs(total * inp.storage_dtype.itemsize)
            return engines.reduce(out, inp, nbytes, kernel, src_offset=lambda r: 0, out_offset=lambda r: 0,
                                  gather=False)
        share = self._share("inp", inp, total)
        engines.reduce(out, inp, share, kernel, src_offset=lambda r: r * share, out_offset=lambda r: r * share,
                       gather=True)

    @staticmethod
    def _whole_packs(nbytes: int) -> int:
        """`nbytes` of the input, checked to be whole 16-byte packs (what the one-shot paths move)."""
        if nbytes % 16:
            raise ValueError(f"inp: {nbytes} bytes is not a multiple of 16; pad the buffer")
        return nbytes

    def _local(self, array, rank: int):
        return array[rank] if self.team.rank is None else array.local


def next_epoch(epoch: int) -> int:
    """The LL epoch after `epoch`: 1, 2, ..., 2³² − 2, then 1 again. Never 0 (the staging's initial flag), and
    its parity alternates even across the wrap, so consecutive calls never share a staging half."""
    return epoch % 0xFFFFFFFE + 1


def ll_threads(n16: int, sms: int) -> int:
    """Threads per LL block for `n16` 16-byte packs on GPUs of `sms` SMs: LL_THREADS while every thread of one
    block per SM carries at most LL_PACKS_PER_THREAD packs, else LL_THREADS_WIDE."""
    return LL_THREADS if n16 <= LL_PACKS_PER_THREAD * LL_THREADS * sms else LL_THREADS_WIDE


def _ll_lines_per_sender() -> int:
    """16-byte LL lines per (parity, sender): two per 16-byte pack of the largest payload, a multiple of
    2^(g+1) for every group shift g in LL_GROUP_SHIFT (whole groups fit)."""
    return 2 * LL_MAX_BYTES // 16


def per_peer_bytes(op: str, total_bytes: int, ranks: int) -> int:
    """What one rank sends one peer in the one-shot form of `op` over nccl-tests' size S = `total_bytes`: the
    whole buffer for all-reduce, one share otherwise (the `nbytes` of `choose`)."""
    return total_bytes if op == "all_reduce" else total_bytes // ranks


def choose(op: str, nbytes: int, mechanism: str, single_process: bool = True) -> str:
    """The mechanism for a collective: the override if given, else what measured fastest on 2×H200
    (results/h200x2-nv18/collectives_pkit_nccl.csv). `nbytes`: what one rank sends one peer in the one-shot
    form (`per_peer_bytes`). LL packets up to LL_AUTO_MAX_BYTES[op],
    the copy-engine pipeline for the reductions from CE_MIN_BYTES[op] (one process only; the
    reduce-scatter threshold lies between the measured tie at 128 MiB shares and the win at 512 MiB), SM
    kernels for the rest."""
    if mechanism not in MECHANISMS:
        raise ValueError(f"mechanism: expected one of {list(MECHANISMS)}, got {mechanism!r}")
    if mechanism != "auto":
        return mechanism
    if nbytes <= LL_AUTO_MAX_BYTES.get(op, -1):
        return "ll"
    if single_process and nbytes >= CE_MIN_BYTES.get(op, 1 << 62):
        return "ce"
    return "sm"


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
