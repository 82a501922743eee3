"""`pkit.bench`: time GPU work with CUDA events, report medians and spread.

Example:
    >>> import cupy as cp, pkit                                                 # doctest: +SKIP
    >>> x = cp.empty(1 << 28, dtype=cp.uint8); y = cp.empty_like(x)             # doctest: +SKIP
    >>> r = pkit.bench(lambda: y.__setitem__(slice(None), x), reps=50)          # doctest: +SKIP
    >>> r.median_us, r.cv                                                       # doctest: +SKIP
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class BenchResult:
    """Timing samples of one callable, in milliseconds, with summary statistics."""

    samples_ms: np.ndarray
    label: str = ""
    devices: tuple = ()
    meta: dict = field(default_factory=dict)

    @property
    def median_ms(self) -> float:
        return float(np.median(self.samples_ms))

    @property
    def median_us(self) -> float:
        return self.median_ms * 1e3

    @property
    def min_ms(self) -> float:
        return float(np.min(self.samples_ms))

    @property
    def max_ms(self) -> float:
        return float(np.max(self.samples_ms))

    @property
    def iqr_ms(self) -> float:
        q1, q3 = np.percentile(self.samples_ms, [25, 75])
        return float(q3 - q1)

    @property
    def cv(self) -> float:
        """Coefficient of variation: standard deviation over mean (dimensionless)."""
        mean = float(np.mean(self.samples_ms))
        return float(np.std(self.samples_ms) / mean) if mean > 0 else math.nan

    def times_us(self) -> dict:
        """time_median_us, time_min_us, time_max_us and cv: the columns pkit's studies report per row."""
        return {"time_median_us": self.median_us, "time_min_us": self.min_ms * 1e3, "time_max_us": self.max_ms * 1e3,
                "cv": self.cv}

    def gbps(self, nbytes: float) -> float:
        """`nbytes` moved per call over the median time, in GB/s (10⁹ bytes per second)."""
        return nbytes / (self.median_ms * 1e-3) / 1e9

    def to_frame(self) -> pd.DataFrame:
        """One row: label, devices, repetitions and the statistics in microseconds."""
        row = {"label": self.label, "devices": ",".join(map(str, self.devices)), "reps": len(self.samples_ms),
               "median_us": self.median_us, "min_us": self.min_ms * 1e3, "max_us": self.max_ms * 1e3,
               "iqr_us": self.iqr_ms * 1e3, "cv": self.cv, **self.meta}
        return pd.DataFrame([row])


def summarize(samples_ms: Sequence[float], label: str = "", devices: Sequence[int] = (), **meta) -> BenchResult:
    """A BenchResult from samples timed elsewhere (e.g. the harness's torch events)."""
    samples = np.asarray(samples_ms, dtype=np.float64)
    if samples.ndim != 1 or samples.size == 0 or not np.all(np.isfinite(samples)):
        raise ValueError("samples_ms: expected a non-empty 1-D sequence of finite times in milliseconds")
    return BenchResult(samples, label, tuple(devices), dict(meta))


def rotations_past_l2(nbytes_per_call: int, l2_bytes: int, factor: float = 3.0, most: int = 64) -> int:
    """How many input sets to rotate so that one pass touches ≥ `factor`× the L2 (1 when already larger)."""
    if nbytes_per_call <= 0:
        raise ValueError(f"nbytes_per_call: expected a positive byte count, got {nbytes_per_call}")
    return int(min(most, max(1, math.ceil(factor * l2_bytes / nbytes_per_call))))


def _capture(devs: Sequence[int], streams: dict, thunk: Callable) -> dict:
    """{device: CUDA graph of what `thunk` enqueued on that device's stream}, every stream captured at once."""
    from .gpus import on_device as _on

    for d in devs:
        _on(d, streams[d].begin_capture)
    try:
        thunk()
    finally:
        graphs = {d: _on(d, streams[d].end_capture) for d in devs}
    return graphs


def bench(fn: Callable, *, devices: Sequence[int] | None = None, warmup: int = 10, reps: int = 100,
          graph: bool = False, rotate: Sequence[tuple] | None = None, hide_launch: bool = False,
          calls_per_sample: int = 1, label: str = "", **meta) -> BenchResult:
    """Time `fn` with CUDA events on every GPU in `devices`; a sample is the slowest GPU's time.

    `fn` enqueues work on the current CuPy stream of each device it uses (pkit installs a fresh stream on
    each device for the measurement). With `rotate`, call i runs `fn(*rotate[i % len(rotate)])`, so the
    caller can pass several input sets and keep the L2 from serving repeats (see `rotations_past_l2`).
    `graph=True` times CUDA-graph replays, as nccl-tests' -G does: per device, one graph per input set holding
    `calls_per_sample` consecutive calls (fn's work on each device's stream is captured on its own, so work
    that joins streams across devices cannot be captured); a sample is one replay on every device, so the
    host's launch path stays out of it. The calls must stay correct when replayed (pkit's collectives keep
    their epochs and flags in device memory; the copy-engine paths, which order GPUs by events, cannot).
    `hide_launch=True` holds each stream with a spin kernel while all launches queue, as nvbandwidth does,
    so host launch overhead stays out of the samples.
    `calls_per_sample=k` times k back-to-back calls between one pair of events and reports a sample as their
    mean, as nccl-tests averages its iterations: the per-call events' own cost and a multi-GPU call's start
    skew are paid once per k calls, so short calls read closer to their steady-state cost.
    """
    import cupy as cp

    from .gpus import on_device as _on, require_gpus
    from .launch import synchronize

    _check_counts(warmup, reps, hide_launch, calls_per_sample)
    devs = tuple(devices) if devices is not None else (cp.cuda.runtime.getDevice(),)
    require_gpus(devs)
    argsets = list(rotate) if rotate is not None else [()]
    if not argsets:
        raise ValueError("rotate: expected at least one tuple of arguments")
    streams = {d: _on(d, lambda: cp.cuda.Stream(non_blocking=True)) for d in devs}

    def run_call(i: int) -> None:
        for d in devs:
            _on(d, streams[d].use)
        fn(*argsets[i % len(argsets)])

    try:
        if graph:
            run_call(0)  # outside the capture: a first call may load a module or allocate its buffers
            synchronize(devs)
            graphs = [_capture(devs, streams, lambda g=g: [run_call(g + j) for j in range(calls_per_sample)])
                      for g in range(len(argsets))]
            per_sample, per_graph = 1, calls_per_sample  # a sample replays one graph of calls_per_sample calls
            call = lambda i: [_on(d, lambda d=d: graphs[i % len(graphs)][d].launch(streams[d])) for d in devs]  # noqa: E731
        else:
            per_sample, per_graph = calls_per_sample, 1
            call = run_call
        for i in range(warmup):
            call(i)
        synchronize(devs)
        per_device = _samples_ms(call, streams, reps, per_sample, hide_launch) / (per_sample * per_graph)
    finally:
        for d in devs:
            _on(d, cp.cuda.Stream.null.use)
    return BenchResult(per_device.max(axis=0), label, devs,
                       dict(meta, warmup=warmup, graph=graph, hide_launch=hide_launch, rotations=len(argsets),
                            calls_per_sample=calls_per_sample))


def _check_counts(warmup: int, reps: int, hide_launch: bool, calls_per_sample) -> None:
    """`bench`'s counts, checked: a ValueError naming the first that is out of range."""
    if warmup < 0 or reps < 1:
        raise ValueError(f"warmup/reps: expected warmup >= 0 and reps >= 1, got {warmup}, {reps}")
    if hide_launch and warmup < 1:
        raise ValueError("warmup: hide_launch needs at least one warm-up call; a first call may load a module, "
                         "which waits for the held stream and would hang until the hold times out")
    if not (isinstance(calls_per_sample, (int, np.integer)) and calls_per_sample >= 1):
        raise ValueError(f"calls_per_sample: expected an integer >= 1, got {calls_per_sample!r}")


def _samples_ms(call: Callable[[int], None], streams: dict, reps: int, per_sample: int, hide_launch: bool):
    """Milliseconds of `reps` samples on each device of `streams` (device → stream), one row per device: a sample
    is `per_sample` calls of `call` (by call number) between two events on each stream; with `hide_launch` the
    streams are held while every launch queues."""
    import cupy as cp

    from .gpus import on_device as _on
    from .launch import hold_streams, synchronize

    devs = tuple(streams)
    events = {d: [_on(d, cp.cuda.Event) for _ in range(reps + 1)] for d in devs}
    with hold_streams(streams, enabled=hide_launch):
        for d in devs:
            _on(d, lambda: events[d][0].record(streams[d]))
        for i in range(reps):
            for k in range(per_sample):
                call(i * per_sample + k)
            for d in devs:
                _on(d, lambda: events[d][i + 1].record(streams[d]))
    synchronize(devs)
    return np.array([[cp.cuda.get_elapsed_time(events[d][i], events[d][i + 1]) for i in range(reps)]
                     for d in devs])
