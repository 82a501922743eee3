"""Measured ceilings: the rates a kernel on these GPUs cannot beat, for an honest roofline (`pkit.roofline`).

Each function checks its operation's result once, then times it with CUDA events after warm-up
(`pkit.bench`: medians and spread), rotating buffers past the L2 where they fit in it:
  * `gemm_rates`: cuBLAS through torch.matmul on square matrices, per input dtype, in TFLOP/s;
  * `hbm_copy_rate`: a device-to-device copy within one GPU, as bytes read + written per second;
  * `link_rates`: one direction GPU → GPU, per transfer mechanism (copy engine, SM push);
  * `sync_latency`: α, one cross-GPU synchronisation step (team barriers over every GPU timed inside one kernel).
`measure` runs them all into one tidy frame (`COLUMNS`) that `pkit.roofline.Ceilings.measured` reads;
`python -m pkit.experiments.ceilings --record` records it as results/<machine>/ceilings.csv.

Example:
    >>> import pkit
    >>> from pkit.experiments import ceilings
    >>> frame = ceilings.measure()  # every GPU of this machine                 # doctest: +SKIP
    >>> pkit.roofline.Ceilings.measured(frame).link_bytes_per_s / 1e9          # doctest: +SKIP
    >>> ceilings.link_rates(src=0, dst=0)  # arguments are checked before any GPU is touched
    Traceback (most recent call last):
    ValueError: src, dst: expected two different GPUs, got 0 and 0
"""
from __future__ import annotations

import argparse
from contextlib import contextmanager
from itertools import product
from typing import Sequence

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from ..gpus import require_gpus
from ..team import team_devices
from ..ops.transfers import MECHANISMS, peer_copy, worker
from ..roofline import DTYPES, MEASURED, dtype_name
from .peer_copies import check_sizes, check_sizes_and_pair, time_copies, time_copy

LINK_MECHANISMS = ("ce", "sm_push")
"""The copy engine and every SM pushing with 16-byte stores (pkit.ops.transfers names)."""
SIZES = (4096, 8192, 16384)
COLUMNS = ("ceiling", "dtype", "method", "devices", "size", "bytes", "steps", "value", "unit", "time_median_us",
           "time_min_us", "time_max_us", "cv", "verified")
"""The tidy frame of `measure`: value in unit (`pkit.roofline.MEASURED`); method: how it was measured (cublas,
a transfer mechanism of pkit.ops.transfers, team_barriers); size: GEMM side; bytes: per copy; steps: barriers
per timed kernel; time_*_us: one timed call."""

# max |C − C64| / max |C64| over spot-checked rows, inputs uniform in [−1, 1): room above the output's rounding
# (bf16 2⁻⁹, fp16 2⁻¹¹ relative) and TF32's 10-bit inputs (≈3e-4); float32's bar sits below TF32's error, so a
# float32 GEMM that ran on TF32 tensor cores fails its check.
GEMM_TOLERANCE = {"bfloat16": 1e-2, "float16": 2e-3, "tfloat32": 5e-3, "float32": 5e-5}
CHECKED_ROWS = 16


def _positive_ints(arg: str, values: Sequence[int]) -> list[int]:
    values = list(values)
    if not values or not all(isinstance(v, (int, np.integer)) and v > 0 for v in values):
        raise ValueError(f"{arg}: expected positive integers, got {values!r}")
    return [int(v) for v in values]


def _mechanisms(mechanisms: Sequence[str]) -> list[str]:
    mechanisms = list(mechanisms)
    if not mechanisms or any(m not in MECHANISMS for m in mechanisms):
        raise ValueError(f"mechanisms: expected names from {MECHANISMS}, got {mechanisms!r}")
    return mechanisms


@contextmanager
def _tf32(enabled: bool):
    """torch.matmul on float32 inputs uses TF32 tensor cores while the block runs iff `enabled`; restored after."""
    import torch

    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved


@contextmanager
def _torch_on_cupy_stream(device: int):
    """torch work in the block goes to the current CuPy stream of `device`, the stream `pkit.bench` times."""
    import cupy as cp
    import torch

    with cp.cuda.Device(device):
        ptr = cp.cuda.get_current_stream().ptr
    with torch.cuda.stream(torch.cuda.ExternalStream(ptr, device=torch.device("cuda", device))):
        yield


def _gemm_error(a, b, c) -> float:
    """max |C − A·B| / max |A·B| over `CHECKED_ROWS` random rows, the reference in float64."""
    import torch

    rows = torch.randperm(a.shape[0], device=a.device)[:CHECKED_ROWS]
    ref = a[rows].double() @ b.double()
    return float((c[rows].double() - ref).abs().max() / ref.abs().max())


def _gemm(dtype: str, n: int, device: int, reps: int, warmup: int) -> dict:
    """One checked, timed n × n × n GEMM of `dtype` inputs on GPU `device`."""
    import torch

    import pkit

    storage = torch.float32 if dtype == "tfloat32" else getattr(torch, dtype)
    dev = torch.device("cuda", device)
    sets = pkit.timing.rotations_past_l2(3 * n * n * storage.itemsize, pkit.devices()[device].l2_bytes)
    operands = [(torch.empty(n, n, dtype=storage, device=dev).uniform_(-1, 1),
                 torch.empty(n, n, dtype=storage, device=dev).uniform_(-1, 1),
                 torch.empty(n, n, dtype=storage, device=dev)) for _ in range(sets)]

    def matmul(a, b, c):
        with _torch_on_cupy_stream(device):
            torch.matmul(a, b, out=c)

    with _tf32(dtype == "tfloat32"):
        torch.matmul(*operands[0][:2], out=operands[0][2])
        error = _gemm_error(*operands[0])
        if not error <= GEMM_TOLERANCE[dtype]:
            raise AssertionError(f"{dtype} GEMM of {n}³ on GPU {device}: relative error {error:.3g} above "
                                 f"{GEMM_TOLERANCE[dtype]}")
        r = pkit.bench(matmul, devices=[device], rotate=operands, reps=reps, warmup=warmup)
    flops = 2 * n**3
    return {"dtype": dtype, "size": n, "device": device, "flops": flops, **r.times_us(),
            "rate_TFLOPps": flops / (r.median_ms * 1e-3) / 1e12, "relative_error": error, "verified": True,
            "rotations": sets}


def gemm_rates(dtypes: Sequence[str] = DTYPES, sizes: Sequence[int] = SIZES, device: int = 0, reps: int = 20,
               warmup: int = 5) -> pd.DataFrame:
    """cuBLAS (torch.matmul) on square n × n matrices per input dtype: bfloat16, float16, tfloat32 (float32
    inputs with torch.backends.cuda.matmul.allow_tf32 on), float32 (off; the setting is restored after).

    Rows: dtype, size (n), device, flops (2n³), time_{median,min,max}_us, cv, rate_TFLOPps (10¹² FLOP/s at the
    median), relative_error (spot check against float64), verified, rotations.
    """
    given = list(dtypes)
    try:
        dtypes = [dtype_name(d) for d in given]
    except ValueError:
        dtypes = []
    if not dtypes:
        raise ValueError(f"dtypes: expected names from {DTYPES}, got {given!r}")
    sizes = _positive_ints("sizes", sizes)
    require_gpus([device])
    rows = [_gemm(d, n, device, reps, warmup) for d, n in tqdm(list(product(dtypes, sizes)), desc="GEMM", leave=False)]
    return pd.DataFrame(rows)


def hbm_copy_rate(nbytes: int = 1 << 30, device: int = 0, mechanisms: Sequence[str] = LINK_MECHANISMS,
                  reps: int = 20, warmup: int = 3) -> pd.DataFrame:
    """A copy of `nbytes` within GPU `device`'s memory, per mechanism (`ce`: cudaMemcpy device to device;
    `sm_push`: pkit's 16-byte copy kernel on every SM).

    Rows: mechanism, device, bytes (copied per call), time_*_us, cv, copy_bandwidth_GBps (bytes copied per
    second, 10⁹ B/s), read_write_GBps (HBM traffic: bytes read plus bytes written per second, twice the copy
    bandwidth; the roofline's hbm_bytes count both), verified, rotations.
    """
    import cupy as cp

    import pkit

    if not (isinstance(nbytes, (int, np.integer)) and nbytes > 0 and nbytes % 16 == 0):
        raise ValueError(f"nbytes: expected a positive multiple of 16 bytes, got {nbytes!r}")
    mechanisms = _mechanisms(mechanisms)
    require_gpus([device])
    sets = pkit.timing.rotations_past_l2(nbytes, pkit.devices()[device].l2_bytes)
    with cp.cuda.Device(device):
        pairs = [(cp.empty(nbytes, cp.uint8), cp.empty(nbytes, cp.uint8)) for _ in range(sets)]
    rows = []
    for m in tqdm(mechanisms, desc="HBM copy", leave=False):
        row = time_copies(pairs, lambda d, s, m=m: peer_copy(d, s, m), device, reps, warmup)
        row["copy_bandwidth_GBps"] = row.pop("bandwidth_GBps")
        rows.append({"mechanism": m, "device": device, **row, "read_write_GBps": 2 * row["copy_bandwidth_GBps"]})
    return pd.DataFrame(rows)


def link_rates(nbytes: int = 256 << 20, src: int | None = None, dst: int | None = None,
               mechanisms: Sequence[str] = LINK_MECHANISMS, reps: int = 10, warmup: int = 3) -> pd.DataFrame:
    """One-direction peer bandwidth GPU `src` → `dst` per mechanism (`pkit.ops.transfers.peer_copy`); default the
    first two GPUs of the machine (`pkit.team.team_devices`: one clear error where it has fewer).

    Rows: mechanism, src, dst, bytes, time_*_us, cv, bandwidth_GBps (10⁹ B/s one way), verified, rotations.
    """
    import pkit

    (nbytes,) = check_sizes([nbytes], "nbytes")
    mechanisms = _mechanisms(mechanisms)
    if src is None or dst is None:
        first, second = team_devices(need=2, what="(a link between two GPUs)")[:2]
        src, dst = (first if src is None else src), (second if dst is None else dst)
    check_sizes_and_pair([nbytes], src, dst, "nbytes")
    team = pkit.Team([src, dst])
    return pd.DataFrame([{"mechanism": m, "src": src, "dst": dst,
                          **time_copy(team, nbytes, lambda d, s, m=m: peer_copy(d, s, m), worker(m, src, dst), reps,
                                      warmup)}
                         for m in tqdm(mechanisms, desc="link", leave=False)])


def sync_latency(devices: Sequence[int] | None = None, steps: int = 1000, reps: int = 20,
                 warmup: int = 3) -> pd.DataFrame:
    """α, the time of one cross-GPU synchronisation step: a kernel of `steps` back-to-back team barriers
    (`pkit::barrier`, kernels/team_barrier.cu) on every GPU of `devices` (default: every GPU of this machine, at
    least two, distinct), timed per call (launches hidden), divided by `steps` so launch overhead stays out.
    Checked once: after one call, every rank's barrier flags hold `steps` (each peer's signals and its own epoch
    count).

    One row: devices, steps, time_*_us (one call), cv, step_us (α in µs), verified.
    """
    import pkit

    (steps,) = _positive_ints("steps", [steps])
    devices = _distinct(devices, need=2)
    team = pkit.Team(devices)
    flags = team.barrier_flags
    kernel = pkit.compile("team_barrier.cu", "team_barriers")

    def barriers():
        team.launch(kernel, (1,), (32,), lambda r: (flags.table(r), np.int32(r), np.int32(team.size), np.uint32(steps)))

    barriers()
    team.synchronize()
    seen = [flags[r][0].get() for r in range(team.size)]
    if not all((row == steps).all() for row in seen):
        raise AssertionError(f"{steps} team barriers on GPUs {devices} left flag rows {[r.tolist() for r in seen]}, "
                             f"expected every word {steps}")
    r = pkit.bench(barriers, devices=devices, reps=reps, warmup=warmup, hide_launch=True)
    return pd.DataFrame([{"devices": ",".join(map(str, devices)), "steps": steps, **r.times_us(),
                          "step_us": r.median_us / steps, "verified": True}])


def _tidy(frame: pd.DataFrame, ceiling: str, column: str, devices: str, method=None) -> pd.DataFrame:
    """`frame` with the tidy columns: ceiling, value (from `column`), unit, devices, method (default: its
    mechanism column)."""
    return frame.assign(ceiling=ceiling, value=frame[column], unit=MEASURED[ceiling][0], devices=devices,
                        method=frame["mechanism"] if method is None else method)


def _distinct(devices: Sequence[int] | None, need: int) -> list[int]:
    """`devices` (None: every GPU of this machine) as distinct GPU ids, at least `need` of them."""
    chosen = team_devices(devices, need=need, what="(one rank per GPU)")
    if len(set(chosen)) != len(chosen):
        raise ValueError(f"devices: expected distinct GPU ids, got {list(devices)!r}")
    return chosen


def measure(devices: Sequence[int] | None = None, dtypes: Sequence[str] = DTYPES, sizes: Sequence[int] = SIZES,
            hbm_bytes: int = 1 << 30, link_bytes: int = 256 << 20, sync_steps: int = 1000) -> pd.DataFrame:
    """Every ceiling on `devices` (default: every GPU of this machine): GEMM rates and HBM copy on GPU
    devices[0]; link rates devices[0] → devices[1] and the sync step over all of `devices` (both left out when
    `devices` names one GPU). One row per measurement, `COLUMNS`.
    """
    devices = _distinct(devices, need=1)
    first = devices[0]
    parts = [_tidy(gemm_rates(dtypes, sizes, first), "gemm", "rate_TFLOPps", str(first), "cublas"),
             _tidy(hbm_copy_rate(hbm_bytes, first), "hbm", "read_write_GBps", str(first))]
    if len(devices) >= 2:
        parts += [_tidy(link_rates(link_bytes, *devices[:2]), "link", "bandwidth_GBps", f"{devices[0]},{devices[1]}"),
                  _tidy(sync_latency(devices, sync_steps), "sync", "step_us", ",".join(map(str, devices)),
                        "team_barriers")]
    return pd.concat(parts, ignore_index=True).reindex(columns=list(COLUMNS))


def main(argv=None) -> None:
    """Measure every ceiling, print the frame and the roofline ceilings it gives; --record writes
    results/<machine>/ceilings.{csv,json}."""
    import pkit

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--devices", type=int, nargs="+", default=None, help="GPU ids (default: every GPU here)")
    parser.add_argument("--dtypes", nargs="+", default=list(DTYPES))
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES), help="GEMM sides n")
    parser.add_argument("--hbm-bytes", type=int, default=1 << 30)
    parser.add_argument("--link-bytes", type=int, default=256 << 20)
    parser.add_argument("--sync-steps", type=int, default=1000)
    parser.add_argument("--record", action="store_true", help="write results/<machine>/ceilings.{csv,json}")
    args = parser.parse_args(argv)
    parameters = {k: v for k, v in vars(args).items() if k != "record"}
    if args.devices is None:  # every GPU here: say at once what the study needs that this machine lacks
        from ..studies import require_part

        require_part("ceilings", prog="python -m pkit.experiments.ceilings")
    frame = measure(args.devices, args.dtypes, args.sizes, args.hbm_bytes, args.link_bytes, args.sync_steps)
    with pd.option_context("display.width", 200, "display.max_columns", None):
        print(frame)
    if args.record:
        recorded = pkit.results.record("ceilings", frame, parameters)
        print(f"recorded {recorded.csv_path}")
        print(pkit.roofline.Ceilings.measured(recorded.frame, recorded.provenance))


if __name__ == "__main__":
    main()
