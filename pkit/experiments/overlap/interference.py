"""What communication costs computation on one GPU: a GEMM's rate beside copies, and the copies' rate beside it.

Overlap is never free. A copy beside a GEMM reads and writes the same HBM (copy engine, SM loads/stores and TMA
alike), and a copy driven by SMs takes SMs the GEMM would use. This study measures both on one GPU, for pkit's
GEMM and cuBLAS (bf16, the overlap study's shapes):

* `copies`: the GEMM with a cudaMemcpy beside it on another stream: within the GPU at paced rates (0 to
  unthrottled), host to device and device to host unthrottled (copy engine). The throttle takes no SM (a host
  thread issues one chunk per period), but a copy within one GPU does: the driver runs it as a kernel on the SMs
  (it waits beside a GEMM that holds every SM: `overlap.pacing.copies_beside_full_gpu`), so it takes SMs from the
  GEMM for its chunks' length as well as HBM. Each row says what rate was asked and what the copy reached alone
  and beside the GEMM (the throttle's check).
* `partition`: the GEMM on 132 - k SMs with an SM or TMA copy kernel on the other k SMs, running or idle. pkit's
  GEMM is persistent (`blocks=`); cuBLAS runs in a CUDA green context of 132 - k SMs (torch.cuda.green_contexts).

Timing: each point is a window of back-to-back GEMMs (about 20 ms) between CUDA events; the GEMM alone and the
GEMM beside traffic alternate in `ROUNDS` pairs (the clock drifts as the GPU warms), ratios are taken per pair.
A copy's rate in a window counts the bytes of its chunks that fall in the window (each chunk timed by events).
Every GEMM output is checked against a float32 product after its window; every copy's last chunk byte for byte.

Example:
    >>> from pkit.experiments.overlap import interference
    >>> interference.chunk_bytes(400e9), interference.chunk_bytes(50e9) >> 20   # bytes per paced chunk
    (80000000, 16)
    >>> interference.hbm_traffic("ce", "GPU0 → GPU0", 400.0), interference.hbm_traffic("ce", "CPU → GPU0", 50.0)
    (800.0, 50.0)
    >>> interference.copies(device=0)                                            # doctest: +SKIP
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from ...gpus import cupy_stream
from ...ops.overlap_patterns import GEMMS  # the GEMMs the overlap schedules run

SHAPES = ((8192, 8192, 8192), (8192, 2048, 8192))  # (M, N, K): the overlap study's square and balanced AG+GEMM
RATES_GBPS = (100.0, 200.0, 400.0, 800.0, 1200.0, None)  # paced device-to-device copies (bytes copied/s); None: free
HOST_ROUTES = ("CPU → GPU{d}", "GPU{d} → CPU")
PARTITION_SMS = (2, 4, 8, 16, 32)  # SMs given to the copy (even: green contexts split SMs in pairs)
PARTITION_COPIES = ("sm", "tma")
ROUNDS = 5  # alternating pairs (alone, beside traffic) per point
WINDOW_MS = 20.0  # GEMM time per window
PERIOD_S = 200e-6  # a paced chunk every 200 µs at least: a host thread keeps that pace
BUFFER_BYTES = 1 << 30  # each copy walks through 1 GiB (past the 60 MiB L2)


def chunk_bytes(rate_Bps: float, period_s: float = PERIOD_S) -> int:
    """Bytes per chunk for a copy paced at `rate_Bps` (bytes/s): one chunk per `period_s` at least, at least 16 MiB,
    a multiple of 1 MiB... rounded to a multiple of 16 bytes (what every copy mechanism moves)."""
    return max(16 << 20, int(rate_Bps * period_s) // 16 * 16)


def hbm_traffic(engine: str, route: str, copy_GBps: float) -> float:
    """GB/s of HBM traffic a copy of `copy_GBps` (bytes copied) makes on the GPU: a copy within it reads and writes
    each byte (2×); one from or to the host writes or reads it once."""
    return copy_GBps * (2.0 if "CPU" not in route else 1.0)


@dataclass
class Traffic:
    """A copy to run beside the GEMM: `engine` ('ce', 'sm', 'tma') along `route`, at `rate_Bps` (None: as fast as
    it goes), on `blocks` SMs for SM and TMA copies."""

    engine: str
    route: str
    rate_Bps: float | None = None
    blocks: int | None = None

    @property
    def chunk(self) -> int:
        if self.rate_Bps:
            return chunk_bytes(self.rate_Bps)
        return 16 << 20 if "CPU" in self.route else (64 << 20 if self.blocks else 256 << 20)  # ≥ 100 µs a chunk


def _buffers(device: int, stack) -> dict:
    """Shared copy buffers on GPU `device`, BUFFER_BYTES each: a random source and a destination in its memory,
    and random page-locked host memory (`hierarchy.memory.pinned`) for the host routes."""
    import cupy as cp

    from ..hierarchy.memory import pinned

    host = stack.enter_context(pinned(BUFFER_BYTES))[1]
    host[:] = np.random.default_rng().integers(0, 256, BUFFER_BYTES, dtype=np.uint8)
    with cp.cuda.Device(device):
        return {"src": cp.random.randint(0, 256, BUFFER_BYTES, dtype=cp.uint8),
                "dst": cp.empty(BUFFER_BYTES, dtype=cp.uint8), "host": host}


class _Copier:
    """The chunked copy of one Traffic on GPU `device` through shared `buffers`, each chunk between two events."""

    def __init__(self, traffic: Traffic, device: int, buffers: dict):
        import torch

        from ...ops.transfers import Route

        self.traffic, self.device = traffic, device
        route = Route.parse(traffic.route)
        self.stream = torch.cuda.Stream(device=device)
        self._cupy_stream = cupy_stream(self.stream.cuda_stream, device)
        self.src = buffers["src"] if route.src is not None else buffers["host"]
        self.dst = buffers["dst"] if route.dst is not None else buffers["host"]
        self.mechanism = traffic.engine
        self.events: list = []
        self.offset = 0

    def issue(self) -> None:
        """Enqueue the next chunk (events around it) on the copier's stream."""
        import cupy as cp
        import torch

        from ...ops.transfers import peer_copy

        n = self.traffic.chunk
        if self.offset + n > BUFFER_BYTES:
            self.offset = 0
        start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        with cp.cuda.Device(self.device), self._cupy_stream:
            start.record(self.stream)
            peer_copy(self.dst[self.offset:self.offset + n], self.src[self.offset:self.offset + n], self.mechanism,
                      self.traffic.blocks)
            end.record(self.stream)
        self.events.append((start, end, n))
        self.last = (self.offset, n)
        self.offset += n

    def check(self) -> bool:
        """The last chunk arrived byte for byte (then the chunk list starts afresh)."""
        import cupy as cp

        self.stream.synchronize()
        lo, n = self.last
        src, dst = (cp.asnumpy(x[lo:lo + n]) if not isinstance(x, np.ndarray) else x[lo:lo + n]
                    for x in (self.src, self.dst))
        return bool(np.array_equal(src, dst))

    def rate_in(self, origin, length_ms: float) -> float:
        """GB/s copied in the window [origin, origin + length_ms] (a CUDA event and ms): each chunk counted by the
        share of its time that falls in the window."""
        self.stream.synchronize()
        moved = 0.0
        for start, end, n in self.events:
            a, b = origin.elapsed_time(start), origin.elapsed_time(end)
            inside = max(0.0, min(b, length_ms) - max(a, 0.0))
            moved += n * inside / (b - a) if b > a else 0.0
        self.events = []
        return moved / (length_ms * 1e-3) / 1e9


def _gemm_calls(m: int, n: int, k: int, device: int, blocks: int | None = None):
    """{name: enqueue one GEMM on the current torch stream} for pkit's GEMM and cuBLAS, and a check of the output
    against a float32 product (bf16 rounding). Inputs are made and the GPU drained before any GEMM runs."""
    import cupy as cp
    import torch

    from ...ops.gemm import gemm
    from .checks import bf16_match

    gen = torch.Generator(device=f"cuda:{device}").manual_seed(m * 3 + n * 5 + k)
    with torch.cuda.device(device):
        a = torch.randn(m, k, device=device, generator=gen).bfloat16()
        b = torch.randn(n, k, device=device, generator=gen).bfloat16()
        want = a.float() @ b.float().T
        out = torch.full((m, n), float("nan"), device=device, dtype=torch.bfloat16)
        torch.cuda.synchronize(device)  # the GEMMs run on other streams

    def pkit_gemm():
        with cp.cuda.Device(device), cupy_stream(torch.cuda.current_stream(device).cuda_stream, device):
            gemm(a, b, out, blocks=blocks)

    def cublas():
        torch.matmul(a, b.T, out=out)

    def check() -> tuple[bool, float]:
        """(within bf16 rounding of the float32 product, largest absolute error); then C is poisoned with NaN and
        the GPU drained, so the next window must write all of it."""
        torch.cuda.synchronize(device)
        verdict = bf16_match(out, want, terms=k)
        out.fill_(float("nan"))
        torch.cuda.synchronize(device)
        return verdict

    return {"pkit_gemm": pkit_gemm, "cublas": cublas}, check


def _window(call: Callable | None, calls: int, stream, copier: _Copier | None = None, green=None) -> tuple[float, float]:
    """(GEMM ms per call, copy GB/s in the window) of `calls` back-to-back GEMMs on `stream`, with `copier`'s copy
    beside them: paced by a host thread (a chunk per period) or, unpaced, a chain queued to outlast the window.
    Without a GEMM (`call` None) the window is `calls` ms of the copy alone. With `green` (a torch green context)
    the GEMMs run on its stream, timed by its own events; the copy's rate is then not read (NaN): its events
    live in the primary context."""

    done = threading.Event()
    pacer = None
    if copier is not None:
        rate = copier.traffic.rate_Bps
        if rate:
            period = copier.traffic.chunk / rate
            pacer = threading.Thread(target=_pace, args=(copier, period, done), daemon=True)
            pacer.start()
            time.sleep(4 * period)
        else:
            for _ in range(_chain_chunks(copier, calls, call is None)):
                copier.issue()
    try:
        start, length = _gemm_window(call, calls, stream) if green is None else _green_window(call, calls, green)
    finally:
        done.set()
        if pacer is not None:
            pacer.join()
    per_call = length / calls if call is not None else float("nan")
    if copier is None or green is not None:
        if copier is not None:
            copier.stream.synchronize()
            copier.events = []
        return per_call, float("nan")
    return per_call, copier.rate_in(start, length)


def _gemm_window(call: Callable | None, calls: int, stream):
    """(the window's start event, its length in ms): `calls` GEMMs on `stream`, or `calls` ms of waiting."""
    import torch

    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(stream):
        start.record(stream)
        if call is None:
            time.sleep(calls * 1e-3)
        else:
            for _ in range(calls):
                call()
        stop.record(stream)
    stop.synchronize()
    return start, start.elapsed_time(stop)


def _green_window(call: Callable, calls: int, green):
    """(None, ms) of `calls` GEMMs on the stream of green context `green` (its SMs only), timed by events made
    and recorded inside it."""
    import torch

    enter = getattr(green, "set_context", None) or green.make_current
    leave = getattr(green, "pop_context", None) or green.pop_current
    enter()
    try:
        stream = torch.cuda.current_stream()
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(stream)
        for _ in range(calls):
            call()
        stop.record(stream)
        stop.synchronize()
        return None, start.elapsed_time(stop)
    finally:
        leave()


def _chain_chunks(copier: _Copier, calls: int, alone: bool) -> int:
    """How many unpaced chunks outlast a window (queued before it starts): four windows at the copy's fastest
    plausible rate."""
    window_s = (calls if alone else WINDOW_MS) * 1e-3
    fastest = 3.0e12 if "CPU" not in copier.traffic.route else 60e9
    if copier.traffic.blocks:
        fastest = min(fastest, copier.traffic.blocks * 40e9)
    return max(4, int(4 * window_s * fastest / copier.traffic.chunk) + 1)


def _pace(copier: _Copier, period_s: float, done: threading.Event) -> None:
    """Issue one chunk per `period_s` until `done`, yielding the GIL while it waits (a timed sleep is too coarse at
    200 µs; a plain busy loop would hold the GIL for Python's 5 ms switch interval)."""
    import cupy as cp

    with cp.cuda.Device(copier.device):
        due = time.perf_counter()
        while not done.is_set():
            copier.issue()
            due += period_s
            while time.perf_counter() < due:
                time.sleep(0)


def _calls_per_window(call: Callable, stream) -> int:
    """GEMM calls that take about WINDOW_MS (after two warm-up calls)."""
    _window(call, 2, stream)
    per_call, _ = _window(call, 3, stream)
    return max(3, int(WINDOW_MS / per_call))


def _paired(call: Callable, stream, calls: int, copier: _Copier | None, alone_call: Callable | None = None,
            rounds: int = ROUNDS, green=None) -> dict:
    """ROUNDS alternating pairs: (`alone_call`, default `call`, with nothing beside) then (`call` beside `copier`,
    in green context `green` when given), and the copy alone; medians and quartiles of the per-pair GEMM ratios."""
    alone, beside, copy_alone, copy_beside = [], [], [], []
    for _ in range(rounds):
        alone.append(_window(alone_call or call, calls, stream)[0])
        t, rate = _window(call, calls, stream, copier, green)
        beside.append(t)
        copy_beside.append(rate)
        if copier is not None:
            copy_alone.append(_window(None, int(WINDOW_MS), stream, copier)[1])
    ratios = np.array(alone) / np.array(beside)  # rate beside over rate alone
    q1, q3 = np.percentile(ratios, [25, 75])
    return {"time_alone_us": float(np.median(alone)) * 1e3, "time_beside_us": float(np.median(beside)) * 1e3,
            "rate_ratio": float(np.median(ratios)), "rate_ratio_q1": float(q1), "rate_ratio_q3": float(q3),
            "copy_alone_GBps": float(np.median(copy_alone)) if copy_alone else float("nan"),
            "copy_beside_GBps": float(np.median(copy_beside)) if copier is not None else float("nan")}


def _check_device(device: int) -> int:
    from ...gpus import devices

    n = len(devices())
    if not isinstance(device, (int, np.integer)) or not 0 <= device < n:
        raise ValueError(f"device: expected a GPU id in [0, {n}), got {device!r}; this machine has {n} GPU"
                         f"{'' if n == 1 else 's'} (the interference study needs one)")
    return int(device)


def _shapes(shapes) -> list[tuple[int, int, int]]:
    shapes = [tuple(int(v) for v in s) for s in shapes]
    if not shapes or any(len(s) != 3 or min(s) <= 0 or s[1] % 8 for s in shapes):
        raise ValueError(f"shapes: expected (M, N, K) triples of positive sizes, N a multiple of 8, got {shapes}")
    return shapes


def copies(device: int = 0, shapes: Sequence[tuple[int, int, int]] = SHAPES, rates_GBps=RATES_GBPS,
           rounds: int = ROUNDS) -> pd.DataFrame:
    """Each GEMM (pkit_gemm, cublas) of each shape beside a copy-engine copy on another stream: device to device at
    each of `rates_GBps` (None: unthrottled), host to device and device to host unthrottled.

    Rows: gemm, m, n, k, engine ('ce'), route, target_GBps (NaN: unthrottled), copy_alone_GBps (the copy alone:
    the throttle's check), copy_beside_GBps (beside the GEMM), hbm_traffic_GBps (what the copy beside the GEMM
    makes HBM serve: `hbm_traffic`), time_alone_us and time_beside_us (per GEMM call, medians), tflops_alone,
    tflops_beside, rate_ratio (GEMM rate beside over alone, median of ROUNDS pairs) with rate_ratio_q1/q3,
    gemm_max_abs_err and copy_verified (the last window's GEMM output against float32, the copy's last chunk),
    verified (both).
    """
    from contextlib import ExitStack

    import torch

    device = _check_device(device)
    shapes = _shapes(shapes)
    if not rates_GBps or any(r is not None and not r > 0 for r in rates_GBps):
        raise ValueError(f"rates_GBps: expected positive rates or None (unthrottled), got {list(rates_GBps)}")
    traffics = ([Traffic("ce", f"GPU{device} → GPU{device}", None if r is None else r * 1e9) for r in rates_GBps]
                + [Traffic("ce", r.format(d=device)) for r in HOST_ROUTES])
    rows = []
    with ExitStack() as stack, torch.cuda.device(device):
        stream = torch.cuda.Stream(device=device)
        buffers = _buffers(device, stack)
        copiers = [_Copier(t, device, buffers) for t in traffics]
        for m, n, k in tqdm(shapes, desc="shapes", leave=False):
            calls_by_name, check = _gemm_calls(m, n, k, device)
            for name, call in calls_by_name.items():
                calls = _calls_per_window(call, stream)
                for copier in tqdm(copiers, desc=f"{name} {m}x{n}x{k}", leave=False):
                    row = _paired(call, stream, calls, copier, rounds=rounds)
                    rows.append(_row(name, m, n, k, copier.traffic, row, check(), copier.check()))
    return pd.DataFrame(rows)


def _row(name: str, m: int, n: int, k: int, traffic: Traffic, timed: dict, gemm_check: tuple, copy_ok: bool,
         **extra) -> dict:
    flops = 2.0 * m * n * k
    return {"gemm": name, "m": m, "n": n, "k": k, "engine": traffic.engine, "route": traffic.route, **extra,
            "target_GBps": traffic.rate_Bps / 1e9 if traffic.rate_Bps else float("nan"),
            "copy_alone_GBps": timed["copy_alone_GBps"], "copy_beside_GBps": timed["copy_beside_GBps"],
            "hbm_traffic_GBps": hbm_traffic(traffic.engine, traffic.route, timed["copy_beside_GBps"]),
            "time_alone_us": timed["time_alone_us"], "time_beside_us": timed["time_beside_us"],
            "tflops_alone": flops / timed["time_alone_us"] / 1e6, "tflops_beside": flops / timed["time_beside_us"] / 1e6,
            "rate_ratio": timed["rate_ratio"], "rate_ratio_q1": timed["rate_ratio_q1"],
            "rate_ratio_q3": timed["rate_ratio_q3"], "gemm_max_abs_err": gemm_check[1], "copy_verified": copy_ok,
            "verified": bool(gemm_check[0] and copy_ok)}


def partition(device: int = 0, shapes: Sequence[tuple[int, int, int]] = SHAPES[:1],
              sms_given: Sequence[int] = PARTITION_SMS, copies_: Sequence[str] = PARTITION_COPIES,
              rounds: int = ROUNDS) -> pd.DataFrame:
    """Each GEMM on all SMs but `k` (for k in `sms_given`), the k SMs idle or running an SM or TMA copy within the
    GPU (`copies_`), each paired with the GEMM on every SM: how much of its rate the GEMM keeps when it gives k SMs
    to communication. pkit's GEMM gets fewer persistent blocks; cuBLAS runs in a green context of the other SMs.

    Rows: gemm, m, n, k, sms_given, gemm_sms, copy ('idle', 'sm', 'tma'), engine, route, copy_beside_GBps,
    hbm_traffic_GBps, time_alone_us (all SMs), time_beside_us, tflops_alone, tflops_beside, rate_ratio (over all
    SMs) with quartiles, verified.
    """
    from contextlib import ExitStack

    import torch

    from ...gpus import devices

    device = _check_device(device)
    shapes = _shapes(shapes)
    sms = devices()[device].sms
    if not sms_given or any(not (isinstance(k, (int, np.integer)) and 1 <= k < sms and k % 2 == 0) for k in sms_given):
        raise ValueError(f"sms_given: expected even SM counts in [2, {sms}), got {list(sms_given)}")
    unknown = [c for c in copies_ if c not in PARTITION_COPIES]
    if unknown:
        raise ValueError(f"copies_: expected names from {PARTITION_COPIES}, got {unknown}")
    route = f"GPU{device} → GPU{device}"
    rows = []
    with ExitStack() as stack, torch.cuda.device(device):
        stream = torch.cuda.Stream(device=device)
        buffers = _buffers(device, stack)
        for m, n, k in shapes:
            full, check = _gemm_calls(m, n, k, device)
            for kk in tqdm(list(sms_given), desc=f"SMs given, {m}x{n}x{k}", leave=False):
                fewer, check_fewer = _gemm_calls(m, n, k, device, blocks=sms - kk)
                for name in GEMMS:
                    calls = _calls_per_window(full[name], stream)
                    green = _green_context(sms - kk, device) if name == "cublas" else None
                    part_call = full[name] if green is not None else fewer[name]
                    for copy in ("idle", *copies_):
                        copier = None if copy == "idle" else _Copier(Traffic(copy, route, None, kk), device, buffers)
                        timed = _paired(part_call, stream, calls, copier, alone_call=full[name], rounds=rounds,
                                        green=green)
                        gemm_ok = check() if green is not None else check_fewer()
                        traffic = copier.traffic if copier else Traffic("none", route)
                        rows.append(_row(name, m, n, k, traffic, timed, gemm_ok, copier is None or copier.check(),
                                         sms_given=kk, gemm_sms=sms - kk, copy=copy))
    return pd.DataFrame(rows)


def _green_context(num_sms: int, device: int):
    """A torch green context of `num_sms` SMs on GPU `device`: cuBLAS launched inside it runs on those SMs only."""
    from torch.cuda.green_contexts import GreenContext

    return GreenContext.create(num_sms, device)


def throttle_check(frame: pd.DataFrame) -> pd.DataFrame:
    """The paced rows of a `copies` frame, one per target rate (the medians over GEMMs and shapes): target_GBps, the
    copy alone (copy_alone_GBps, held_alone = alone / target) and beside the GEMM (copy_beside_GBps,
    held_beside = beside / target). The throttle holds where held_alone is within 10% of 1.

    Example:
        >>> rows = pd.DataFrame({"target_GBps": [100.0, 100.0, float("nan")], "copy_alone_GBps": [99.0, 101.0, 2000.0],
        ...                      "copy_beside_GBps": [98.0, 100.0, 1100.0]})
        >>> throttle_check(rows).round(3).values.tolist()
        [[100.0, 100.0, 1.0, 99.0, 0.99]]
    """
    paced = frame[frame["target_GBps"].notna()]
    table = paced.groupby("target_GBps")[["copy_alone_GBps", "copy_beside_GBps"]].median().reset_index()
    return table.assign(held_alone=table["copy_alone_GBps"] / table["target_GBps"],
                        held_beside=table["copy_beside_GBps"] / table["target_GBps"])[
        ["target_GBps", "copy_alone_GBps", "held_alone", "copy_beside_GBps", "held_beside"]]


PARTS = {"copies": copies, "partition": partition}
"""The study's recorded tables: results/<machine>/interference_<part>.{csv,json}."""


def main(argv=None) -> None:
    """Measure the parts named (default both) on GPU 0 and print them; --record writes
    results/<machine>/interference_<part>.{csv,json}."""
    import argparse

    from ... import results
    from ...studies import require_part

    parser = argparse.ArgumentParser(prog="python -m pkit.experiments.overlap.interference", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("parts", nargs="*", metavar="PART", help=f"any of {', '.join(PARTS)} (default: every part)")
    parser.add_argument("--device", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--record", action="store_true", help="write results/<machine>/interference_<part>.*")
    args = parser.parse_args(argv)
    parts = args.parts or list(PARTS)
    if set(parts) - set(PARTS):
        parser.error(f"parts: expected names from {list(PARTS)}, got {parts}")
    for part in parts:
        require_part(f"interference_{part}", prog=parser.prog)
    for part in parts:
        frame = PARTS[part](device=args.device, rounds=args.rounds)
        with pd.option_context("display.width", 200, "display.max_columns", None):
            print(frame.round(3), flush=True)
        if args.record:
            recorded = results.record(f"interference_{part}", frame, {"device": args.device, "rounds": args.rounds})
            print(f"recorded {recorded.csv_path}", flush=True)


if __name__ == "__main__":
    main()
