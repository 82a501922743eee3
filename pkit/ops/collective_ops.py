"""The collective registry: one `CollectiveOp` entry per op, the single source of its name, what it computes, its
buffer sizes, bus factor, torch.distributed and NCCL calls, and its kernels by family.

Everything that names ops reads COLLECTIVES: `pkit.ops.collectives.Collectives` (the methods and `run`),
`pkit.dist` (its functions), `pkit.ops.baselines.NcclCollectives`, the collectives experiments, the roofline
explorer (`pkit.widgets`) and the tests. docs/collectives.md says how to add an op.

Sizes are nccl-tests' S in elements (or bytes): each buffer is either one piece or n pieces (one per rank, in rank
order), where a piece is what one rank sends one peer in the one-shot form: S / n when either buffer is split by
rank, else the whole S. n is the team size.

Examples run in pkit.ops.collectives' docstring, which imports these names.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import reduce
from typing import Callable, Mapping

import numpy as np

from ..vocabulary import families

REDUCIBLE = {"float32": "float", "bfloat16": "__nv_bfloat16"}  # dtype -> the C++ type the kernels sum in
COLLECTIVE_MECHANISMS = ("auto", *families("sm", "ll", "ce"))  # `mechanism` of Collectives (pkit.vocabulary's families)
LL_MAX_BYTES = 1 << 20  # largest LL payload one rank sends one peer (sizes the staging buffer)
ROOTED = {"source": "only the root's input moves: every rank gets it",
          "sink": "only the root's output is written: other ranks' outputs are left as they were"}
"""`rooted` of a CollectiveOp: how a rooted op uses its root (NCCL's `root`, torch.distributed's `src` or `dst`)."""
KERNEL_FILES = {"sm": "collectives.cu", "ll": "ll_collectives.cu", "staged": "staged_collectives.cu"}
"""Kernel family -> its file under pkit/kernels/: register-level kernels (Collectives' "sm"), LL packets ("ll"),
and the staged kernels pkit.dist runs on plain torch tensors."""


@dataclass(frozen=True)
class CollectiveOp:
    """One collective: what it computes and how pkit runs, sizes, measures and checks it."""

    name: str  # key of COLLECTIVES, `op` column of results, method of Collectives and function of pkit.dist
    description: str  # one line: what each rank's output holds
    reference: Callable[[list, int, int], np.ndarray | None]  # rank r's output from every input, given the root
    bus_factor: Callable[[int], float]  # nccl-tests' busbw / algbw for n ranks: the link bytes per GPU over S
    traffic: str  # what each GPU moves over its links, in words (the roofline explorer shows it)
    kernels: Mapping[str, tuple[str, ...]]  # family (KERNEL_FILES) -> kernel names, one per algorithm it runs
    input_by_rank: bool = False  # the input holds one piece per rank (S elements), else one piece
    output_by_rank: bool = False  # the output holds one piece per rank, else one piece
    reduces: bool = False  # sums float32 or bfloat16 (REDUCIBLE); its kernels are templates over the summed type
    summands: str | None = None  # a reduction's move that brings rank r, in rank order, every part r sums
    torch: str | None = None  # the torch.distributed function, called (output, input), then the root if rooted
    torch_in_place: bool = False  # ... or on one tensor that is both
    nccl: str | None = None  # the NCCL call of the one-process baseline (pkit.ops.baselines.NCCL_CALLS)
    mechanisms: tuple[str, ...] = COLLECTIVE_MECHANISMS[1:]  # Collectives' mechanisms that run it; "sm": auto's fallback
    algorithms: Mapping[str, tuple[str, ...]] = field(default_factory=dict)  # mechanism or family -> algorithms
    ll_auto_max_bytes: int = -1  # "auto" picks "ll" up to this many bytes per peer (-1: never)
    ce_auto_min_bytes: float = math.inf  # "auto" picks "ce" from this many bytes per peer (one process only)
    rooted: str | None = None  # ROOTED: "source" (only the root's input moves) or "sink" (only its output is written)

    def __post_init__(self):
        if not self.name.isidentifier():
            raise ValueError(f"name: expected a Python identifier (it names a method of Collectives), got {self.name!r}")
        if self.rooted not in (None, *ROOTED):
            raise ValueError(f"rooted: expected None or one of {list(ROOTED)}, got {self.rooted!r}")
        picks = ["sm"] + ["ll"] * (self.ll_auto_max_bytes >= 0) + ["ce"] * (self.ce_auto_min_bytes < math.inf)
        if not set(picks) <= set(self.mechanisms):
            raise ValueError(f"mechanisms: {self.name} needs {picks} (what auto may pick), got {self.mechanisms}")

    def root(self, root: int | None, ranks: int) -> int | None:
        """The root a call runs with: `root` (default 0) checked to be a rank of `ranks` for a rooted op, None for
        another (which takes none)."""
        if self.rooted is None:
            if root is not None:
                raise ValueError(f"root: expected None ({self.name} has no root), got {root!r}")
            return None
        root = 0 if root is None else root
        if isinstance(root, bool) or not isinstance(root, (int, np.integer)) or not 0 <= root < ranks:
            raise ValueError(f"root: expected a rank of the team, 0 to {ranks - 1}, got {root!r}")
        return int(root)

    def writes(self, rank: int, root: int | None) -> bool:
        """Whether a call rooted at `root` writes rank `rank`'s output (all but a "sink" op's non-root ranks)."""
        return self.rooted != "sink" or rank == root

    def per_peer(self, total: int, ranks: int) -> int:
        """One piece: what one rank sends one peer in the one-shot form, for S = `total` (elements or bytes)."""
        return total // ranks if self.input_by_rank or self.output_by_rank else total

    def counts(self, total: int, ranks: int) -> tuple[int, int]:
        """(input, output) elements per rank for S = `total` elements on `ranks` ranks."""
        piece = self.per_peer(total, ranks)
        return total if self.input_by_rank else piece, total if self.output_by_rank else piece

    def pieces(self, ranks: int) -> tuple[int, int]:
        """(input, output) pieces per rank on `ranks` ranks: 1, or `ranks` for a buffer split by rank."""
        return ranks if self.input_by_rank else 1, ranks if self.output_by_rank else 1

    def kernel(self, family: str, ctype: str | None = None, algorithm: str | None = None) -> str:
        """The NVRTC name expression of this op's `family` kernel: the one for `algorithm` where the family runs
        several (`algorithms[family]`, same order as `kernels[family]`), templated on `ctype` for a reduction."""
        names = self.kernels[family]
        base = names[self.algorithms[family].index(algorithm)] if algorithm else names[0]
        return f"{base}<{ctype}>" if self.reduces else base

    def auto(self, nbytes: int, single_process: bool) -> str:
        """The mechanism "auto" picks when one rank sends `nbytes` to one peer (see `choose`)."""
        if nbytes <= self.ll_auto_max_bytes:
            return "ll"
        if single_process and nbytes >= self.ce_auto_min_bytes:
            return "ce"
        return "sm"

    def forms(self) -> list[dict]:
        """Keyword arguments of `Collectives.run` for each mechanism with each algorithm it runs (what the tests
        cover)."""
        return [{"mechanism": m, **({"algorithm": a} if a else {})} for m in self.mechanisms
                for a in self.algorithms.get(m, (None,))]

    def variants(self, total_bytes: int, ranks: int) -> list[tuple[str, dict]]:
        """(implementation name, options of `Collectives.run`) measured for S = `total_bytes` on `ranks` GPUs: the SM
        kernels once per algorithm ('pkit_sm_<algorithm>'), every other mechanism that fits once
        ('pkit_<mechanism>')."""
        out = []
        for mechanism in self.mechanisms:
            if mechanism == "sm" and self.algorithms.get("sm"):
                out += [(f"pkit_sm_{a}", {"algorithm": a, "mechanism": "sm"}) for a in self.algorithms["sm"]]
            elif fits(mechanism, self.per_peer(total_bytes, ranks)):
                out.append((f"pkit_{mechanism}", {"mechanism": mechanism}))
        return out


def fits(mechanism: str, nbytes: int) -> bool:
    """Whether `mechanism` can send `nbytes` to one peer in one call ('ll': at most LL_MAX_BYTES)."""
    return mechanism != "ll" or nbytes <= LL_MAX_BYTES


# References: rank r's output from every rank's input (a list, rank order) as NumPy arrays whose dimension 0 splits
# into shares, for a call rooted at `root` (unrooted ops ignore it); None where the call leaves rank r's output as it
# was. Sums add in rank order in the inputs' dtype, as the kernels do in fp32.

def _share(x: np.ndarray, rank: int, ranks: int) -> np.ndarray:
    """The `rank`-th of `ranks` equal shares of `x` along dimension 0."""
    share = len(x) // ranks
    return x[rank * share:(rank + 1) * share]


def _sum(inputs, rank, root=0):
    return reduce(np.add, inputs)


def _sum_share(inputs, rank, root=0):
    return _share(_sum(inputs, rank), rank, len(inputs))


def _concatenation(inputs, rank, root=0):
    return np.concatenate(inputs)


def _transposition(inputs, rank, root=0):
    return np.concatenate([_share(x, rank, len(inputs)) for x in inputs])


def _root_input(inputs, rank, root=0):
    return inputs[root]


def _sum_at_root(inputs, rank, root=0):
    return _sum(inputs, rank) if rank == root else None


def _whole(ranks: int) -> float:
    return 1.0


def _peers_share(ranks: int) -> float:
    return (ranks - 1) / ranks


def _twice_peers_share(ranks: int) -> float:
    return 2 * (ranks - 1) / ranks


# "auto" thresholds, in bytes one rank sends one peer: from results/h200x2-nv18/collectives_pkit_nccl.csv (the
# reduce-scatter CE threshold lies between the measured tie at 128 MiB shares and the win at 512 MiB).
COLLECTIVES = {c.name: c for c in (
    CollectiveOp("all_reduce", "every rank gets the sum of every rank's buffer", _sum, _twice_peers_share,
                 "reduce-scatter then all-gather: 2(n-1)/n of the message",
                 kernels={"sm": ("all_reduce_one_shot", "all_reduce_two_shot"), "ll": ("all_reduce_ll",),
                          "staged": ("staged_all_reduce", "staged_all_reduce_two_shot")},
                 reduces=True, summands="all_gather", torch="all_reduce", torch_in_place=True, nccl="allReduce",
                 algorithms={"sm": ("one_shot", "two_shot"), "ll": ("one_shot",), "ce": ("one_shot", "two_shot"),
                             "staged": ("one_shot", "two_shot")},
                 ll_auto_max_bytes=1 << 20, ce_auto_min_bytes=256 << 20),
    CollectiveOp("all_gather", "every rank gets every rank's share, in rank order", _concatenation, _peers_share,
                 "each GPU receives the (n-1)/n of the gathered message it lacks",
                 kernels={"sm": ("all_gather",), "ll": ("all_gather_ll",), "staged": ("staged_all_gather",)},
                 output_by_rank=True, torch="all_gather_into_tensor", nccl="allGather", ll_auto_max_bytes=512 << 10),
    CollectiveOp("reduce_scatter", "rank r gets the sum of every rank's r-th share", _sum_share, _peers_share,
                 "each GPU sends the (n-1)/n of its message that others own",
                 kernels={"sm": ("reduce_scatter",), "ll": ("reduce_scatter_ll",),
                          "staged": ("staged_reduce_scatter",)},
                 input_by_rank=True, reduces=True, summands="all_to_all", torch="reduce_scatter_tensor",
                 nccl="reduceScatter", ll_auto_max_bytes=512 << 10, ce_auto_min_bytes=256 << 20),
    CollectiveOp("all_to_all", "rank r gets every rank's r-th share, in rank order", _transposition, _peers_share,
                 "each GPU sends the (n-1)/n of its message meant for the others",
                 kernels={"sm": ("all_to_all",), "ll": ("all_to_all_ll",), "staged": ("staged_all_to_all",)},
                 input_by_rank=True, output_by_rank=True, torch="all_to_all_single", nccl="send/recv",
                 ll_auto_max_bytes=512 << 10),
    # The rooted ops: auto keeps to "sm" until a measurement on two GPUs or more says where "ll" and "ce" win.
    CollectiveOp("broadcast", "every rank gets the root's buffer", _root_input, _whole,
                 "the root sends its whole message to every peer (a pipelined ring: the message once per GPU)",
                 kernels={"sm": ("broadcast",), "ll": ("broadcast_ll",)}, torch="broadcast", torch_in_place=True, nccl="broadcast",
                 rooted="source"),
    CollectiveOp("reduce", "the root gets the sum of every rank's buffer; other ranks' outputs are left as they were",
                 _sum_at_root, _whole,
                 "every peer sends its whole message towards the root (a pipelined ring: the message once per GPU)",
                 kernels={"sm": ("reduce",), "ll": ("reduce_ll",)}, reduces=True, summands="all_gather",
                 torch="reduce", torch_in_place=True, nccl="reduce", rooted="sink"),
)}


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


def collective(name: str) -> CollectiveOp:
    """The registry entry of op `name` (a ValueError naming the registered ops if there is none)."""
    return lookup(COLLECTIVES, name, "op")


def list_collectives():
    """The registered collectives as a DataFrame: name, description, mechanisms, reduces."""
    return listing(COLLECTIVES, "name", "description", "mechanisms", "reduces")


def kernel_names(family: str) -> tuple[str, ...]:
    """NVRTC name expressions of every registered op's kernels of `family` (KERNEL_FILES), reductions
    instantiated for each type of REDUCIBLE: what the family's module compiles."""
    return tuple(op.kernel(family, ctype, algorithm) for op in COLLECTIVES.values() if family in op.kernels
                 for algorithm in op.algorithms.get(family, (None,))
                 for ctype in (REDUCIBLE.values() if op.reduces else (None,)))


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
    """nccl-tests' busbw / algbw factor (the entry's `bus_factor`): e.g. all-reduce 2(n−1)/n, all-gather (n−1)/n,
    broadcast 1."""
    if ranks < 1:
        raise ValueError(f"ranks: expected a positive team size, got {ranks}")
    return collective(op).bus_factor(ranks)


def bandwidths(op: str, total_bytes: int, ranks: int, seconds: float) -> tuple[float, float]:
    """(algbw, busbw) in GB/s for a collective over `total_bytes` (nccl-tests' S) taking `seconds`."""
    if seconds <= 0 or total_bytes < 0:
        raise ValueError(f"seconds, total_bytes: expected positive time and non-negative size, got {seconds}, {total_bytes}")
    algbw = total_bytes / seconds / 1e9
    return algbw, algbw * bus_bandwidth_factor(op, ranks)
