"""Session 3 probe (exploratory, not recorded): (1) SM copy variants and split copies against the copy engine
at 256 MiB; (2) all-reduce latency per call vs averaged over back-to-back calls, pkit vs NCCL vs torch.
Writes CSVs under $OUT. Run on the 2-GPU machine from the repo root."""
import os
import sys

import cupy as cp
import numpy as np
import pandas as pd

import pkit
from pkit.experiments import collectives
from pkit.experiments.peer_copies import time_copy
from pkit.ops.transfers import peer_copy

OUT = os.environ.get("OUT", "out")
SIZE = 256 << 20
part = sys.argv[1] if len(sys.argv) > 1 else "all"


def variants():
    team = pkit.Team([0, 1])
    rows = []
    base = [("copy_engine", None, 0), ("register_pull", 132, 1), ("register_push", 132, 0)]
    for mech, blocks, on in base:
        rows.append({"variant": mech, "blocks": blocks, **time_copy(team, SIZE, lambda d, s: peer_copy(d, s, mech, blocks),
                                                                      on, reps=10, warmup=3)})
        print(rows[-1], flush=True)
    for kernel in ["copy_u8", "copy_u4_l2", "copy_u4_cs", "copy_spans_u4", "copy_spans_u8"]:
        fn = pkit.compile("scripts/probes/copy_variants.cu", kernel)
        for on, how in [(0, "push"), (1, "pull")]:
            for blocks in (132, 264):
                def copy(d, s, fn=fn, on=on, blocks=blocks):
                    fn((blocks,), (512,), (np.uint64(d.data.ptr), np.uint64(s.data.ptr), np.uint64(d.nbytes // 16)),
                       device=on)
                rows.append({"variant": f"{kernel}_{how}", "blocks": blocks, **time_copy(team, SIZE, copy, on, 10, 3)})
                print(rows[-1], flush=True)
    # Split copies were first timed here without joining the two GPUs' streams: each side then ran ahead on
    # its own and some samples read faster than the copy engine. Joined, they gain nothing; that
    # measurement is now pkit.ops.transfers.split_copy / pkit.experiments.mechanisms.split_sweep (notebook 03).
    pd.DataFrame(rows).to_csv(f"{OUT}/variants.csv", index=False)


def latency():
    sizes = [1 << 14, 1 << 16, 1 << 18]
    frames = []
    for k in (1, 20):
        frames.append(collectives.sweep(ops=["all_reduce"], sizes=sizes, reps=20, calls_per_sample=k,
                                        implementations=["pkit_one_shot", "pkit_two_shot", "pkit_ll", "nccl"]))
        frames.append(collectives.torch_baselines(sizes=sizes, reps=20, calls_per_sample=k, ops=["all_reduce"]))
    df = pd.concat(frames)
    df.to_csv(f"{OUT}/latency.csv", index=False)
    print(df[["implementation", "bytes", "calls_per_sample", "time_median_us", "time_min_us", "cv"]].to_string())


def floor():
    """Latency ladder: an empty kernel on both GPUs, then all-reduces of one 16-byte pack and of 64 KiB."""
    spin = pkit.compile("spin.cu", "spin_ns")
    rows = []
    for k in (1, 20):
        r = pkit.bench(lambda: [spin((1,), (1,), (np.uint64(0),), device=d) for d in (0, 1)], devices=[0, 1],
                       reps=20, warmup=5, hide_launch=True, calls_per_sample=k)
        rows.append({"implementation": "empty_kernel", "bytes": 0, "calls_per_sample": k,
                     "time_median_us": r.median_us, "cv": r.cv})
    df = pd.concat([pd.DataFrame(rows)] + [
        collectives.sweep(ops=["all_reduce"], sizes=[32, 1 << 16], reps=20, calls_per_sample=k,
                          implementations=["pkit_ll", "nccl"]) for k in (1, 20)])
    df.to_csv(f"{OUT}/floor.csv", index=False)
    print(df[["implementation", "bytes", "calls_per_sample", "time_median_us", "cv"]].to_string(), flush=True)


def ll_threads():
    """LL all-reduce time by threads per block (blocks = packs / threads, at most one per SM)."""
    import pkit.ops.collectives as C

    frames = []
    for threads in (32, 64, 128, 256, 512):
        C.LL_THREADS = threads
        df = collectives.sweep(ops=["all_reduce"], sizes=[32, 1 << 14, 1 << 16, 1 << 18], reps=20,
                               calls_per_sample=20, implementations=["pkit_ll"])
        frames.append(df.assign(ll_threads=threads))
    df = pd.concat(frames)
    df.to_csv(f"{OUT}/ll_threads.csv", index=False)
    print(df.pivot(index="bytes", columns="ll_threads", values="time_median_us").to_string(), flush=True)


PARTS = {"latency": latency, "variants": variants, "floor": floor, "ll_threads": ll_threads}
for name in PARTS if part == "all" else [part]:
    PARTS[name]()
