"""Transfers by route and mechanism: the copy engine (`ce`), register-level 16-byte loads/stores issued by the
SMs (`sm`, `sm_push`, `sm_pull`), TMA bulk copies (`tma`, `tma_push`, `tma_pull`).

A copy goes along a `Route`: between two GPUs ("GPU0 → GPU1", a peer route), within one GPU's memory
("GPU0 → GPU0", local), from pinned host memory to a GPU ("CPU → GPU0") or back ("GPU0 → CPU"). Peer routes
name which GPU works (`_push`: the source, `_pull`: the destination); a route with one GPU involved has one
worker, so its SM and TMA mechanisms are plain `sm` and `tma`. `ROUTE_MECHANISMS` says which mechanisms a
route of each kind has. Each call enqueues one copy on the current CuPy stream of the GPU that does the work.
Host buffers are NumPy views of page-locked, mapped host memory (`pkit.experiments.hierarchy.memory.pinned`),
so the SMs reach them over PCIe.

Example:
    >>> r = Route.parse("CPU → GPU0")
    >>> r.kind, r.label, r.mechanisms, r.worker("sm")
    ('h2d', 'CPU → GPU0', ('ce', 'sm', 'tma'), 0)
    >>> Route(0, 1).mechanisms == ROUTE_MECHANISMS["peer"] and "sm_pull" in Route(0, 1).mechanisms
    True
    >>> expand(Route(0, 1), ["ce", "sm"]), expand(Route(0, 0), ["ce", "sm"])
    (['ce', 'sm_push', 'sm_pull'], ['ce', 'sm'])
    >>> [r.label for r in default_routes(n_gpus=1)]
    ['GPU0 → GPU0', 'CPU → GPU0', 'GPU0 → CPU']
    >>> peer_copy(y[1], x[0], "tma_push", blocks=16)  # x, y: SymmetricArrays   # doctest: +SKIP
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

import numpy as np

from .. import vocabulary
from ..launch import THREADS
from ..team import order_streams
from ..vocabulary import families, family

# The mechanisms of each kind of route, in pkit's words (pkit.vocabulary): `ce` is cudaMemcpyPeerAsync between
# GPUs and cudaMemcpyAsync (cudaMemcpyDefault) otherwise; `sm*` pkit's copy16 kernel; `tma*` its TMA kernel
# (tma_copy.cu).
ROUTE_MECHANISMS = {
    "peer": ("ce", *(vocabulary.mechanism(f, d) for f in ("sm", "tma") for d in vocabulary.DIRECTIONS)),
    "local": families("ce", "sm", "tma"),
    # TMA bulk copies (cp.async.bulk) to and from mapped host memory: tests/test_mechanisms.py checks them on the
    # GPU in a child process; were they to fault on a machine, dropping "tma" here leaves them out of every study.
    "h2d": families("ce", "sm", "tma"),
    "d2h": families("ce", "sm", "tma"),
}
MECHANISMS = ROUTE_MECHANISMS["peer"]  # the peer mechanisms (recorded 2-GPU results use these)
ALL_MECHANISMS = tuple(dict.fromkeys(m for names in ROUTE_MECHANISMS.values() for m in names))
HOST = "CPU"  # how route labels name the host
ARROW = " → "
TMA_CHUNK = 32 << 10  # bytes per pipeline stage; the kernel keeps 4 stages in flight per block
TMA_STAGES = 4


@dataclass(frozen=True)
class Route:
    """Where a copy goes: from `src` to `dst`, each a GPU index or None for pinned host memory."""

    src: int | None
    dst: int | None

    def __post_init__(self):
        ends = (self.src, self.dst)
        if not all(e is None or (isinstance(e, (int, np.integer)) and e >= 0) for e in ends) or ends == (None, None):
            raise ValueError(f"route: expected GPU ids >= 0 or None (the host) at both ends, not both the host, "
                             f"got src={self.src!r}, dst={self.dst!r}")

    @classmethod
    def parse(cls, text) -> "Route":
        """A Route from its label ('GPU0 → GPU1', 'CPU → GPU0'; '->' also reads) or a Route (returned as is)."""
        if isinstance(text, Route):
            return text
        ends = re.fullmatch(r"\s*(CPU|GPU\d+)\s*(?:→|->)\s*(CPU|GPU\d+)\s*", str(text))
        if not ends:
            raise ValueError(f"route: expected a label such as 'GPU0 → GPU1', 'GPU0 → GPU0', 'CPU → GPU0' or "
                             f"'GPU0 → CPU', got {text!r}")
        src, dst = (None if e == HOST else int(e[3:]) for e in ends.groups())
        return cls(src, dst)

    @property
    def kind(self) -> str:
        """'peer' (two GPUs), 'local' (one GPU's memory), 'h2d' or 'd2h' (pinned host memory and a GPU)."""
        if self.src is None:
            return "h2d"
        if self.dst is None:
            return "d2h"
        return "local" if self.src == self.dst else "peer"

    @property
    def label(self) -> str:
        name = lambda end: HOST if end is None else f"GPU{end}"  # noqa: E731
        return f"{name(self.src)}{ARROW}{name(self.dst)}"

    @property
    def gpus(self) -> tuple[int, ...]:
        """The GPUs the route touches, in order, each once."""
        return tuple(dict.fromkeys(int(e) for e in (self.src, self.dst) if e is not None))

    @property
    def mechanisms(self) -> tuple[str, ...]:
        return ROUTE_MECHANISMS[self.kind]

    def worker(self, mechanism: str) -> int:
        """The GPU whose copy engine or SMs move the bytes by `mechanism` (see module `worker`)."""
        return worker(mechanism, self.src, self.dst)

    def __str__(self) -> str:
        return self.label


def worker(mechanism: str, src: int | None, dst: int | None) -> int:
    """The GPU whose engines or SMs do the copy from `src` to `dst` (GPU ids; None: the host): `_pull` the
    destination, `_push` the source; `ce`, `sm` and `tma` the source GPU, or the destination when the source is
    the host."""
    if mechanism not in ALL_MECHANISMS:
        raise ValueError(f"mechanism: expected one of {ALL_MECHANISMS}, got {mechanism!r}")
    route = Route(src, dst)
    if mechanism in ("sm", "tma") and route.kind == "peer":
        raise ValueError(f"mechanism: {mechanism!r} names no GPU to run on between two GPUs; use "
                         f"{mechanism}_push (the source's) or {mechanism}_pull (the destination's)")
    if mechanism.endswith("_pull"):
        on = dst
    elif mechanism.endswith("_push") or src is not None:
        on = src
    else:
        on = dst
    if on is None:
        raise ValueError(f"mechanism: {mechanism!r} would run on the host; use one of {route.mechanisms} for "
                         f"{route.label}")
    return on


def expand(route: Route, names: Sequence[str] | None = None) -> list[str]:
    """The mechanisms of `route` among `names` (exact names, or families 'ce', 'sm', 'tma' standing for every
    mechanism of that engine the route has), in the order named; None: all of the route's mechanisms."""
    if names is None:
        return list(route.mechanisms)
    return list(dict.fromkeys(m for n in names for m in route.mechanisms if n in (m, family(m))))


def check_mechanisms(names: Sequence[str] | None, arg: str = "mechanisms") -> None:
    """Raise unless every name is a mechanism or a family ('ce', 'sm', 'tma') pkit knows (None passes)."""
    if names is None:
        return
    known = set(ALL_MECHANISMS) | {family(m) for m in ALL_MECHANISMS}
    unknown = [n for n in names if n not in known]
    if unknown or not list(names):
        raise ValueError(f"{arg}: unknown {unknown or list(names)}; expected names from {ALL_MECHANISMS} (or a "
                         "family: 'ce', 'sm', 'tma')")


def gpu_count() -> int:
    """GPUs this process sees (pkit.devices())."""
    from ..gpus import devices

    return len(devices())


def next_gpu(device: int, n_gpus: int) -> int | None:
    """The GPU after `device` (wrapping round) on a machine of `n_gpus`; None on a one-GPU machine."""
    return (device + 1) % n_gpus if n_gpus >= 2 else None


def default_route(src: int | None = None, dst: int | None = None, n_gpus: int | None = None) -> Route:
    """The route from GPU `src` (default 0) to GPU `dst` (default: the next GPU, or `src` itself on a
    one-GPU machine: a local copy), checked against the machine.

    Example:
        >>> default_route(n_gpus=2).label, default_route(n_gpus=1).label, default_route(1, n_gpus=4).label
        ('GPU0 → GPU1', 'GPU0 → GPU0', 'GPU1 → GPU2')
    """
    n = gpu_count() if n_gpus is None else n_gpus
    src = 0 if src is None else src
    if dst is None:
        Route(src, None)  # checks its type
        check_gpus("src", [src], n)
        after = next_gpu(src, n)
        dst = src if after is None else after
    route = Route(src, dst)
    check_routes([route], "src, dst", n)
    return route


def default_routes(n_gpus: int | None = None) -> list[Route]:
    """The routes a transfer study measures by default: the peer route GPU0 → GPU1 on a machine with two GPUs
    or more, else GPU0's local, host-to-device and device-to-host routes."""
    n = gpu_count() if n_gpus is None else n_gpus
    check_gpus("routes", [0], n)
    return [Route(0, 1)] if n >= 2 else [Route(0, 0), Route(None, 0), Route(0, None)]


def with_route(frame, route: str = "GPU0 → GPU1"):
    """`frame` (a transfer study's table) with a route column first: its own, or `route` for tables recorded before
    frames named their route (those were all measured GPU0 → GPU1).

    Example:
        >>> import pandas as pd
        >>> list(with_route(pd.DataFrame({"mechanism": ["ce"]})).itertuples(index=False))
        [Pandas(route='GPU0 → GPU1', mechanism='ce')]
    """
    return frame if "route" in frame.columns else frame.assign(route=route)[["route", *frame.columns]]


def check_routes(routes, arg: str = "routes", n_gpus: int | None = None) -> list[Route]:
    """`routes` (Routes or labels) parsed and checked against the machine: every GPU they name exists.

    Example:
        >>> check_routes(["GPU0 → GPU1"], n_gpus=1)
        Traceback (most recent call last):
        ...
        ValueError: routes: expected routes among GPU ids [0] and the host, got 'GPU0 → GPU1'; this machine has 1 GPU (a peer route needs two: use 'GPU0 → GPU0', 'CPU → GPU0' or 'GPU0 → CPU')
    """
    parsed = [Route.parse(r) for r in ([routes] if isinstance(routes, (str, Route)) else list(routes))]
    if not parsed:
        raise ValueError(f"{arg}: expected at least one route such as 'GPU0 → GPU0', got {routes!r}")
    n = gpu_count() if n_gpus is None else n_gpus
    for route in parsed:
        check_gpus(arg, route.gpus, n, route)
    return parsed


def check_gpus(arg: str, ids: Sequence[int], n: int | None = None, route: Route | None = None) -> None:
    """Raise unless every GPU id in `ids` (the argument `arg`; of `route` when given) is on a machine of `n`
    GPUs (default: this one's), naming what the machine has.

    Example:
        >>> check_gpus("gpus", [0, 1], n=1)
        Traceback (most recent call last):
        ...
        ValueError: gpus: expected GPU ids in [0, 1), got [0, 1]; this machine has 1 GPU (leave gpus=None for every GPU)
    """
    n = gpu_count() if n is None else n
    if all(0 <= i < n for i in ids):
        return
    what = repr(route.label) if route else repr(list(ids) if len(ids) > 1 else ids[0])
    has = f"this machine has {n} GPU{'' if n == 1 else 's'}"
    if n == 0:
        raise ValueError(f"{arg}: expected a GPU, got {what}; {has} (replay recorded results instead)")
    if route:
        fix = " (a peer route needs two: use 'GPU0 → GPU0', 'CPU → GPU0' or 'GPU0 → CPU')" if n == 1 else ""
        raise ValueError(f"{arg}: expected routes among GPU ids {list(range(n))} and the host, got {what}; {has}{fix}")
    raise ValueError(f"{arg}: expected GPU ids in [0, {n}), got {what}; {has} (leave {arg.split(',')[0]}=None for "
                     f"{'every GPU' if arg == 'gpus' else 'the default'})")


@lru_cache(maxsize=None)
def _kernel(engine: str):
    import pkit

    return pkit.compile("tma_copy.cu", "tma_copy") if engine == "tma" else pkit.compile("copy.cu", "copy16")


def _end(array) -> tuple[int | None, int]:
    """(GPU id or None for host memory, address) of a CuPy array or a NumPy view of pinned host memory."""
    if isinstance(array, np.ndarray):
        return None, array.ctypes.data
    return array.device.id, array.data.ptr


def _check_pinned(address: int, arg: str) -> None:
    import cupy as cp

    attributes = cp.cuda.runtime.pointerGetAttributes(address)
    if attributes.type != cp.cuda.runtime.memoryTypeHost or attributes.devicePointer != address:
        raise ValueError(f"{arg}: expected page-locked host memory mapped at the same address on the GPU "
                         "(pkit.experiments.hierarchy.memory.pinned), got pageable memory")


def peer_copy(dst_array, src_array, mechanism: str, blocks: int | None = None) -> None:
    """Copy `src_array` into `dst_array` (same byte size): CuPy arrays on GPUs (another GPU or the same) or a
    NumPy view of pinned host memory on one side. `mechanism` is one the route allows (`ROUTE_MECHANISMS`;
    on one GPU `sm_push`/`tma_push` also run, the same kernels as `sm`/`tma`).

    `blocks` sets how many SMs an SM mechanism uses (default: every SM for register copies, 32 for TMA).
    """
    import cupy as cp

    if mechanism not in ALL_MECHANISMS:
        raise ValueError(f"mechanism: expected one of {ALL_MECHANISMS}, got {mechanism!r}")
    nbytes = src_array.nbytes
    if dst_array.nbytes != nbytes or nbytes % 16:
        raise ValueError(f"dst_array, src_array: expected equal sizes in multiples of 16 bytes, got "
                         f"{dst_array.nbytes} and {nbytes}")
    if blocks is not None and not (isinstance(blocks, (int, np.integer)) and 1 <= blocks <= 1024):
        raise ValueError(f"blocks: expected an integer in [1, 1024], got {blocks!r}")
    (src, s), (dst, d) = _end(src_array), _end(dst_array)
    on = worker(mechanism, src, dst)
    for end, address, arg in ((src, s, "src_array"), (dst, d, "dst_array")):
        if end is None:
            _check_pinned(address, arg)
    engine = family(mechanism)
    if engine == "ce":
        with cp.cuda.Device(on):
            stream = cp.cuda.get_current_stream().ptr
            if Route(src, dst).kind == "peer":
                cp.cuda.runtime.memcpyPeerAsync(d, dst, s, src, nbytes, stream)
            else:
                cp.cuda.runtime.memcpyAsync(d, s, nbytes, cp.cuda.runtime.memcpyDefault, stream)
        return
    d, s = np.uint64(d), np.uint64(s)
    if engine == "sm":
        n16 = nbytes // 16
        grid = blocks or min(4 * _sms(on), max(1, -(-n16 // THREADS)))
        _kernel(engine)((grid,), (THREADS,), (d, s, np.uint64(n16)), device=on)
    else:
        _kernel(engine)((blocks or 32,), (32,), (d, s, np.uint64(nbytes), np.uint32(TMA_CHUNK)),
                        shared_mem=TMA_STAGES * (TMA_CHUNK + 8), device=on)


def split_copy(dst_array, src_array, first: str, second: str, fraction: float) -> None:
    """One copy by two mechanisms at once: the leading `fraction` of the bytes by `first` (a copy engine or
    an SM mechanism with every SM), the rest by `second`; the two must run on different GPUs (e.g. the source
    pushes while the destination pulls). The call is joined: the second GPU's stream waits for the first's
    position at the call, and the first waits for the second's part, so a timer on the first GPU's stream
    reads the whole copy.

    Example:
        >>> split_copy(y[1], x[0], "sm_push", "sm_pull", 0.5)                 # doctest: +SKIP
    """
    for arg, mechanism in (("first", first), ("second", second)):
        if mechanism not in MECHANISMS:
            raise ValueError(f"{arg}: expected one of {MECHANISMS}, got {mechanism!r}")
    if not 0 <= fraction <= 1:
        raise ValueError(f"fraction: expected a share of the bytes in [0, 1], got {fraction!r}")
    src, dst = src_array.device.id, dst_array.device.id
    a, b = worker(first, src, dst), worker(second, src, dst)
    if a == b:
        raise ValueError(f"first, second: expected mechanisms that run on different GPUs, both run on GPU {a}")
    cut = int(src_array.nbytes * fraction) // 16 * 16
    order_streams(after=[(a, None)], waiting=[(b, None)])  # b starts where a's stream is at the call
    if cut:
        peer_copy(dst_array[:cut], src_array[:cut], first)
    if cut < src_array.nbytes:
        peer_copy(dst_array[cut:], src_array[cut:], second)
    order_streams(after=[(b, None)], waiting=[(a, None)])  # a's stream goes on once b's part is done


def _sms(device: int) -> int:
    import pkit

    return pkit.devices()[device].sms
