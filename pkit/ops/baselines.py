"""Baselines measured beside pkit's collectives: NCCL driven from one process through CuPy.

(torch.distributed and torch symmetric memory run one process per GPU: see
`pkit.experiments.torch_collectives`.)

Example:
    >>> from pkit.ops.baselines import NcclCollectives
    >>> nccl = NcclCollectives(team)                             # doctest: +SKIP
    >>> nccl.all_reduce(y, x); team.synchronize()                # doctest: +SKIP
"""
from __future__ import annotations

import numpy as np

# ncclDataType_t and ncclRedOp_t values from nccl.h
NCCL_DTYPE = {"float32": 7, "bfloat16": 9, "uint8": 1, "int32": 2, "uint32": 3}
NCCL_SUM = 0


class NcclCollectives:
    """NCCL communicators for every GPU of a one-process Team; same call shapes as pkit's Collectives."""

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

    def all_reduce(self, out, inp) -> None:
        n, dt = int(np.prod(inp.shape)), self._dtype(inp)
        self._each(lambda r, c, s: c.allReduce(inp[r].data.ptr, out[r].data.ptr, n, dt, NCCL_SUM, s))

    def all_gather(self, out, inp) -> None:
        n, dt = int(np.prod(inp.shape)), self._dtype(inp)
        self._each(lambda r, c, s: c.allGather(inp[r].data.ptr, out[r].data.ptr, n, dt, s))

    def all_gather_in_place(self, buffer) -> None:
        """buffer[r] = every rank's share in rank order, where rank q's share starts in its place in buffer[q]."""
        share = int(np.prod(buffer.shape)) // self.team.size
        step, dt = share * buffer.storage_dtype.itemsize, self._dtype(buffer)
        self._each(lambda r, c, s: c.allGather(buffer.address(r) + r * step, buffer.address(r), share, dt, s))

    def reduce_scatter(self, out, inp) -> None:
        n, dt = int(np.prod(out.shape)), self._dtype(out)
        self._each(lambda r, c, s: c.reduceScatter(inp[r].data.ptr, out[r].data.ptr, n, dt, NCCL_SUM, s))

    def all_to_all(self, out, inp) -> None:
        size = self.team.size
        share = int(np.prod(inp.shape)) // size
        step, dt = share * inp.storage_dtype.itemsize, self._dtype(inp)

        def exchange(r, comm, stream):
            for q in range(size):
                comm.send(inp[r].data.ptr + q * step, share, dt, q, stream)
                comm.recv(out[r].data.ptr + q * step, share, dt, q, stream)

        self._each(exchange)
