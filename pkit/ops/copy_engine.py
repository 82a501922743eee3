"""Copy-engine collectives: `cudaMemcpyPeerAsync` moves the data, CUDA events order it across GPUs.

One process drives every GPU of the team (events cannot be waited on across processes here).

* Moves (all-gather, all-to-all): each rank's copy engine writes its shares straight into the peers' outputs.
* Reductions (reduce-scatter; all-reduce one-shot, where every rank owns the whole buffer, or two-shot, where
  rank r owns share r): the part each rank owns is cut into chunks. For chunk c,
  every peer's copy engine pushes its part into the owner's staging slot c mod SLOTS; the owner's SMs add the
  parts to its own (`reduce_staged`, a local HBM-bound kernel); for two-shot all-reduce a second copy-engine
  stream then pushes the summed chunk into every peer's output. Pushes of later chunks overlap the sum of chunk c
  and the gather of earlier ones, so both directions of every link stay busy. The sums get every SM: they
  are short HBM-bound bursts, and with half the SMs the pushes stalled on staging slots (a probe at commit
  281de38 timed the 1 GiB all-reduce slower that way).

Example:
    >>> import pkit
    >>> from pkit.ops.collectives import Collectives
    >>> team = pkit.Team([0, 1]); coll = Collectives(team)                            # doctest: +SKIP
    >>> x = team.empty((1 << 29,), "bfloat16"); y = team.empty((1 << 29,), "bfloat16")   # doctest: +SKIP
    >>> coll.all_reduce(y, x, mechanism="ce"); team.synchronize()                        # doctest: +SKIP
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ..errors import PkitError
from ..launch import THREADS

# Each step queues ~10 operations per GPU. With 16 MiB steps, twenty 1 GiB calls queued behind a held stream
# (pkit.bench with hide_launch) outlasted the hold's timeout: the host most likely blocked on a full queue.
CHUNK_BYTES = 64 << 20  # largest pipeline step of the reductions
TAIL_BYTES = 2 << 20  # the steps halve towards the end down to this, so the last (unhidden) sum is short
SLOTS = 4  # staging slots per peer: how far pushes may run ahead of the owner's sums


class CopyEngines:
    """Side streams and staging buffers for the copy-engine paths of one Team (created on first use)."""

    def __init__(self, team, chunk_bytes: int = CHUNK_BYTES, slots: int = SLOTS):
        if team.rank is not None:
            raise PkitError("mechanism: the copy engine path needs one process driving every GPU; use 'sm'")
        if chunk_bytes < 16 or chunk_bytes % 16:
            raise ValueError(f"chunk_bytes: expected a positive multiple of 16 bytes, got {chunk_bytes}")
        if slots < 1:
            raise ValueError(f"slots: expected at least 1 staging slot, got {slots}")
        self.team, self.chunk_bytes, self.slots = team, chunk_bytes, slots
        self._streams: dict[tuple[int, str], object] = {}
        self._staging: dict[int, object] = {}

    def _stream(self, rank: int, role: str):
        import cupy as cp

        if (rank, role) not in self._streams:
            with cp.cuda.Device(self.team.devices[rank]):
                self._streams[rank, role] = cp.cuda.Stream(non_blocking=True)
        return self._streams[rank, role]

    def _stage(self, rank: int) -> int:
        """Address of rank's staging: [slots][team size - 1 peers, nearest first][chunk_bytes]."""
        import cupy as cp

        if rank not in self._staging:
            with cp.cuda.Device(self.team.devices[rank]):
                self._staging[rank] = cp.empty(self.slots * (self.team.size - 1) * self.chunk_bytes, dtype=np.uint8)
        return self._staging[rank].data.ptr

    def _record(self, rank: int, stream=None):
        import cupy as cp

        with cp.cuda.Device(self.team.devices[rank]):
            event = cp.cuda.Event(disable_timing=True)
            event.record(stream)
        return event

    def _copy(self, dst: int, dst_rank: int, src: int, src_rank: int, nbytes: int, rank: int, role: str) -> None:
        """Enqueue a copy on `rank`'s `role` stream."""
        import cupy as cp

        devices = self.team.devices
        with cp.cuda.Device(devices[rank]):
            cp.cuda.runtime.memcpyPeerAsync(dst, devices[dst_rank], src, devices[src_rank], nbytes,
                                            self._stream(rank, role).ptr)

    def _lanes(self, roles: tuple[str, ...]) -> list[list]:
        """Each role's side streams, one per rank (what Team.fork and Team.join take)."""
        return [[self._stream(r, role) for r in range(self.team.size)] for role in roles]

    def move(self, out, inp, nbytes: int, plan: Callable[[int, int], tuple[int, int, int] | None]) -> None:
        """Rank r copies `nbytes` from inp[r] + src_off to out[q] + dst_off for each q, where
        plan(r, q) = (q, src_off, dst_off), or None where r sends q nothing (a broadcast: every rank but the root);
        the peer copies go first, starting with the next rank."""
        n = self.team.size
        self.team.fork(*self._lanes(("push",)))  # inputs ready, outputs free
        for r in range(n):
            for step in range(1, n + 1):
                if (copy := plan(r, (r + step) % n)) is not None:
                    q, src_off, dst_off = copy
                    self._copy(out[q].data.ptr + dst_off, q, inp[r].data.ptr + src_off, r, nbytes, r, "push")
        self.team.join(*self._lanes(("push",)))  # all writes landed, inputs read

    def reduce(self, out, inp, share: int, kernel: Callable, src_offset: Callable[[int], int],
               out_offset: Callable[[int], int], gather: bool, owners: Sequence[int] | None = None) -> None:
        """Sum rank r's part (`share` bytes at src_offset(r) of every inp[q]) into out[r] + out_offset(r) for every
        rank r of `owners` (default: every rank; a reduce to a root: the root alone, the others' outputs left as they
        were); with `gather`, also copy it to every peer's out[q] + out_offset(r). `kernel` is reduce_staged for the
        dtype."""
        import cupy as cp

        import pkit

        team, n = self.team, self.team.size
        owners = range(n) if owners is None else owners
        sms = [pkit.devices()[d].sms for d in team.devices]
        chunk = min(self.chunk_bytes, share)  # staging stride
        roles = ("push", "gather") if gather else ("push",)
        self.team.fork(*self._lanes(roles))
        reduced: dict[tuple[int, int], object] = {}
        for c, (start, size) in enumerate(steps(share, self.chunk_bytes, min(TAIL_BYTES, self.chunk_bytes))):
            slot = c % self.slots
            pushed = []
            for q in range(n):  # q pushes its part of every other owner's chunk c into the owner's staging
                stream = self._stream(q, "push")
                for step in range(1, n):
                    r = (q + step) % n
                    if r not in owners:
                        continue
                    if c >= self.slots:
                        stream.wait_event(reduced[r, c - self.slots])
                    self._copy(self._stage(r) + (slot * (n - 1) + (q - r) % n - 1) * chunk, r,
                               inp[q].data.ptr + src_offset(r) + start, q, size, q, "push")
                pushed.append(self._record(q, stream))
            for r in owners:
                dst = out[r].data.ptr + out_offset(r) + start
                with cp.cuda.Device(team.devices[r]):
                    for q in range(n):
                        if q != r:
                            cp.cuda.get_current_stream().wait_event(pushed[q])
                    grid = max(1, min(sms[r], -(-size // (16 * THREADS))))
                    kernel((grid,), (THREADS,), (np.uint64(inp[r].data.ptr + src_offset(r) + start),
                                                 np.uint64(self._stage(r) + slot * (n - 1) * chunk),
                                                 np.uint64(chunk // 16), np.uint64(dst), np.uint64(size // 16),
                                                 np.int32(r), np.int32(n)), device=team.devices[r])
                reduced[r, c] = self._record(r)
                if gather:
                    stream = self._stream(r, "gather")
                    stream.wait_event(reduced[r, c])
                    for step in range(1, n):
                        q = (r + step) % n
                        self._copy(out[q].data.ptr + out_offset(r) + start, q, dst, r, size, r, "gather")
        self.team.join(*self._lanes(roles))


def steps(nbytes: int, largest: int, smallest: int) -> list[tuple[int, int]]:
    """(offset, size) pipeline steps covering `nbytes`: `largest` while at least two of them remain, then
    halving (in 16-byte units) down to `smallest`, so the step left unhidden at the end is small.

    >>> [size >> 20 for _, size in steps(256 << 20, 64 << 20, 2 << 20)]
    [64, 64, 64, 32, 16, 8, 4, 2, 2]
    """
    out, start = [], 0
    while start < nbytes:
        left = nbytes - start
        size = left if left <= smallest else min(largest, max(smallest, left // 2 // 16 * 16))
        out.append((start, size))
        start += size
    return out
