"""Collectives study: pkit's kernels against NCCL (one process, CuPy), torch.distributed and torch symmetric
memory (one process per GPU), measured in the same run.

Sizes are nccl-tests' S: the whole buffer (all-reduce, all-to-all), the gathered output (all-gather),
the scattered input (reduce-scatter). Rows carry algbw and busbw in GB/s. Implementations are named
`pkit_<mechanism>` (`pkit_sm`, `pkit_ll`, `pkit_ce`) or `pkit_sm_<algorithm>` (`pkit_sm_one_shot`,
`pkit_sm_two_shot`), then `nccl`, `torch_nccl`, `torch_symm_one_shot`, `torch_symm_two_shot`, and
`empty_kernel` for the launch floor.

Example:
    >>> from pkit.experiments import collectives
    >>> df = collectives.sweep(sizes=[1 << 16, 1 << 30], dtype=["bfloat16", "float32"])  # every GPU  # doctest: +SKIP
    >>> collectives.best_pkit(df)                                                        # doctest: +SKIP
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from ...bf16 import NAN_BITS, from_bf16_bits, to_bf16_bits
from ...gpus import on_device as _on
from ...ops.baselines import NcclCollectives, runs as nccl_runs
from ...ops.collective_ops import COLLECTIVES, bandwidths, choose, collective, per_peer_bytes
from ...ops.collectives import Collectives
from ...studies import part_devices
from ...team import team_devices
from ...timing import bench as time_calls
from ...tolerance import tolerance
from .pytorch import SYMM_MIN_BYTES, TORCH_OPS
from ..torchrun import gpu_processes, torchrun

DEFAULT_SIZES = tuple(1 << p for p in range(16, 31, 2))  # 64 KiB → 1 GiB
SWEPT_ITEMSIZES = {"bfloat16": 2, "float32": 4}  # bytes per element of the swept dtypes
ROOT = 0  # the root of the rooted ops (broadcast, reduce) in every measurement, as nccl-tests' default


def implementation_names() -> list[str]:
    """Every implementation name `sweep` can measure: pkit's variants of the registered ops (at size 0, where
    every mechanism fits), then 'nccl'."""
    names = [name for op in COLLECTIVES.values() for name, _ in op.variants(0, 1)]
    return list(dict.fromkeys(names + ["nccl"]))


def _variants(op: str, nbytes: int, ranks: int):
    """(implementation name, call(coll, nccl, out, inp)) pairs for one op at total size `nbytes`: pkit's variants
    from the registry (`CollectiveOp.variants`), then NCCL's where the baseline runs the op; rooted ops at ROOT."""
    root = {"root": ROOT} if collective(op).rooted else {}
    variants = [(name, lambda c, n, o, i, options=options: c.run(op, o, i, **options, **root))
                for name, options in collective(op).variants(nbytes, ranks)]
    if nccl_runs(op):
        variants.append(("nccl", lambda c, n, o, i: n.run(op, o, i, **root)))
    return variants


def _empty_buffers(team, op: str, nbytes: int, dtype: str):
    """(out, inp) SymmetricArrays of `op` for total size `nbytes`, shaped by the registry (`CollectiveOp.counts`)."""
    inp_count, out_count = collective(op).counts(nbytes // SWEPT_ITEMSIZES[dtype], team.size)
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
    """Whether two results agree (to bf16/fp32 rounding of differently ordered sums): within `dtype`'s relative
    tolerance (`pkit.tolerance`) of the larger of 1 and the largest magnitude of `b`."""
    import cupy as cp

    def f32(x):
        return from_bf16_bits(x) if dtype == "bfloat16" else x

    fa, fb = f32(a), f32(b)
    scale = max(1.0, float(cp.abs(fb).max()))
    return bool(cp.all(cp.isfinite(fa))) and float(cp.abs(fa - fb).max()) <= tolerance(dtype)[1] * scale


def _dtypes(dtype: str | Sequence[str]) -> list[str]:
    """One dtype or several, as a list; each must be one the sweeps measure."""
    dtypes = [dtype] if isinstance(dtype, str) else list(dtype)
    if not dtypes or any(d not in SWEPT_ITEMSIZES for d in dtypes):
        raise ValueError(f"dtype: expected 'bfloat16', 'float32' or a list of them, got {dtype!r}")
    return dtypes


def sweep(ops: Sequence[str] = tuple(COLLECTIVES), sizes: Sequence[int] = DEFAULT_SIZES, dtype: str | Sequence[str] = "bfloat16",
          devices: Sequence[int] | None = None, reps: int = 20, calls_per_sample: int = 1,
          implementations: Sequence[str] | None = None, graph: bool = False) -> pd.DataFrame:
    """pkit's collectives and single-process NCCL on the same buffers, one rank per GPU of `devices` (default: every
    GPU of this machine, at least two); each result checked against NCCL's (the registry's NumPy reference for an
    op NCCL lacks).

    `graph=True` times CUDA-graph replays of `calls_per_sample` calls (nccl-tests' -G; see pkit.bench), leaving
    out the copy-engine variants (they order the GPUs with events, which per-GPU graphs cannot hold); the
    output of the last replay is checked again. Rows say which in `timing` ('graph' or 'launches').

    `dtype`: one dtype or a list ('bfloat16', 'float32'), measured in that order. `calls_per_sample` > 1
    times that many back-to-back calls per sample (nccl-tests' averaging; see pkit.bench). `implementations`
    keeps only those names (`implementation_names()`: pkit_sm_one_shot, pkit_sm_two_shot, pkit_sm, pkit_ll,
    pkit_ce, nccl); by default all that apply to the size. Columns: implementation, op, dtype, bytes,
    calls_per_sample, time_{median,min,max}_us, cv, algbw_GBps, busbw_GBps, verified.
    """
    import pkit

    unknown = [op for op in ops if op not in COLLECTIVES]
    if unknown:
        raise ValueError(f"ops: unknown {unknown}; expected names from {tuple(COLLECTIVES)}")
    known = implementation_names()
    if implementations is not None and not set(implementations) <= set(known):
        raise ValueError(f"implementations: expected names from {known}, got {list(implementations)}")
    dtypes = _dtypes(dtype)
    devices = part_devices("collectives_pkit_nccl", devices)
    quantum = 16 * len(devices)
    if not sizes or any(s <= 0 or s % quantum for s in sizes):
        raise ValueError(f"sizes: expected positive multiples of {quantum} bytes (16 per rank), got {list(sizes)}")
    team = pkit.Team(devices)
    coll, nccl = Collectives(team), NcclCollectives(team)
    rows = []
    for dt in dtypes:
        for op in tqdm(ops, desc=f"collectives ({dt})", leave=False):
            for nbytes in sizes:
                rows += _measure(team, coll, nccl, op, nbytes, dt, implementations,
                                 dict(devices=devices, reps=reps, warmup=5, hide_launch=True,
                                      calls_per_sample=calls_per_sample, graph=graph))
    return pd.DataFrame(rows)


def _measure(team, coll, nccl, op: str, nbytes: int, dtype: str, implementations, bench: dict) -> list[dict]:
    """Rows of `sweep` for one op and size: every variant checked against the expected output, then timed."""
    out, inp = _buffers(team, op, nbytes, dtype)
    expected = _expected(team, nccl, op, inp, out.shape, dtype)
    rows = []
    for name, call in _variants(op, nbytes, team.size):
        if (implementations is not None and name not in implementations) or (bench["graph"] and name == "pkit_ce"):
            continue
        out.fill(NAN_BITS if dtype == "bfloat16" else np.float32(np.nan))
        team.synchronize()
        call(coll, nccl, out, inp)
        team.synchronize()
        _check_output(team, op, out, expected, dtype, f"{name} {op} of {nbytes} bytes ({dtype})")
        r = time_calls(lambda call=call: call(coll, nccl, out, inp), **bench)
        _check_output(team, op, out, expected, dtype, f"{name} {op} of {nbytes} bytes ({dtype}), after timing")
        algbw, busbw = bandwidths(op, nbytes, team.size, r.median_ms * 1e-3)
        rows.append({"implementation": name, "op": op, "dtype": dtype, "bytes": nbytes,
                     "calls_per_sample": bench["calls_per_sample"], "timing": "graph" if bench["graph"] else "launches",
                     **r.times_us(), "algbw_GBps": algbw, "busbw_GBps": busbw, "verified": True})
    return rows


def _check_output(team, op: str, out, expected, dtype: str, what: str) -> None:
    """Every rank's output the op writes equals the expected one (within the dtype's rounding), and every other
    rank's (a reduce's off its root, `sweep`'s root 0) still holds the NaNs it was poisoned with; or an
    AssertionError."""
    def right(r):
        if collective(op).writes(r, ROOT):
            return _matches(out[r], expected[r], dtype)
        return _poisoned(out[r], dtype)

    if not all(_on(team.devices[r], lambda r=r: right(r)) for r in range(team.size)):
        raise AssertionError(f"{what} disagrees with the expected output")


def _poisoned(a, dtype: str) -> bool:
    """Whether every element of `a` is NaN (what `_measure` fills outputs with)."""
    import cupy as cp

    return bool(cp.all(cp.isnan(from_bf16_bits(a) if dtype == "bfloat16" else a)))


def _expected(team, nccl, op: str, inp, out_shape, dtype: str):
    """Every rank's right output: NCCL's where the baseline runs the op, else the registry's NumPy reference
    (`CollectiveOp.reference`, in float32) copied to each GPU."""
    import cupy as cp

    expected = team.empty(out_shape, dtype)
    if nccl_runs(op):
        nccl.run(op, expected, inp, *((ROOT,) if collective(op).rooted else ()))
    else:
        as_f32 = from_bf16_bits if dtype == "bfloat16" else (lambda x: x)
        inputs = [cp.asnumpy(_on(team.devices[r], lambda r=r: as_f32(inp[r]))) for r in range(team.size)]
        for r in range(team.size):
            want = collective(op).reference(inputs, r, ROOT)
            if want is None:  # the op leaves this rank's output alone
                continue
            want = want.astype(np.float32)
            with cp.cuda.Device(team.devices[r]):
                values = cp.asarray(want)
                expected[r][...] = to_bf16_bits(values) if dtype == "bfloat16" else values
    team.synchronize()
    return expected


def launch_floor(devices: Sequence[int] | None = None, calls_per_sample: int = 20, reps: int = 20) -> pd.DataFrame:
    """The time of an empty kernel launched on every GPU of `devices` (default: every GPU of this machine), timed as
    `sweep` times collectives: the floor under any collective that is one kernel per GPU. One row, implementation
    'empty_kernel', bytes 0."""
    import pkit

    devices = team_devices(devices)
    spin = pkit.compile("spin.cu", "spin_ns")
    r = pkit.bench(lambda: [spin((1,), (1,), (np.uint64(0),), device=d) for d in devices], devices=devices,
                   reps=reps, warmup=5, hide_launch=True, calls_per_sample=calls_per_sample)
    return pd.DataFrame([{"implementation": "empty_kernel", "op": "all_reduce", "dtype": "none", "bytes": 0,
                          "calls_per_sample": calls_per_sample, **r.times_us(), "verified": False}])


def torch_baselines(sizes: Sequence[int] = DEFAULT_SIZES, dtype: str | Sequence[str] = "bfloat16",
                    nproc: int | None = None, reps: int = 20, timeout_s: float = 600, calls_per_sample: int = 1,
                    ops: Sequence[str] = TORCH_OPS, graph: bool = False) -> pd.DataFrame:
    """torch.distributed, torch symmetric memory and pkit.dist (`pkit_dist`: pkit's kernels on torch tensors) under
    torchrun (one process per GPU: `nproc` of them, default every GPU of this machine; one run per dtype of
    `dtype`: one or a list), the same columns as `sweep`; `graph` times CUDA-graph replays."""
    dtypes = _dtypes(dtype)
    nproc = gpu_processes(nproc, "collectives_torch")
    frames = [torchrun("pkit.experiments.collectives.pytorch",
                       ["--dtype", dt, "--reps", reps, "--calls-per-sample", calls_per_sample, "--ops", *ops,
                        *(["--graph"] if graph else []), "--sizes", *sizes], nproc=nproc, timeout_s=timeout_s)
              for dt in dtypes]
    frame = pd.concat(frames, ignore_index=True)
    bw = [bandwidths(op, b, nproc, t * 1e-6) for op, b, t in zip(frame["op"], frame["bytes"], frame["time_median_us"])]
    frame["algbw_GBps"], frame["busbw_GBps"] = [a for a, _ in bw], [b for _, b in bw]
    # torch's own collectives are timed only (their correctness is torch's tests' job); pkit_dist rows say whether
    # pkit.dist's output matched NCCL's on the timed inputs
    frame["verified"] = frame["verified"].fillna(False).astype(bool)
    return frame


# The all-reduce latency study: sizes, and the variants timed (those that are not the copy engine's, which is
# host-bound at small sizes), beside NCCL.
LATENCY_SIZES = (32, 1 << 12, 1 << 14, 1 << 16, 1 << 18, 1 << 20)
LATENCY_IMPLEMENTATIONS = tuple(name for name, options in collective("all_reduce").variants(0, 2)
                                if options.get("mechanism") != "ce") + ("nccl",)
TORCH_MIN_BYTES = SYMM_MIN_BYTES


def latency_sweep(sizes: Sequence[int] = LATENCY_SIZES, calls_per_sample: int = 20, reps: int = 20,
                  implementations: Sequence[str] = LATENCY_IMPLEMENTATIONS,
                  devices: Sequence[int] | None = None) -> pd.DataFrame:
    """bf16 all-reduce latency as nccl-tests times it: `calls_per_sample` back-to-back calls per sample, of
    each of `implementations` at each size, after the launch floor (`launch_floor`, row 'empty_kernel'), on
    `devices` (default: every GPU of this machine, at least two). Columns as `sweep`'s; times in µs per call."""
    devices = part_devices("collectives_latency", devices)
    return pd.concat([launch_floor(devices, calls_per_sample=calls_per_sample, reps=reps),
                      sweep(ops=["all_reduce"], sizes=sizes, reps=reps, calls_per_sample=calls_per_sample,
                            implementations=implementations, devices=devices)], ignore_index=True)


GRAPH_SIZES = (4, 32, 256, 1 << 11, 1 << 14, 1 << 17, 1 << 20, 1 << 22)  # 4 B → 4 MiB, ×8 steps


def graph_latency(sizes: Sequence[int] = GRAPH_SIZES, dtype: str = "bfloat16", calls_per_sample: int = 20,
                  reps: int = 20, nproc: int | None = None) -> pd.DataFrame:
    """Every op timed from CUDA-graph replays (nccl-tests' -G: no host launch path), `calls_per_sample` calls per
    replay, on GPUs 0 .. nproc − 1 (default every GPU of this machine): pkit's one-process collectives beside
    one-process NCCL at the sizes whose shares are whole 16-byte packs, and under torchrun torch NCCL, pkit.dist
    (`pkit_dist`, any size) and torch symmetric memory (all-reduce, from SYMM_MIN_BYTES). Columns as `sweep`'s,
    `timing` 'graph'; `best_peer` compares them."""
    nproc = gpu_processes(nproc, "collectives_torch")
    whole = [s for s in sizes if s % (16 * nproc) == 0]
    ours = sweep(sizes=whole, dtype=dtype, devices=tuple(range(nproc)), reps=reps,
                 calls_per_sample=calls_per_sample, graph=True)
    theirs = torch_baselines(sizes=sizes, dtype=dtype, nproc=nproc, reps=reps, calls_per_sample=calls_per_sample,
                             graph=True)
    return pd.concat([ours, theirs], ignore_index=True)


def latency_torch(sizes: Sequence[int] = LATENCY_SIZES, calls_per_sample: int = 20, reps: int = 20,
                  nproc: int | None = None) -> pd.DataFrame:
    """`latency_sweep`'s measurement for torch.distributed and torch symmetric memory (bf16 all-reduce, sizes
    from TORCH_MIN_BYTES up), through `torch_baselines` (`nproc` processes, default one per GPU)."""
    return torch_baselines(sizes=[s for s in sizes if s >= TORCH_MIN_BYTES], nproc=nproc, reps=reps,
                           calls_per_sample=calls_per_sample, ops=["all_reduce"])


def speedups(frame: pd.DataFrame, baseline: str = "nccl") -> pd.DataFrame:
    """Per (op, dtype, bytes): each implementation's time and its speedup against `baseline` (>1: faster);
    rows without a baseline at their size are dropped."""
    base = frame[frame["implementation"] == baseline].set_index(["op", "dtype", "bytes"])["time_median_us"]
    out = frame.join(base.rename("baseline_us"), on=["op", "dtype", "bytes"])
    out["speedup"] = out["baseline_us"] / out["time_median_us"]
    return out.dropna(subset=["speedup"])


def best_pkit(frame: pd.DataFrame, link_GBps: float | None = None, baseline: str = "nccl",
              ranks: int = 2) -> pd.DataFrame:
    """Per (dtype, op, bytes): the fastest pkit implementation measured, its time (µs), busbw (GB/s), speedup
    against `baseline` measured in the same run (×), with `link_GBps` its busbw's share of that link
    (of_link), and `auto`: the mechanism `pkit.ops.collectives.choose` picks for that size, which should be
    the fastest one's.

    Example:
        >>> df = pd.DataFrame({"implementation": ["nccl", "pkit_ll", "pkit_sm"], "op": ["all_gather"] * 3,
        ...                    "dtype": ["bfloat16"] * 3, "bytes": [1 << 16] * 3, "time_median_us": [9.2, 7.8, 11.0],
        ...                    "busbw_GBps": [3.6, 4.2, 3.0]})
        >>> best_pkit(df)[["implementation", "speedup", "auto"]].round(2).values.tolist()
        [['pkit_ll', 1.18, 'll']]
    """
    sp = speedups(frame, baseline)
    ours = sp[sp["implementation"].str.startswith("pkit")]
    best = ours.loc[ours.groupby(["dtype", "op", "bytes"])["time_median_us"].idxmin()]
    best = best.assign(auto=[choose(op, per_peer_bytes(op, b, ranks), "auto") for op, b in zip(best["op"], best["bytes"])])
    if link_GBps is not None:
        best = best.assign(of_link=best["busbw_GBps"] / link_GBps)
    columns = ["dtype", "op", "bytes", "implementation", "time_median_us", "busbw_GBps", "speedup"]
    return best[columns + (["of_link"] if link_GBps is not None else []) + ["auto"]].reset_index(drop=True)


PEERS = ("nccl", "torch_nccl", "torch_symm_one_shot", "torch_symm_two_shot")  # what pkit is compared with
TIE = 0.02  # pkit within 2% of the best peer counts as level with it


def best_peer(frame: pd.DataFrame, peers: Sequence[str] = PEERS) -> pd.DataFrame:
    """Per (op, dtype, bytes, timing): pkit's fastest implementation against the fastest of `peers` measured at that
    point: both names and times (µs), pkit's speedup (peer time / pkit time, >1: pkit ahead) and a verdict
    ('ahead', 'level' within TIE, 'behind'). Points where either side is missing are left out.

    Example:
        >>> df = pd.DataFrame({"implementation": ["nccl", "torch_symm_two_shot", "pkit_ll", "pkit_sm_two_shot"],
        ...                    "op": ["all_reduce"] * 4, "dtype": ["bfloat16"] * 4, "bytes": [1 << 20] * 4,
        ...                    "timing": ["graph"] * 4, "time_median_us": [20.0, 13.8, 15.8, 14.0]})
        >>> best_peer(df)[["pkit", "peer", "speedup", "verdict"]].round(3).values.tolist()
        [['pkit_sm_two_shot', 'torch_symm_two_shot', 0.986, 'level']]
    """
    keys = ["op", "dtype", "bytes", "timing"]
    frame = frame if "timing" in frame else frame.assign(timing="launches")  # rows recorded before graph timing

    def fastest(rows: pd.DataFrame, side: str) -> pd.DataFrame:
        best = rows.loc[rows.groupby(keys)["time_median_us"].idxmin(), keys + ["implementation", "time_median_us"]]
        return best.rename(columns={"implementation": side, "time_median_us": f"{side}_us"})

    ours = fastest(frame[frame["implementation"].str.startswith("pkit")], "pkit")
    theirs = fastest(frame[frame["implementation"].isin(peers)], "peer")
    out = ours.merge(theirs, on=keys)
    out["speedup"] = out["peer_us"] / out["pkit_us"]
    out["verdict"] = ["ahead" if s > 1 + TIE else "level" if s >= 1 - TIE else "behind" for s in out["speedup"]]
    return out.sort_values(keys).reset_index(drop=True)


def table(frame: pd.DataFrame, values: str = "busbw_GBps", dtype: str = "bfloat16",
          sizes: Sequence[int] | None = None) -> pd.DataFrame:
    """`values` of one dtype's rows as a table: a row per (op, bytes), a column per implementation; with `sizes`,
    only those message sizes (bytes).

    Example:
        >>> df = pd.DataFrame({"implementation": ["nccl", "pkit_sm"], "op": ["all_gather"] * 2,
        ...                    "dtype": ["bfloat16"] * 2, "bytes": [1 << 30] * 2, "busbw_GBps": [269.8, 359.1]})
        >>> table(df).values.tolist()
        [[269.8, 359.1]]
    """
    rows = frame[frame["dtype"] == dtype]
    if rows.empty:
        raise ValueError(f"dtype: no rows of {dtype!r}; the frame has {sorted(frame['dtype'].unique())}")
    rows = rows if sizes is None else rows[rows["bytes"].isin(sizes)]
    return rows.pivot_table(index=["op", "bytes"], columns="implementation", values=values)


def best_summary(best: pd.DataFrame) -> pd.DataFrame:
    """A `best_pkit` table in one row per (dtype, op): sizes measured, how many of them pkit's fastest variant beats
    the baseline at (faster), its lowest and highest speedup (×), and at how many `auto` picks the fastest
    variant's mechanism (auto_fastest).

    Example:
        >>> best = pd.DataFrame({"dtype": ["bfloat16"] * 2, "op": ["all_gather"] * 2, "bytes": [1 << 16, 1 << 30],
        ...                      "implementation": ["pkit_ll", "pkit_sm"], "speedup": [1.18, 0.97], "auto": ["ll", "ce"]})
        >>> best_summary(best)                                                      # doctest: +NORMALIZE_WHITESPACE
                             sizes  faster  speedup_min  speedup_max  auto_fastest
        dtype    op
        bfloat16 all_gather      2       1         0.97         1.18             1
    """
    mechanism = best["implementation"].str.removeprefix("pkit_").str.split("_").str[0]
    marked = best.assign(faster=best["speedup"] > 1, auto_fastest=best["auto"] == mechanism)
    return marked.groupby(["dtype", "op"]).agg(sizes=("bytes", "size"), faster=("faster", "sum"),
                                               speedup_min=("speedup", "min"), speedup_max=("speedup", "max"),
                                               auto_fastest=("auto_fastest", "sum"))


def at_size(frame: pd.DataFrame, nbytes: int, op: str = "all_reduce",
            against: Sequence[str] = ("nccl",)) -> pd.DataFrame:
    """Every implementation of `op` at size `nbytes`: a row per (implementation, dtype), sorted by time, with
    time_us (median µs per call) and, for each name in `against` measured there, `<name>_over_this`: its time
    over this one's (>1: this one is faster).

    Example:
        >>> df = pd.DataFrame({"implementation": ["nccl", "pkit_ll"], "op": ["all_reduce"] * 2,
        ...                    "dtype": ["bfloat16"] * 2, "bytes": [65536] * 2, "time_median_us": [7.6, 4.5]})
        >>> at_size(df, 65536).round(2).values.tolist()
        [[4.5, 1.69], [7.6, 1.0]]
    """
    rows = frame[(frame["op"] == op) & (frame["bytes"] == nbytes)]
    if rows.empty:
        raise ValueError(f"nbytes: no {op} rows of {nbytes} bytes; sizes there: {sorted(frame['bytes'].unique())}")
    out = rows[["implementation", "dtype", "time_median_us"]].rename(columns={"time_median_us": "time_us"})
    for name in against:
        theirs = out[out["implementation"] == name].set_index("dtype")["time_us"]
        if len(theirs):
            out[f"{name}_over_this"] = out["dtype"].map(theirs) / out["time_us"]
    return out.sort_values(["dtype", "time_us"]).set_index(["implementation", "dtype"])


def latency_floors(frame: pd.DataFrame, nbytes: int = 1 << 16, smallest: int = 32) -> pd.DataFrame:
    """What bounds a small all-reduce, from a `latency_sweep` frame (µs per call), one row each: the empty
    kernel on every GPU ('empty_kernel'), pkit's LL all-reduce of `smallest` bytes, one crossing of the link
    and back ('ll_smallest'), half of NCCL's time at `nbytes`, the target ('nccl_half'), and the best pkit
    time at `nbytes` ('best_pkit'). Columns: what, time_us.

    Example:
        >>> df = pd.DataFrame({"implementation": ["empty_kernel", "pkit_ll", "pkit_ll", "nccl"],
        ...                    "op": ["all_reduce"] * 4, "bytes": [0, 32, 65536, 65536],
        ...                    "time_median_us": [1.53, 3.46, 4.55, 7.57]})
        >>> latency_floors(df)                                                # doctest: +NORMALIZE_WHITESPACE
                                                what  time_us
        empty_kernel       empty kernel on every GPU    1.530
        ll_smallest       pkit_ll all-reduce of 32 B    3.460
        nccl_half                NCCL at 65536 B / 2    3.785
        best_pkit     best pkit at 65536 B (pkit_ll)    4.550
    """
    ar = frame[frame["op"] == "all_reduce"]

    def time(implementation, size):
        at = ar.loc[(ar["implementation"] == implementation) & (ar["bytes"] == size), "time_median_us"]
        if at.empty:
            raise ValueError(f"frame: no {implementation} all-reduce of {size} bytes")
        return float(at.iloc[0])

    ours = ar[ar["implementation"].str.startswith("pkit") & (ar["bytes"] == nbytes)]
    if ours.empty:
        raise ValueError(f"frame: no pkit all-reduce of {nbytes} bytes")
    best = ours.loc[ours["time_median_us"].idxmin()]
    return pd.DataFrame({"what": ["empty kernel on every GPU", f"pkit_ll all-reduce of {smallest} B",
                                  f"NCCL at {nbytes} B / 2", f"best pkit at {nbytes} B ({best['implementation']})"],
                         "time_us": [time("empty_kernel", 0), time("pkit_ll", smallest), time("nccl", nbytes) / 2,
                                     float(best["time_median_us"])]},
                        index=["empty_kernel", "ll_smallest", "nccl_half", "best_pkit"])
