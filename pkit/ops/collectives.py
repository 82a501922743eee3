"""Collectives over a `pkit.Team`: all-gather, reduce-scatter, all-reduce (one-shot, two-shot), all-to-all.

Inputs and outputs are SymmetricArrays (float32 or bfloat16 for reductions; any dtype to move). Each call
enqueues its work on the current stream of every local GPU (kernels, or for "ce" copies on side streams
that those streams wait for) and returns; `team.synchronize()` waits. docs/collectives.md is the guide. Sizes count elements
of the whole collective as nccl-tests does: all-gather's output and reduce-scatter's input hold
`size × share` elements; all-reduce and all-to-all buffers are equal on every rank.

Each op is an entry of COLLECTIVES (`CollectiveOp`: what it computes, buffer counts, busbw factor, mechanisms,
auto thresholds); `collective(name)` looks one up, `list_collectives()` lists them, `Collectives.run(name, ...)`
runs one by name. docs/collectives.md says how to add one.

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
    >>> team = pkit.Team(pkit.team.team_devices()); coll = Collectives(team)       # doctest: +SKIP
    >>> x = team.empty((1 << 20,), "bfloat16"); y = team.empty((1 << 20,), "bfloat16")   # doctest: +SKIP
    >>> coll.all_reduce(y, x); team.synchronize()                                 # doctest: +SKIP
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import Callable, Mapping

import numpy as np

from ..compiler import Kernel
from ..kernel_args import KernelArgs
from ..launch import THREADS
from ..team import _BARRIER_BLOCKS

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
REDUCIBLE = {"float32": "float", "bfloat16": "__nv_bfloat16"}  # dtype -> the C++ type the kernels sum in
MECHANISMS = ("auto", "sm", "ll", "ce")
LL_MAX_BYTES = 1 << 20  # largest LL payload one rank sends one peer (sizes the staging buffer)
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

    def _launch_ll(self, name: str, inp, out, n16: int) -> None:
        """Launch LL kernel `name` on every local rank; each call takes its epoch from the rank's device state."""
        team, staging, state = self.team, self._ll_staging, self._ll_state
        threads = ll_threads(n16, self._sms)
        team.launch(self._kernel(name, self._ll_module), (self._grid(n16, threads),), (threads,),
                    lambda r: (LL_CALL.pack(inp=inp.address(r), out=out.address(r), n16=n16,
                                            bases=staging.table(r).data.ptr, cap_lines=_ll_lines_per_sender(),
                                            state=state.address(r), shift=LL_GROUP_SHIFT[threads], rank=r,
                                            size=team.size),))

    def _mechanism(self, op: str, nbytes: int, mechanism: str) -> str:
        """The mechanism to use, checked against the LL size limit."""
        chosen = choose(op, nbytes, mechanism, single_process=self.team.rank is None)
        if not fits(chosen, nbytes):
            raise ValueError(f"mechanism: 'll' sends at most {LL_MAX_BYTES} bytes per peer; {op} of this size "
                             f"sends {nbytes}; use 'sm' or 'auto'")
        return chosen

    def _launch(self, name: str, inp, out, n16: int) -> None:
        """Launch SM kernel `name` on every local rank over `n16` packs per loop."""
        team, flags = self.team, self.team.barrier_flags
        grid = min(_BARRIER_BLOCKS, self._grid(n16, THREADS))  # one barrier flag row per block
        team.launch(self._kernel(name), (grid,), (THREADS,),
                    lambda r: (SM_CALL.pack(inp=inp.table(r).data.ptr, out=out.table(r).data.ptr, n16=n16,
                                            flags=flags.table(r).data.ptr, rank=r, size=team.size),))

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

    def _share(self, arg: str, array, total: int) -> int:
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

    def all_gather(self, out, inp, mechanism: str = "auto") -> None:
        """out[r] = concatenation over ranks q of inp[q] (inp: one share, out: size × share elements)."""
        self._check_pair(out, inp)
        share = math.prod(inp.shape)
        self._check("out", out, share * self.team.size, inp.dtype)
        nbytes = self._share("out", out, share * self.team.size)
        chosen = self._mechanism("all_gather", nbytes, mechanism)
        if chosen == "ce":
            return self._copy_engines.move(out, inp, nbytes, lambda r, q: (q, 0, r * nbytes))
        if chosen == "ll":
            return self._launch_ll("all_gather_ll", inp, out, nbytes // 16)
        self._launch("all_gather", inp, out, nbytes // 16)

    def all_to_all(self, out, inp, mechanism: str = "auto") -> None:
        """out[r][q-th share] = inp[q][r-th share], equal shares."""
        self._check_pair(out, inp)
        total = math.prod(inp.shape)
        self._check("out", out, total, inp.dtype)
        nbytes = self._share("inp", inp, total)
        chosen = self._mechanism("all_to_all", nbytes, mechanism)
        if chosen == "ce":
            return self._copy_engines.move(out, inp, nbytes, lambda r, q: (q, q * nbytes, r * nbytes))
        if chosen == "ll":
            return self._launch_ll("all_to_all_ll", inp, out, nbytes // 16)
        self._launch("all_to_all", inp, out, nbytes // 16)

    def reduce_scatter(self, out, inp, mechanism: str = "auto") -> None:
        """out[r] = sum over ranks q of the r-th share of inp[q] (inp: size × share, out: share)."""
        self._check_pair(out, inp)
        share = math.prod(out.shape)
        self._check("inp", inp, share * self.team.size, out.dtype)
        ctype = self._ctype(inp)
        nbytes = self._share("inp", inp, share * self.team.size)
        chosen = self._mechanism("reduce_scatter", nbytes, mechanism)
        if chosen == "ce":
            return self._copy_engines.reduce(out, inp, nbytes, self._kernel(f"reduce_staged<{ctype}>"),
                                             src_offset=lambda r: r * nbytes, out_offset=lambda r: 0, gather=False)
        if chosen == "ll":
            return self._launch_ll(f"reduce_scatter_ll<{ctype}>", inp, out, nbytes // 16)
        self._launch(f"reduce_scatter<{ctype}>", inp, out, nbytes // 16)

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
        runs = COLLECTIVES["all_reduce"].algorithms  # mechanism -> the algorithms it runs
        if algorithm != "auto" and not any(algorithm in names for names in runs.values()):
            known = sorted(set().union(*runs.values()))
            raise ValueError(f"algorithm: expected {_quoted(known)} or 'auto', got {algorithm!r}")
        if mechanism == "auto" and algorithm != "auto":
            mechanism = "sm"  # an explicit algorithm asks for the register-level kernels
        chosen = self._mechanism("all_reduce", nbytes, mechanism)
        if algorithm not in ("auto", *runs[chosen]):
            raise ValueError(f"algorithm: mechanism {chosen!r} runs {_quoted(runs[chosen])}, got {algorithm!r}")
        if chosen == "ce":
            return self._all_reduce_ce(out, inp, total, algorithm, ctype)
        self._whole_packs(nbytes)
        if chosen == "ll":
            return self._launch_ll(f"all_reduce_ll<{ctype}>", inp, out, nbytes // 16)
        if algorithm == "auto":
            splits = total % self.team.size == 0 and (total // self.team.size * item) % 16 == 0
            algorithm = "one_shot" if nbytes <= ONE_SHOT_MAX_BYTES or not splits else "two_shot"
        if algorithm == "one_shot":
            self._launch(f"all_reduce_one_shot<{ctype}>", inp, out, nbytes // 16)
        else:
            self._launch(f"all_reduce_two_shot<{ctype}>", inp, out, self._share("inp", inp, total) // 16)

    def _all_reduce_ce(self, out, inp, total: int, algorithm: str, ctype: str) -> None:
        engines = self._copy_engines  # first: it refuses one process per GPU
        kernel = self._kernel(f"reduce_staged<{ctype}>")
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

    def run(self, op: str, out, inp, **options) -> None:
        """Collective `op` by name (a key of COLLECTIVES), e.g. run("all_gather", out, inp, mechanism="sm")."""
        collective(op).run(self, out, inp, **options)


def _instances(*templates: str) -> tuple[str, ...]:
    """Name expressions of kernel templates over the reducible types, e.g. 'reduce_scatter<float>'."""
    return tuple(f"{t}<{ctype}>" for t in templates for ctype in REDUCIBLE.values())


# The kernels of collectives.cu and ll_collectives.cu (NVRTC name expressions), and their argument structs: each
# mirrors the C++ struct of the same name field by field (tests compile the files with LL_CALL/SM_CALL's
# layout_asserts).
SM_KERNELS = ("all_gather", "all_to_all",
              *_instances("reduce_scatter", "all_reduce_one_shot", "all_reduce_two_shot", "reduce_staged"))
LL_KERNELS = ("all_gather_ll", "all_to_all_ll", *_instances("all_reduce_ll", "reduce_scatter_ll"))
SM_CALL = KernelArgs("SMCall", (("inp", "ptr"), ("out", "ptr"), ("n16", "u64"), ("flags", "ptr"), ("rank", "i32"),
                                ("size", "i32")))
LL_CALL = KernelArgs("LLCall", (("inp", "ptr"), ("out", "ptr"), ("n16", "u64"), ("bases", "ptr"),
                                ("cap_lines", "u64"), ("state", "ptr"), ("shift", "u32"), ("rank", "i32"),
                                ("size", "i32")))


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


def fits(mechanism: str, nbytes: int) -> bool:
    """Whether `mechanism` can send `nbytes` to one peer in one call ('ll': at most LL_MAX_BYTES)."""
    return mechanism != "ll" or nbytes <= LL_MAX_BYTES


def _quoted(names) -> str:
    return ", ".join(repr(n) for n in names)


# The collective registry: one entry per op, from which buffers, bandwidths, `choose`, the measured variants,
# listings and tests are derived. Sizes are nccl-tests' S (see the module docstring); n is the team size.

@dataclass(frozen=True)
class CollectiveOp:
    """One collective: what it computes and how pkit runs, sizes and measures it."""

    name: str  # key of COLLECTIVES, `op` column of results
    description: str  # one line, for listings
    run: Callable  # run(coll, out, inp, **options): enqueue it on coll's team (`Collectives.run`)
    reference: Callable[[list, int], np.ndarray]  # rank r's output for every rank's input (NumPy arrays)
    counts: Callable[[int, int], tuple[int, int]]  # (input, output) elements per rank for S elements, n ranks
    per_peer: Callable[[int, int], int]  # bytes one rank sends one peer in the one-shot form, for S bytes, n ranks
    bus_factor: Callable[[int], float]  # nccl-tests' busbw / algbw for n ranks
    reduces: bool = False  # sums float32 or bfloat16 (REDUCIBLE)
    mechanisms: tuple[str, ...] = MECHANISMS[1:]  # those that implement it; "sm" is auto's fallback
    algorithms: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # mechanism -> algorithms it runs
    ll_auto_max_bytes: int = -1  # "auto" picks "ll" up to this many bytes per peer (-1: never)
    ce_auto_min_bytes: float = math.inf  # "auto" picks "ce" from this many bytes per peer (one process only)

    def __post_init__(self):
        picks = ["sm"] + ["ll"] * (self.ll_auto_max_bytes >= 0) + ["ce"] * (self.ce_auto_min_bytes < math.inf)
        if not set(picks) <= set(self.mechanisms):
            raise ValueError(f"mechanisms: {self.name} needs {picks} (what auto may pick), got {self.mechanisms}")

    def auto(self, nbytes: int, single_process: bool) -> str:
        """The mechanism "auto" picks when one rank sends `nbytes` to one peer (see `choose`)."""
        if nbytes <= self.ll_auto_max_bytes:
            return "ll"
        if single_process and nbytes >= self.ce_auto_min_bytes:
            return "ce"
        return "sm"

    def forms(self) -> list[dict]:
        """Keyword arguments of `run` for each mechanism with each algorithm it runs (what the tests cover)."""
        return [{"mechanism": m, **({"algorithm": a} if a else {})} for m in self.mechanisms
                for a in self.algorithms.get(m, (None,))]

    def variants(self, total_bytes: int, ranks: int) -> list[tuple[str, dict]]:
        """(implementation name, options of `run`) measured for S = `total_bytes` on `ranks` GPUs: the SM kernels
        once per algorithm ('pkit_sm_<algorithm>'), every other mechanism that fits once ('pkit_<mechanism>')."""
        out = []
        for mechanism in self.mechanisms:
            if mechanism == "sm" and self.algorithms.get("sm"):
                out += [(f"pkit_sm_{a}", {"algorithm": a, "mechanism": "sm"}) for a in self.algorithms["sm"]]
            elif fits(mechanism, self.per_peer(total_bytes, ranks)):
                out.append((f"pkit_{mechanism}", {"mechanism": mechanism}))
        return out


def lookup(registry: Mapping[str, object], name: str, arg: str):
    """registry[name], or a ValueError naming argument `arg` and the known names."""
    if name not in registry:
        raise ValueError(f"{arg}: expected one of {list(registry)}, got {name!r}")
    return registry[name]


def listing(registry: Mapping[str, object], *fields: str):
    """A DataFrame with one row per entry of `registry` and the named `fields` as columns (tuples joined)."""
    import pandas as pd

    def cell(value):
        return ", ".join(value) if isinstance(value, tuple) else value

    return pd.DataFrame([{f: cell(getattr(entry, f)) for f in fields} for entry in registry.values()])


def _share(x: np.ndarray, rank: int, ranks: int) -> np.ndarray:
    """The `rank`-th of `ranks` equal shares of `x`."""
    share = len(x) // ranks
    return x[rank * share:(rank + 1) * share]


def _sum(inputs, rank):
    return np.sum(inputs, axis=0)


def _sum_share(inputs, rank):
    return _share(np.sum(inputs, axis=0), rank, len(inputs))


def _concatenation(inputs, rank):
    return np.concatenate(inputs)


def _transposition(inputs, rank):
    return np.concatenate([_share(x, rank, len(inputs)) for x in inputs])


def _equal(elements: int, ranks: int) -> tuple[int, int]:
    return elements, elements


def _gathered(elements: int, ranks: int) -> tuple[int, int]:
    return elements // ranks, elements


def _scattered(elements: int, ranks: int) -> tuple[int, int]:
    return elements, elements // ranks


def _whole(nbytes: int, ranks: int) -> int:
    return nbytes


def _one_share(nbytes: int, ranks: int) -> int:
    return nbytes // ranks


def _peers_share(ranks: int) -> float:
    return (ranks - 1) / ranks


def _twice_peers_share(ranks: int) -> float:
    return 2 * (ranks - 1) / ranks


# "auto" thresholds, in bytes one rank sends one peer: from results/h200x2-nv18/collectives_pkit_nccl.csv (the
# reduce-scatter CE threshold lies between the measured tie at 128 MiB shares and the win at 512 MiB).
COLLECTIVES = {c.name: c for c in (
    CollectiveOp("all_reduce", "every rank gets the sum of every rank's buffer", Collectives.all_reduce, _sum,
                 _equal, _whole, _twice_peers_share, reduces=True,
                 algorithms={"sm": ("one_shot", "two_shot"), "ll": ("one_shot",), "ce": ("one_shot", "two_shot")},
                 ll_auto_max_bytes=1 << 20, ce_auto_min_bytes=256 << 20),
    CollectiveOp("all_gather", "every rank gets every rank's share, in rank order", Collectives.all_gather,
                 _concatenation, _gathered, _one_share, _peers_share, ll_auto_max_bytes=512 << 10),
    CollectiveOp("reduce_scatter", "rank r gets the sum of every rank's r-th share", Collectives.reduce_scatter,
                 _sum_share, _scattered, _one_share, _peers_share, reduces=True, ll_auto_max_bytes=512 << 10,
                 ce_auto_min_bytes=256 << 20),
    CollectiveOp("all_to_all", "rank r gets every rank's r-th share, in rank order", Collectives.all_to_all,
                 _transposition, _equal, _one_share, _peers_share, ll_auto_max_bytes=512 << 10),
)}


def collective(name: str) -> CollectiveOp:
    """The registry entry of op `name`.

    >>> collective("all_gather").counts(1024, 4)  # (input, output) elements for S = 1024 elements on 4 GPUs
    (256, 1024)
    """
    return lookup(COLLECTIVES, name, "op")


def list_collectives():
    """The registered collectives as a DataFrame: name, description, mechanisms, reduces.

    >>> list_collectives()["name"].tolist()
    ['all_reduce', 'all_gather', 'reduce_scatter', 'all_to_all']
    """
    return listing(COLLECTIVES, "name", "description", "mechanisms", "reduces")


def per_peer_bytes(op: str, total_bytes: int, ranks: int) -> int:
    """What one rank sends one peer in the one-shot form of `op` over nccl-tests' size S = `total_bytes`: the
    whole buffer for all-reduce, one share otherwise (the `nbytes` of `choose`)."""
    return collective(op).per_peer(total_bytes, ranks)


def choose(op: str, nbytes: int, mechanism: str, single_process: bool = True) -> str:
    """The mechanism for a collective: the override if given, else what measured fastest on 2×H200
    (results/h200x2-nv18/collectives_pkit_nccl.csv). `nbytes`: what one rank sends one peer in the one-shot
    form (`per_peer_bytes`). LL packets up to the op's `ll_auto_max_bytes`, the copy-engine pipeline from its
    `ce_auto_min_bytes` (one process only), SM kernels for the rest (`CollectiveOp.auto`)."""
    entry = collective(op)
    if mechanism == "auto":
        return entry.auto(nbytes, single_process)
    if mechanism not in entry.mechanisms:
        raise ValueError(f"mechanism: expected one of {['auto', *entry.mechanisms]}, got {mechanism!r}")
    return mechanism


def bus_bandwidth_factor(op: str, ranks: int) -> float:
    """nccl-tests' busbw / algbw factor: all-reduce 2(n−1)/n; all-gather, reduce-scatter, all-to-all (n−1)/n."""
    if ranks < 1:
        raise ValueError(f"ranks: expected a positive team size, got {ranks}")
    return collective(op).bus_factor(ranks)


def bandwidths(op: str, total_bytes: int, ranks: int, seconds: float) -> tuple[float, float]:
    """(algbw, busbw) in GB/s for a collective over `total_bytes` (nccl-tests' S) taking `seconds`."""
    if seconds <= 0 or total_bytes < 0:
        raise ValueError(f"seconds, total_bytes: expected positive time and non-negative size, got {seconds}, {total_bytes}")
    algbw = total_bytes / seconds / 1e9
    return algbw, algbw * bus_bandwidth_factor(op, ranks)
