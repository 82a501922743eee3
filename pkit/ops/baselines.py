"""Baselines measured beside pkit's collectives: NCCL driven from one process through CuPy.

(torch.distributed and torch symmetric memory run one process per GPU: see
`pkit.experiments.collectives.pytorch`.)

Example:
    >>> from pkit.ops.baselines import NcclCollectives
    >>> nccl = NcclCollectives(team)                             # doctest: +SKIP
    >>> nccl.all_reduce(y, x); team.synchronize()                # doctest: +SKIP
"""
from __future__ import annotations

import numpy as np

from .collective_ops import COLLECTIVES, collective

# ncclDataType_t and ncclRedOp_t values from nccl.h
NCCL_DTYPE = {"float32": 7, "bfloat16": 9, "uint8": 1, "int32": 2, "uint32": 3}
NCCL_SUM = 0


def runs(op: str) -> bool:
    """Whether the baseline runs registered op `op`: the NCCL call its entry names is one of NCCL_CALLS."""
    return collective(op).nccl in NCCL_CALLS


class NcclCollectives:
    """NCCL communicators for every GPU of a one-process Team; same call shapes as pkit's Collectives: `run(op, out,
    inp)`, and a method of each registered op's name whose NCCL call it has (`runs`)."""

    def __init__(self, team):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from cupy.cuda import nccl

        if team.rank is not None:
            raise ValueError("team: NcclCollectives needs one process driving every GPU")
        team.require_gpu_per_rank("NcclCollectives")
        self.team, self._nccl = team, nccl
        self.comms = nccl.NcclCommunicator.initAll(list(team.devices))

    def run(self, op: str, out, inp, root: int | None = None) -> None:
        """Registered op `op` by the NCCL call its entry names (`CollectiveOp.nccl`); a rooted op from or to `root`
        (default 0), as NCCL runs it: a broadcast writes every rank's output, a reduce the root's alone."""
        if not runs(op):
            raise ValueError(f"op: the NCCL baseline runs {[name for name in COLLECTIVES if runs(name)]}, got {op!r}")
        entry = collective(op)
        root = entry.root(root, self.team.size)
        NCCL_CALLS[entry.nccl](self, out, inp, *(() if root is None else (root,)))

    def all_reduce(self, out, inp) -> None:
        """NCCL's all-reduce (`run`)."""
        self.run("all_reduce", out, inp)

    def all_gather(self, out, inp) -> None:
        """NCCL's all-gather (`run`)."""
        self.run("all_gather", out, inp)

    def reduce_scatter(self, out, inp) -> None:
        """NCCL's reduce-scatter (`run`)."""
        self.run("reduce_scatter", out, inp)

    def all_to_all(self, out, inp) -> None:
        """NCCL's all-to-all as grouped sends and receives (`run`)."""
        self.run("all_to_all", out, inp)

    def broadcast(self, out, inp, root: int = 0) -> None:
        """NCCL's broadcast from rank `root` (`run`)."""
        self.run("broadcast", out, inp, root)

    def reduce(self, out, inp, root: int = 0) -> None:
        """NCCL's reduce into rank `root` (`run`)."""
        self.run("reduce", out, inp, root)

    def _each(self, call) -> None:
        import cupy as cp

        self._nccl.groupStart()
        try:
            for r, comm in enumerate(self.comms):
                with cp.cuda.Device(self.team.devices[r]):
                    call(r, comm, cp.cuda.get_current_stream().ptr)
        finally:
            self._nccl.groupEnd()

    @staticmethod
    def _dtype(array) -> int:
        if array.dtype not in NCCL_DTYPE:
            raise ValueError(f"dtype: NCCL baseline supports {sorted(NCCL_DTYPE)}, got {array.dtype}")
        return NCCL_DTYPE[array.dtype]

    def all_gather_in_place(self, buffer) -> None:
        """buffer[r] = every rank's share in rank order, where rank q's share starts in its place in buffer[q]."""
        share = int(np.prod(buffer.shape)) // self.team.size
        step, dt = share * buffer.storage_dtype.itemsize, self._dtype(buffer)
        self._each(lambda r, c, s: c.allGather(buffer.address(r) + r * step, buffer.address(r), share, dt, s))


# Each NCCL call the baseline makes, by its name in the registry (`CollectiveOp.nccl`).

def _all_reduce(nccl: NcclCollectives, out, inp) -> None:
    n, dt = int(np.prod(inp.shape)), nccl._dtype(inp)
    nccl._each(lambda r, c, s: c.allReduce(inp[r].data.ptr, out[r].data.ptr, n, dt, NCCL_SUM, s))


def _all_gather(nccl: NcclCollectives, out, inp) -> None:
    n, dt = int(np.prod(inp.shape)), nccl._dtype(inp)
    nccl._each(lambda r, c, s: c.allGather(inp[r].data.ptr, out[r].data.ptr, n, dt, s))


def _reduce_scatter(nccl: NcclCollectives, out, inp) -> None:
    n, dt = int(np.prod(out.shape)), nccl._dtype(out)
    nccl._each(lambda r, c, s: c.reduceScatter(inp[r].data.ptr, out[r].data.ptr, n, dt, NCCL_SUM, s))


def _send_recv(nccl: NcclCollectives, out, inp) -> None:
    """Rank r sends its q-th share to rank q, which receives it as its r-th (an all-to-all)."""
    size = nccl.team.size
    share = int(np.prod(inp.shape)) // size
    step, dt = share * inp.storage_dtype.itemsize, nccl._dtype(inp)

    def exchange(r, comm, stream):
        for q in range(size):
            comm.send(inp[r].data.ptr + q * step, share, dt, q, stream)
            comm.recv(out[r].data.ptr + q * step, share, dt, q, stream)

    nccl._each(exchange)


def _broadcast(nccl: NcclCollectives, out, inp, root: int) -> None:
    n, dt = int(np.prod(inp.shape)), nccl._dtype(inp)
    nccl._each(lambda r, c, s: c.broadcast(inp[r].data.ptr, out[r].data.ptr, n, dt, root, s))


def _reduce(nccl: NcclCollectives, out, inp, root: int) -> None:
    n, dt = int(np.prod(inp.shape)), nccl._dtype(inp)
    nccl._each(lambda r, c, s: c.reduce(inp[r].data.ptr, out[r].data.ptr, n, dt, NCCL_SUM, root, s))


NCCL_CALLS = {"allReduce": _all_reduce, "allGather": _all_gather, "reduceScatter": _reduce_scatter,
              "send/recv": _send_recv, "broadcast": _broadcast, "reduce": _reduce}
"""call(nccl, out, inp), with the root after them for a rooted op's call."""
