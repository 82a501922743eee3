"""Collectives over a `pkit.Team`: every op of the collective registry (`COLLECTIVES`, `list_collectives()`).

Inputs and outputs are SymmetricArrays (float32 or bfloat16 for reductions; any dtype to move). Each call
enqueues its work on the current stream of every local GPU (kernels, or for "ce" copies on side streams
that those streams wait for) and returns; `team.synchronize()` waits. docs/collectives.md is the guide. Sizes count elements
of the whole collective as nccl-tests does: all-gather's output and reduce-scatter's input hold
`size × share` elements; all-reduce and all-to-all buffers are equal on every rank. A rooted op (broadcast,
reduce: `CollectiveOp.rooted`) takes `root=` a rank (default 0) and follows NCCL: a broadcast leaves the root's
buffer in every rank's output; a reduce writes the sum to the root's output only.

Each op is an entry of the collective registry (pkit/ops/collective_ops.py; its names, COLLECTIVES, `collective`,
`choose`, `bandwidths` and the rest, import from here too): `Collectives.run(name, ...)` runs any registered op,
and each has a method of its name. docs/collectives.md says how to add one.

Mechanisms (the `mechanism` argument; "auto" picks by op and size, see `choose`):
  * "sm": register-level 16-byte loads/stores between two in-kernel team barriers; every op, any team
    size, one process for all GPUs or one per GPU.
  * "ll": low-latency packets (include/pkit/ll.cuh): each value travels with its flag, so there is no barrier
    and no round trip, at twice the bytes on the link; every op (all-reduce one-shot) up to LL_MAX_BYTES
    sent per peer.
  * "ce": the copy engine (`cudaMemcpyPeerAsync`, ordered by events; see pkit/ops/copy_engine.py); every op,
    one process driving every GPU.

Example (the registry on any machine, then a collective on the GPUs):
    >>> from pkit.ops.collectives import collective, list_collectives
    >>> from pkit.ops.collectives import COLLECTIVES
    >>> list_collectives()["name"].tolist() == list(COLLECTIVES)  # one row per registered op
    True
    >>> ag = collective("all_gather")  # S = 1024 elements on 4 GPUs: (input, output) counts, piece, busbw factor
    >>> ag.counts(1024, 4), ag.per_peer(1024, 4), ag.bus_factor(4)
    ((256, 1024), 256, 0.75)
    >>> ag.kernel("ll"), collective("reduce_scatter").kernel("sm", "float")
    ('all_gather_ll', 'reduce_scatter<float>')
    >>> import pkit
    >>> from pkit.ops.collectives import Collectives
    >>> team = pkit.Team(pkit.team.team_devices()); coll = Collectives(team)       # doctest: +SKIP
    >>> x = team.empty((1 << 20,), "bfloat16"); y = team.empty((1 << 20,), "bfloat16")   # doctest: +SKIP
    >>> coll.all_reduce(y, x); team.synchronize()                                 # doctest: +SKIP
"""
from __future__ import annotations

import math
from functools import cached_property

import numpy as np

from ..compiler import Kernel
from ..kernel_args import KernelArgs
from ..launch import THREADS
from ..team import _BARRIER_BLOCKS
from .collective_ops import LL_MAX_BYTES, REDUCIBLE, CollectiveOp, choose, collective, fits, kernel_names
# The registry's other names, which callers import from here (pkit.ops.overlap, pkit.lesson, the cli, scripts):
from .collective_ops import (COLLECTIVE_MECHANISMS, COLLECTIVES, bandwidths, bus_bandwidth_factor,  # noqa: F401
                             list_collectives, listing, lookup, per_peer_bytes)

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
ONE_SHOT_MAX_BYTES = 256 << 10  # "sm" all-reduce: one shot up to here, else two shot (when shares split)


class Collectives:
    """Collective operations on one Team."""

    def __init__(self, team, ce_chunk_bytes: int | None = None, ce_slots: int | None = None):
        """`ce_chunk_bytes`, `ce_slots`: pipeline step and staging depth of the copy-engine reductions
        (defaults in pkit/ops/copy_engine.py)."""
        if team.size > MAX_TEAM:
            raise ValueError(f"team: expected at most {MAX_TEAM} GPUs, got {team.size}")
        self.team = team
        self._kernels: dict = {}  # (name, module id) -> Kernel
        self._ce_options = {k: v for k, v in (("chunk_bytes", ce_chunk_bytes), ("slots", ce_slots)) if v is not None}

    @cached_property
    def _module(self):
        import pkit

        return pkit.compile_cubin("collectives.cu", name_expressions=SM_KERNELS)

    @cached_property
    def _ll_module(self):
        import pkit

        return pkit.compile_cubin("ll_collectives.cu", name_expressions=LL_KERNELS)

    @cached_property
    def _ll_staging(self):
        """Every rank's LL lines: [2 parities][team size senders][2 lines per 16-byte pack], zeroed."""
        return self.team.zeros((2 * self.team.size * _ll_lines_per_sender() * 4,), "uint32")

    @cached_property
    def _ll_state(self):
        """Every rank's LL call state in device memory: [last call's epoch, blocks of the running call done]."""
        return self.team.zeros((2,), "uint32")

    @cached_property
    def _copy_engines(self):
        from .copy_engine import CopyEngines

        return CopyEngines(self.team, **self._ce_options)

    def _kernel(self, name: str, module=None):
        """Kernel `name` of the SM module (or `module`), made once: launches are on the per-call host path."""
        module = module or self._module
        if (name, id(module)) not in self._kernels:
            self._kernels[name, id(module)] = Kernel(module, name)
        return self._kernels[name, id(module)]

    @cached_property
    def _sms(self) -> int:
        """SMs each local rank may fill: the smallest local GPU's, split among the ranks sharing a GPU
        (`Team.sms_per_rank`)."""
        return min(self.team.sms_per_rank(r) for r in self.team.local_ranks)

    def _grid(self, n16: int, threads: int) -> int:
        """Blocks for `n16` packs at `threads` per block: at most one per SM a rank may fill, so every block of every
        rank is resident (an LL or barrier block never waits on one that has not launched), however many ranks
        share a GPU."""
        return max(1, min(self._sms, -(-n16 // threads)))

    def _launch_ll(self, name: str, inp, out, n16: int, root: int = 0) -> None:
        """Launch LL kernel `name` on every local rank; each call takes its epoch from the rank's device state.
        `root`: a rooted op's root (the others ignore it)."""
        team, staging, state = self.team, self._ll_staging, self._ll_state
        threads = ll_threads(n16, self._sms)
        team.launch(self._kernel(name, self._ll_module), (self._grid(n16, threads),), (threads,),
                    lambda r: (LL_CALL.pack(inp=inp.address(r), out=out.address(r), n16=n16,
                                            bases=staging.table(r).data.ptr, cap_lines=_ll_lines_per_sender(),
                                            state=state.address(r), shift=LL_GROUP_SHIFT[threads], rank=r,
                                            size=team.size, root=root),))

    def _mechanism(self, op: str, nbytes: int, mechanism: str) -> str:
        """The mechanism to use, checked against the LL size limit."""
        chosen = choose(op, nbytes, mechanism, single_process=self.team.rank is None)
        if not fits(chosen, nbytes):
            raise ValueError(f"mechanism: 'll' sends at most {LL_MAX_BYTES} bytes per peer; {op} of this size "
                             f"sends {nbytes}; use 'sm' or 'auto'")
        return chosen

    def _launch(self, name: str, inp, out, n16: int, root: int = 0) -> None:
        """Launch SM kernel `name` on every local rank over `n16` packs per loop (`root`: as for `_launch_ll`)."""
        team, flags = self.team, self.team.barrier_flags
        grid = min(_BARRIER_BLOCKS, self._grid(n16, THREADS))  # one barrier flag row per block
        team.launch(self._kernel(name), (grid,), (THREADS,),
                    lambda r: (SM_CALL.pack(inp=inp.table(r).data.ptr, out=out.table(r).data.ptr, n16=n16,
                                            flags=flags.table(r).data.ptr, rank=r, size=team.size, root=root),))

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
        if math.prod(array.shape) != count:
            raise ValueError(f"{arg}: expected {count} elements, got shape {array.shape}")
        if dtype is not None and array.dtype != dtype:
            raise ValueError(f"{arg}: expected dtype {dtype}, got {array.dtype}")

    def _share_bytes(self, arg: str, array, total: int) -> int:
        """Bytes of one rank's share, checked to split evenly into 16-byte packs."""
        size = self.team.size
        item = array.storage_dtype.itemsize
        if total % size or (total // size * item) % 16:
            raise ValueError(f"{arg}: {total} elements of {array.dtype} do not split into {size} shares of a "
                             "multiple of 16 bytes; pad the buffer (e.g. to a multiple of "
                             f"{16 // np.gcd(16, item) * size} elements)")
        return total // size * item

    def _ctype(self, array) -> str:
        """The C++ type reductions over `array` sum in (the template argument of the reducing kernels)."""
        if array.dtype not in REDUCIBLE:
            raise ValueError(f"dtype: reductions support {sorted(REDUCIBLE)}, got {array.dtype}")
        return REDUCIBLE[array.dtype]

    def _collective(self, entry: CollectiveOp, out, inp, mechanism: str = "auto", root: int | None = None) -> None:
        """Op `entry`, one kernel per family, from its layout (`CollectiveOp.pieces`): each buffer is one piece or
        one per rank, and one piece is what a rank sends each peer. A rooted op runs from or to `root`."""
        root = entry.root(root, self.team.size)
        self._check_pair(out, inp)
        ins, outs = entry.pieces(self.team.size)
        given, checked_arg, checked = (out, "inp", inp) if outs < ins else (inp, "out", out)  # the smaller sets S
        total = math.prod(given.shape) * max(ins, outs) // min(ins, outs)  # nccl-tests' S
        self._check(checked_arg, checked, total, given.dtype)
        ctype = self._ctype(inp) if entry.reduces else None
        if entry.input_by_rank or entry.output_by_rank:
            nbytes = self._share_bytes(*(("inp", inp) if entry.input_by_rank else ("out", out)), total)
        else:
            nbytes = self._whole_packs(total * inp.storage_dtype.itemsize)
        chosen = self._mechanism(entry.name, nbytes, mechanism)
        if chosen == "ce" and entry.reduces:
            return self._ce_reduce(self._copy_engines, out, inp, nbytes, ctype, entry.input_by_rank,
                                   entry.output_by_rank, owners=[root] if entry.rooted == "sink" else None)
        if chosen == "ce":
            senders = {root} if entry.rooted == "source" else range(self.team.size)
            return self._copy_engines.move(out, inp, nbytes, lambda r, q: (q, q * nbytes * entry.input_by_rank,
                                                                           r * nbytes * entry.output_by_rank)
                                           if r in senders else None)
        launch = self._launch_ll if chosen == "ll" else self._launch
        launch(entry.kernel(chosen, ctype), inp, out, nbytes // 16, root or 0)

    def _ce_reduce(self, engines, out, inp, nbytes: int, ctype: str, by_rank_in: bool, by_rank_out: bool,
                   owners=None) -> None:
        """Copy-engine reduction on `engines` of pieces of `nbytes`: rank r sums piece r of every input (the whole
        input unless `by_rank_in`) into its output, and with `by_rank_out` into piece r of every rank's output; only
        the ranks of `owners` (default: every rank) sum."""
        engines.reduce(out, inp, nbytes, self._kernel(f"reduce_staged<{ctype}>"), gather=by_rank_out,
                       src_offset=lambda r: r * nbytes * by_rank_in, out_offset=lambda r: r * nbytes * by_rank_out,
                       owners=owners)

    def all_reduce(self, out, inp, algorithm: str = "auto", mechanism: str = "auto") -> None:
        """out[r] = sum over ranks q of inp[q].

        `algorithm`: 'one_shot' (every rank reads or receives every input whole), 'two_shot' (reduce-scatter
        then all-gather) or 'auto'. Mechanism 'll' is one-shot; 'sm' and 'ce' run either (auto: one-shot on
        two GPUs, where both move the same bytes over the link and one-shot needs no gather step).
        """
        self._check_pair(out, inp)
        total = math.prod(inp.shape)
        self._check("out", out, total, inp.dtype)
        ctype = self._ctype(inp)
        item = inp.storage_dtype.itemsize
        nbytes = total * item
        entry = collective("all_reduce")
        runs = entry.algorithms  # mechanism -> the algorithms it runs
        if algorithm != "auto" and not any(algorithm in names for names in runs.values()):
            known = sorted(set().union(*runs.values()))
            raise ValueError(f"algorithm: expected {_quoted(known)} or 'auto', got {algorithm!r}")
        if mechanism == "auto" and algorithm != "auto":
            mechanism = "sm"  # an explicit algorithm asks for the register-level kernels
        chosen = self._mechanism("all_reduce", nbytes, mechanism)
        if algorithm not in ("auto", *runs[chosen]):
            raise ValueError(f"algorithm: mechanism {chosen!r} runs {_quoted(runs[chosen])}, got {algorithm!r}")
        if chosen == "ce":
            engines = self._copy_engines  # first: it refuses one process per GPU
            split = not (algorithm == "one_shot" or (algorithm == "auto" and self.team.size == 2))
            piece = self._share_bytes("inp", inp, total) if split else self._whole_packs(nbytes)
            return self._ce_reduce(engines, out, inp, piece, ctype, split, split)
        self._whole_packs(nbytes)
        if chosen == "ll":
            return self._launch_ll(entry.kernel("ll", ctype), inp, out, nbytes // 16)
        if algorithm == "auto":
            splits = total % self.team.size == 0 and (total // self.team.size * item) % 16 == 0
            algorithm = "one_shot" if nbytes <= ONE_SHOT_MAX_BYTES or not splits else "two_shot"
        n16 = (nbytes if algorithm == "one_shot" else self._share_bytes("inp", inp, total)) // 16
        self._launch(entry.kernel("sm", ctype, algorithm), inp, out, n16)

    def all_gather(self, out, inp, mechanism: str = "auto") -> None:
        """The registry's all_gather (`COLLECTIVES`, `run`); `mechanism`: one of its mechanisms or 'auto'."""
        self._collective(collective("all_gather"), out, inp, mechanism)

    def reduce_scatter(self, out, inp, mechanism: str = "auto") -> None:
        """The registry's reduce_scatter (`COLLECTIVES`, `run`); `mechanism`: one of its mechanisms or 'auto'."""
        self._collective(collective("reduce_scatter"), out, inp, mechanism)

    def all_to_all(self, out, inp, mechanism: str = "auto") -> None:
        """The registry's all_to_all (`COLLECTIVES`, `run`); `mechanism`: one of its mechanisms or 'auto'."""
        self._collective(collective("all_to_all"), out, inp, mechanism)

    def broadcast(self, out, inp, root: int = 0, mechanism: str = "auto") -> None:
        """The registry's broadcast (`COLLECTIVES`, `run`) from rank `root`; `mechanism`: one of its mechanisms or
        'auto'."""
        self._collective(collective("broadcast"), out, inp, mechanism, root)

    def reduce(self, out, inp, root: int = 0, mechanism: str = "auto") -> None:
        """The registry's reduce (`COLLECTIVES`, `run`) into rank `root`; `mechanism`: one of its mechanisms or
        'auto'."""
        self._collective(collective("reduce"), out, inp, mechanism, root)

    @staticmethod
    def _whole_packs(nbytes: int) -> int:
        """`nbytes` of the input, checked to be whole 16-byte packs (what the one-shot paths move)."""
        if nbytes % 16:
            raise ValueError(f"inp: {nbytes} bytes is not a multiple of 16; pad the buffer")
        return nbytes

    def run(self, op: str, out, inp, **options) -> None:
        """Collective `op` by name (a key of COLLECTIVES), e.g. run("all_gather", out, inp, mechanism="sm"), or
        run("broadcast", out, inp, root=1) for a rooted op. An op whose mechanisms run several algorithms has a
        method of its own that picks one (all_reduce)."""
        entry = collective(op)
        if entry.algorithms:
            return getattr(self, op)(out, inp, **options)
        self._collective(entry, out, inp, **options)


# The kernels of collectives.cu and ll_collectives.cu (NVRTC name expressions: the registry's, and the copy
# engine's reduce_staged), and their argument structs: each mirrors the C++ struct of the same name field by
# field (tests compile the files with LL_CALL/SM_CALL's layout_asserts).
SM_KERNELS = (*kernel_names("sm"), *(f"reduce_staged<{ctype}>" for ctype in REDUCIBLE.values()))
LL_KERNELS = kernel_names("ll")
SM_CALL = KernelArgs("SMCall", (("inp", "ptr"), ("out", "ptr"), ("n16", "u64"), ("flags", "ptr"), ("rank", "i32"),
                                ("size", "i32"), ("root", "i32")))
LL_CALL = KernelArgs("LLCall", (("inp", "ptr"), ("out", "ptr"), ("n16", "u64"), ("bases", "ptr"),
                                ("cap_lines", "u64"), ("state", "ptr"), ("shift", "u32"), ("rank", "i32"),
                                ("size", "i32"), ("root", "i32")))


def next_epoch(epoch: int) -> int:
    """The epoch after `epoch`: 1, 2, ..., 2³² − 2, then 1 again. Never 0 (a zeroed flag's value), and its parity
    alternates even across the wrap (consecutive calls never share a staging half). LL kernels count theirs in
    device memory the same way (ll_collectives.cu begin_call); the overlap schedules' flags use this one."""
    return epoch % 0xFFFFFFFE + 1


def ll_threads(n16: int, sms: int) -> int:
    """Threads per LL block for `n16` 16-byte packs on GPUs of `sms` SMs: LL_THREADS while every thread of one
    block per SM carries at most LL_PACKS_PER_THREAD packs, else LL_THREADS_WIDE."""
    return LL_THREADS if n16 <= LL_PACKS_PER_THREAD * LL_THREADS * sms else LL_THREADS_WIDE


def _ll_lines_per_sender() -> int:
    """16-byte LL lines per (parity, sender): two per 16-byte pack of the largest payload, a multiple of
    2^(g+1) for every group shift g in LL_GROUP_SHIFT (whole groups fit)."""
    return 2 * LL_MAX_BYTES // 16


def _quoted(names) -> str:
    return ", ".join(repr(n) for n in names)
