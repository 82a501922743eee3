"""Copies released at a link's rate on one GPU, with the host's own cost kept out of the GPU's timeline.

A `Gate` is a 32-bit word in pinned host memory that streams wait on (cuStreamWaitValue32, done by the stream's
front end: no SM, no kernel). A `Pacer` enqueues a call's whole work first: the call's stream waits for the gate's
start ticket, and each paced piece of a copy waits for its own ticket. Then `release` opens the start ticket and
each piece's ticket when a link of the rate, started then, would have delivered the piece's last byte. The GPU
runs the call from the start ticket on, so what the host spends enqueueing (Python, the driver) is never timed,
and pieces land at the link's rate however slow the host is to enqueue them. A watchdog thread opens the gate
fully if the host has not released it within `Gate.timeout_s` (a host waiting for the GPU while it holds the gate
would otherwise wait forever); a call it had to open is reported as `Pacer.forced`.

Each piece is copied by cuMemcpyBatchAsync asking for a copy beside compute (`pkit.driver.memcpy_beside_compute`).
Within one GPU the driver may still run it as a kernel on the SMs; `copies_beside_full_gpu` measures whether it
does, beside the kernel that matters: pkit's GEMM holding one block per SM (all its registers and shared memory),
as ce_flags' GEMM does while it waits for the copies' flags.

Example:
    >>> piece_bytes(400e9), piece_bytes(64e9) >> 10                     # bytes per paced piece
    (8000000, 1250)
    >>> [n >> 20 for n in split(40 << 20, 16 << 20)]
    [16, 16, 8]
"""
from __future__ import annotations

import ctypes
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

PERIOD_S = 20e-6  # a paced piece every 20 µs at least
MIN_PIECE = 1 << 20
GATE_TIMEOUT_S = 10.0  # the watchdog opens a gate the host still holds after this long


def piece_bytes(rate_Bps: float, period_s: float = PERIOD_S) -> int:
    """Bytes per paced piece at `rate_Bps`: one piece per `period_s`, at least MIN_PIECE, a multiple of 16."""
    if not rate_Bps > 0:
        raise ValueError(f"rate_Bps: expected a positive rate, got {rate_Bps!r}")
    return max(MIN_PIECE, int(rate_Bps * period_s) // 16 * 16)


def split(nbytes: int, piece: int) -> list[int]:
    """`nbytes` as pieces of `piece` bytes, the last one shorter where they do not divide."""
    if nbytes < 0 or piece <= 0:
        raise ValueError(f"nbytes, piece: expected nbytes >= 0 and piece > 0, got {nbytes} and {piece}")
    return [min(piece, nbytes - at) for at in range(0, nbytes, piece)]


def memcpy(dst: int, src: int, nbytes: int, stream) -> None:
    """A local copy on `stream` (a CuPy stream of the current GPU), asked to stay off the SMs."""
    import cupy as cp

    from ...driver import memcpy_beside_compute

    memcpy_beside_compute(dst, src, nbytes, stream.ptr, cp.cuda.runtime.getDevice())


class Gate:
    """A ticket counter in pinned, mapped host memory: `wait(stream, ticket)` makes a CuPy stream wait until the
    counter reaches `ticket`; `open(ticket)` moves it there. Tickets only grow (`next_ticket`), so a gate serves
    call after call. `watch()` arms the watchdog for one call: past `timeout_s` it opens every ticket handed out
    and sets `forced`."""

    def __init__(self, timeout_s: float = GATE_TIMEOUT_S):
        import cupy as cp

        self._ptr = cp.cuda.runtime.hostAlloc(4, 2 | 1)  # cudaHostAllocMapped | cudaHostAllocPortable
        self._word = ctypes.c_uint32.from_address(self._ptr)
        self._word.value = 0
        self.issued, self.timeout_s, self.forced = 0, timeout_s, False
        self._done = threading.Event()

    def next_ticket(self) -> int:
        self.issued += 1
        return self.issued

    def wait(self, stream, ticket: int) -> None:
        from ...driver import stream_wait_value32

        stream_wait_value32(stream.ptr, self._ptr, ticket & 0xFFFFFFFF)  # compared modulo 2^32, as the word

    def open(self, ticket: int) -> None:
        self._word.value = ticket & 0xFFFFFFFF

    def watch(self) -> None:
        self._done.clear()
        threading.Thread(target=self._watchdog, daemon=True).start()

    def settle(self) -> None:
        """The call is released: every ticket handed out is open and the watchdog stands down."""
        self.open(self.issued)
        self._done.set()

    def _watchdog(self) -> None:
        if not self._done.wait(self.timeout_s):
            self.forced = True
            self.open(self.issued)

    def __del__(self):
        import cupy as cp

        if getattr(self, "_ptr", None):
            self.open(self.issued)
            cp.cuda.runtime.freeHost(self._ptr)


@dataclass
class Pacer:
    """Copies through one emulated link of `rate_Bps`. Per call: `begin(stream)` (the call's stream waits for the
    start), the call enqueues its copies by `copy` (each piece behind its ticket), then `release()` opens the start
    and each piece's ticket when the link would have delivered its last byte: a piece goes over the link once its
    copy's stream has reached the copy (seen by an event recorded there: a reduce-scatter after a GEMM starts when
    the GEMM is done) and the piece before it is through, taking bytes / rate; at once where the host is late, so
    the average holds. `releases` holds (seconds after the start, bytes) per piece; with `events`, CUDA events
    tell when the first copy was reached (`first_reached`) and the last one done (`last_end`). `gate=None`: nothing
    waits and every copy counts as reached at the start (tests pace a fake clock)."""

    rate_Bps: float
    period_s: float = PERIOD_S
    clock: Callable[[], float] = time.perf_counter
    enqueue: Callable = memcpy
    gate: object = field(default_factory=Gate)  # None: nothing waits (tests)
    events: bool = True
    moved: int = 0
    releases: list = field(default_factory=list)
    first_reached: object = None
    last_end: object = None
    forced: bool = False
    _start: int = 0
    _held: bool = False
    _last_stream: object = None
    _pending: list = field(default_factory=list)  # (ticket, bytes, event the copy's stream records on reaching it)

    def begin(self, stream=None, hold: bool = True) -> None:
        """A new call: `stream` (the call's current stream; its side streams fork from it) waits for the start.
        `hold=False` (a call's first, which may load modules: a load waits for the GPU, which would wait for the
        gate): nothing waits, the copies run as enqueued."""
        self.moved, self.releases, self.first_reached, self.last_end, self._pending = 0, [], None, None, []
        self._last_stream = None
        self._held = hold and self.gate is not None
        if self._held:
            self._start = self.gate.next_ticket()
            self.gate.wait(stream, self._start)
            self.gate.watch()

    def copy(self, dst: int, src: int, nbytes: int, stream) -> None:
        """Enqueue `nbytes` from address `src` to `dst` on `stream` (a CuPy stream), each piece behind its ticket."""
        behind = self._pending and self._last_stream is stream  # right behind the last copy: no wait of its own
        reached = None if behind else self._event(stream)
        self.first_reached = self.first_reached or reached
        self._last_stream = stream
        offset = 0
        for n in split(nbytes, piece_bytes(self.rate_Bps, self.period_s)):
            ticket = self.gate.next_ticket() if self._held else 0
            if self._held:
                self.gate.wait(stream, ticket)
            self.enqueue(dst + offset, src + offset, n, stream)
            self._pending.append((ticket, n, reached))
            reached = None
            offset += n
            self.moved += n
        self.last_end = self._event(stream) or self.last_end

    def release(self) -> None:
        """Open the start now and each piece when the link would have delivered it; every ticket is open after."""
        if self.gate is not None and not self._held:
            return  # nothing was held: the copies ran as enqueued
        t0 = self.clock()
        link_free = t0  # when the link is through with what it was given
        try:
            if self._held:
                self.gate.open(self._start)
            for ticket, n, reached in self._pending:
                if reached is not None and self._held:
                    while not reached.done:  # the copy's stream is not there yet
                        pass
                    link_free = max(link_free, self.clock())
                link_free += n / self.rate_Bps
                while self.clock() < link_free:
                    pass
                self.releases.append((self.clock() - t0, n))
                if self._held:
                    self.gate.open(ticket)
        finally:
            if self._held:
                self.gate.settle()
                self.forced, self.gate.forced = self.gate.forced, False

    def _event(self, stream):
        """A CUDA event recorded on `stream` now (None without `events`)."""
        if not self.events:
            return None
        import cupy as cp

        event = cp.cuda.Event()
        event.record(stream)
        return event


_BESIDE: dict[int, dict] = {}  # copies_beside_full_gpu's verdict per GPU, measured once per process


def copies_beside_full_gpu(device: int = 0, nbytes: int = 64 << 20, hold_ms: float = 50.0, copy=None,
                           remeasure: bool = False) -> dict:
    """Whether a local copy (`copy`, default the Pacer's) runs while pkit's GEMM holds every SM of GPU `device`, as
    ce_flags' GEMM does: one block per SM, each waiting on a ready flag in pinned host memory, which the host sets
    once the copy is done or `hold_ms` has passed. {'beside': True when the copy was done within half the hold (it
    did not wait for an SM), 'copy_ms': its time from enqueue to done, 'hold_ms'}. Measured once per GPU unless
    `remeasure`."""
    import cupy as cp
    import torch

    import pkit
    from ...ops.gemm import gemm
    from ...ops.gemm_plans import BLOCK_M

    if device in _BESIDE and not remeasure and copy is None:
        return _BESIDE[device]
    copy = copy or memcpy
    sms = pkit.devices()[device].sms
    with cp.cuda.Device(device):
        hog, side = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
        src = cp.zeros(nbytes, dtype=cp.uint8)
        dst = cp.empty_like(src)
        a = torch.zeros((sms * BLOCK_M, 64), dtype=torch.bfloat16, device=f"cuda:{device}")
        b = torch.zeros((256, 64), dtype=torch.bfloat16, device=a.device)
        with hog:
            gemm(a, b)  # loaded and planned now, with the GPU idle
        copy(dst.data.ptr, src.data.ptr, nbytes, side)
        cp.cuda.Device(device).synchronize()
        flag = cp.cuda.runtime.hostAlloc(4, 2 | 1)
        word = ctypes.c_uint32.from_address(flag)
        word.value = 0
        try:
            with hog:
                gemm(a, b, ready=flag, epoch=1, rows_per_flag=a.shape[0])  # every block waits for the flag
            time.sleep(2e-3)  # every block resident
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record(side)
            copy(dst.data.ptr, src.data.ptr, nbytes, side)
            end.record(side)
            deadline = time.perf_counter() + hold_ms * 1e-3
            while not end.done and time.perf_counter() < deadline:
                time.sleep(50e-6)
        finally:
            word.value = 1
            hog.synchronize()
            side.synchronize()
            cp.cuda.runtime.freeHost(flag)
        ms = cp.cuda.get_elapsed_time(start, end)
    verdict = {"beside": bool(ms < hold_ms / 2), "copy_ms": float(ms), "hold_ms": float(hold_ms)}
    if copy is memcpy:
        _BESIDE[device] = verdict
    return verdict
