"""Collectives study: pkit's kernels against NCCL (one process, CuPy), torch.distributed and torch symmetric
memory (one process per GPU), measured in the same run.

Sizes are nccl-tests' S: the whole buffer (all-reduce, all-to-all), the gathered output (all-gather),
the scattered input (reduce-scatter). Rows carry algbw and busbw in GB/s. Implementations are named
`pkit_<mechanism>` (`pkit_sm`, `pkit_ll`, `pkit_ce`) or `pkit_sm_<algorithm>` (`pkit_sm_one_shot`,
`pkit_sm_two_shot`), then `nccl`, `torch_nccl`, `torch_symm_one_shot`, `torch_symm_two_shot`, and
`empty_kernel` for the launch floor.

Example:
    >>> from pkit.experiments import collectives
    >>> df = collectives.sweep(sizes=[1 << 16, 1 << 30])                  # doctest: +SKIP
    >>> collectives.speedups(df)                                          # doctest: +SKIP
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from typing import Sequence

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from ..bf16 import NAN_BITS, from_bf16_bits, to_bf16_bits
from ..gpus import on_device as _on
from ..ops.baselines import NcclCollectives
from ..ops.collectives import COLLECTIVES, Collectives, bandwidths, choose, collective, per_peer_bytes
from ..timing import bench as time_calls
from .torch_collectives import OPS as TORCH_OPS

OPS = tuple(COLLECTIVES)
DEFAULT_SIZES = tuple(1 << p for p in range(16, 31, 2))  # 64 KiB → 1 GiB
ITEMSIZE = {"bfloat16": 2, "float32": 4}  # bytes per element of the swept dtypes


def implementation_names() -> list[str]:
    """Every implementation name `sweep` can measure: pkit's variants of the registered ops (at size 0, where
    every mechanism fits), then 'nccl'."""
    names = [name for op in COLLECTIVES.values() for name, _ in op.variants(0, 1)]
    return list(dict.fromkeys(names + ["nccl"]))


def _variants(op: str, nbytes: int, ranks: int):
    """(implementation name, call(coll, nccl, out, inp)) pairs for one op at total size `nbytes`: pkit's variants
    from the registry (`CollectiveOp.variants`), then NCCL's where the baseline has the op."""
    variants = [(name, lambda c, n, o, i, options=options: c.run(op, o, i, **options))
                for name, options in collective(op).variants(nbytes, ranks)]
    if hasattr(NcclCollectives, op):
        variants.append(("nccl", lambda c, n, o, i: getattr(n, op)(o, i)))
    return variants


def _empty_buffers(team, op: str, nbytes: int, dtype: str):
    """(out, inp) SymmetricArrays of `op` for total size `nbytes`, shaped by the registry (`CollectiveOp.counts`)."""
    inp_count, out_count = collective(op).counts(nbytes // ITEMSIZE[dtype], team.size)
    return team.empty((out_count,), dtype), team.empty((inp_count,), dtype)


def _buffers(team, op: str, nbytes: int, dtype: str):
    """(out, inp) SymmetricArrays for total size `nbytes`, inputs random."""
    import cupy as cp

    out, inp = _empty_buffers(team, op, nbytes, dtype)
    for r in range(team.size):
        with cp.cuda.Device(team.devices[r]):
            values = cp.random.standard_normal(int(np.prod(inp.shape)), dtype=cp.float32)
            inp[r][...] = to_bf16_bits(values) if dtype == "bfloat16" else values
    return out, inp


def _matches(a, b, dtype: str) -> bool:
    """Whether two results agree (to bf16/fp32 rounding of differently ordered sums)."""
    import cupy as cp

    def f32(x):
        return from_bf16_bits(x) if dtype == "bfloat16" else x

    fa, fb = f32(a), f32(b)
    scale = max(1.0, float(cp.abs(fb).max()))
    return bool(cp.all(cp.isfinite(fa))) and float(cp.abs(fa - fb).max()) <= (2e-2 if dtype == "bfloat16" else 1e-4) * scale


def sweep(ops: Sequence[str] = OPS, sizes: Sequence[int] = DEFAULT_SIZES, dtype: str = "bfloat16",
          devices: Sequence[int] = (0, 1), reps: int = 20, calls_per_sample: int = 1,
          implementations: Sequence[str] | None = None) -> pd.DataFrame:
    """pkit's collectives and single-process NCCL on the same buffers; each result checked against NCCL's (the
    registry's NumPy reference for an op NCCL lacks).

    `calls_per_sample` > 1 times that many back-to-back calls per sample (nccl-tests' averaging; see
    pkit.bench). `implementations` keeps only those names (`implementation_names()`: pkit_sm_one_shot,
    pkit_sm_two_shot, pkit_sm, pkit_ll, pkit_ce, nccl); by default all that apply to the size.
    """
    import pkit

    unknown = [op for op in ops if op not in COLLECTIVES]
    if unknown:
        raise ValueError(f"ops: unknown {unknown}; expected names from {tuple(COLLECTIVES)}")
    known = implementation_names()
    if implementations is not None and not set(implementations) <= set(known):
        raise ValueError(f"implementations: expected names from {known}, got {list(implementations)}")
    if dtype not in ITEMSIZE:
        raise ValueError(f"dtype: expected 'bfloat16' or 'float32', got {dtype!r}")
    team = pkit.Team(list(devices))
    quantum = 16 * team.size
    if not sizes or any(s <= 0 or s % quantum for s in sizes):
        raise ValueError(f"sizes: expected positive multiples of {quantum} bytes, got {list(sizes)}")
    coll, nccl = Collectives(team), NcclCollectives(team)
    rows = []
    for op in tqdm(ops, desc="collectives", leave=False):
        for nbytes in sizes:
            rows += _measure(team, coll, nccl, op, nbytes, dtype, implementations,
                             dict(devices=list(devices), reps=reps, warmup=5, hide_launch=True,
                                  calls_per_sample=calls_per_sample))
    return pd.DataFrame(rows)


def _measure(team, coll, nccl, op: str, nbytes: int, dtype: str, implementations, bench: dict) -> list[dict]:
    """Rows of `sweep` for one op and size: every variant checked against the expected output, then timed."""
    out, inp = _buffers(team, op, nbytes, dtype)
    expected = _expected(team, nccl, op, inp, out.shape, dtype)
    rows = []
    for name, call in _variants(op, nbytes, team.size):
        if implementations is not None and name not in implementations:
            continue
        out.fill(NAN_BITS if dtype == "bfloat16" else np.float32(np.nan))
        team.synchronize()
        call(coll, nccl, out, inp)
        team.synchronize()
        if not all(_on(team.devices[r], lambda r=r: _matches(out[r], expected[r], dtype)) for r in range(team.size)):
            raise AssertionError(f"{name} {op} of {nbytes} bytes ({dtype}) disagrees with the expected output")
        r = time_calls(lambda call=call: call(coll, nccl, out, inp), **bench)
        algbw, busbw = bandwidths(op, nbytes, team.size, r.median_ms * 1e-3)
        rows.append({"implementation": name, "op": op, "dtype": dtype, "bytes": nbytes,
                     "calls_per_sample": bench["calls_per_sample"], **r.times_us(), "algbw_GBps": algbw,
                     "busbw_GBps": busbw, "verified": True})
    return rows


def _expected(team, nccl, op: str, inp, out_shape, dtype: str):
    """Every rank's right output: NCCL's where the baseline has the op, else the registry's NumPy reference
    (`CollectiveOp.reference`, in float32) copied to each GPU."""
    import cupy as cp

    expected = team.empty(out_shape, dtype)
    if hasattr(NcclCollectives, op):
        getattr(nccl, op)(expected, inp)
    else:
        as_f32 = from_bf16_bits if dtype == "bfloat16" else (lambda x: x)
        inputs = [cp.asnumpy(_on(team.devices[r], lambda r=r: as_f32(inp[r]))) for r in range(team.size)]
        for r in range(team.size):
            want = collective(op).reference(inputs, r).astype(np.float32)
            with cp.cuda.Device(team.devices[r]):
                values = cp.asarray(want)
                expected[r][...] = to_bf16_bits(values) if dtype == "bfloat16" else values
    team.synchronize()
    return expected


def launch_floor(devices: Sequence[int] = (0, 1), calls_per_sample: int = 20, reps: int = 20) -> pd.DataFrame:
    """The time of an empty kernel launched on every GPU of `devices`, timed as `sweep` times collectives: the
    floor under any collective that is one kernel per GPU. One row, implementation 'empty_kernel', bytes 0."""
    import pkit

    spin = pkit.compile("spin.cu", "spin_ns")
    r = pkit.bench(lambda: [spin((1,), (1,), (np.uint64(0),), device=d) for d in devices], devices=list(devices),
                   reps=reps, warmup=5, hide_launch=True, calls_per_sample=calls_per_sample)
    return pd.DataFrame([{"implementation": "empty_kernel", "op": "all_reduce", "dtype": "none", "bytes": 0,
                          "calls_per_sample": calls_per_sample, **r.times_us(), "verified": False}])


def torch_baselines(sizes: Sequence[int] = DEFAULT_SIZES, dtype: str = "bfloat16", nproc: int = 2,
                    reps: int = 20, timeout_s: float = 600, calls_per_sample: int = 1,
                    ops: Sequence[str] = TORCH_OPS) -> pd.DataFrame:
    """torch.distributed and torch symmetric memory under torchrun (one process per GPU), same columns."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "torch.csv")
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}", "-m",
               "pkit.experiments.torch_collectives", "--out", out, "--dtype", dtype, "--reps", str(reps),
               "--calls-per-sample", str(calls_per_sample), "--ops", *ops, "--sizes", *map(str, sizes)]
        env = {**os.environ, "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
               "NVSHMEM_DISABLE_NVLS": "1"}
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
        if done.returncode != 0:
            raise RuntimeError(f"torch baselines failed ({done.returncode}):\n{done.stderr[-3000:]}")
        frame = pd.read_csv(out)
    bw = [bandwidths(op, b, nproc, t * 1e-6) for op, b, t in zip(frame["op"], frame["bytes"], frame["time_median_us"])]
    frame["algbw_GBps"], frame["busbw_GBps"] = [a for a, _ in bw], [b for _, b in bw]
    frame["verified"] = False  # timed only; correctness of torch's own collectives is torch's tests' job
    return frame


def auto_choices(frame: pd.DataFrame, ranks: int = 2) -> pd.DataFrame:
    """Per (op, dtype, bytes): the fastest pkit variant measured and the mechanism "auto" picks for that size."""
    ours = frame[frame["implementation"].str.startswith("pkit")]
    best = ours.loc[ours.groupby(["op", "dtype", "bytes"])["time_median_us"].idxmin()]
    auto = [choose(op, per_peer_bytes(op, b, ranks), "auto") for op, b in zip(best["op"], best["bytes"])]
    return best.assign(auto=auto)[
        ["op", "dtype", "bytes", "implementation", "time_median_us", "auto"]].reset_index(drop=True)


def speedups(frame: pd.DataFrame, baseline: str = "nccl") -> pd.DataFrame:
    """Per (op, bytes): each implementation's time over its speedup against `baseline` (>1: faster)."""
    base = frame[frame["implementation"] == baseline].set_index(["op", "dtype", "bytes"])["time_median_us"]
    out = frame.join(base.rename("baseline_us"), on=["op", "dtype", "bytes"])
    out["speedup"] = out["baseline_us"] / out["time_median_us"]
    return out.dropna(subset=["speedup"])
