"""Exploratory probe (not recorded): new collective paths side by side, and a copy engine + SM split copy."""
import sys
import time

import cupy as cp
import numpy as np
import pandas as pd

import pkit
from pkit.ops.transfers import peer_copy

pd.set_option("display.width", 250)
t0 = time.time()
# split copy: copy engine on a side stream for a fraction, SM push for the rest, GPU0 -> GPU1
team = pkit.Team([0, 1])
side = {}
def split(dst, src, fraction, mech):
    n = src.nbytes
    k = (int(n * fraction) // 4096) * 4096
    with cp.cuda.Device(0):
        main = cp.cuda.get_current_stream()
        if 0 not in side:
            side[0] = cp.cuda.Stream(non_blocking=True)
        e = cp.cuda.Event(disable_timing=True); e.record(main); side[0].wait_event(e)
        if k:
            cp.cuda.runtime.memcpyPeerAsync(dst.data.ptr, 1, src.data.ptr, 0, k, side[0].ptr)
        if n - k:
            peer_copy(dst[k:], src[k:], mech)
        d = cp.cuda.Event(disable_timing=True); d.record(side[0]); main.wait_event(d)
from pkit.experiments.peer_copies import time_copy
rows = []
for size in (64 << 20, 1 << 30):
    for mech in ("register_push", "tma_push"):
        for f in (0.0, 0.5, 0.7, 0.8, 0.9, 1.0):
            row = time_copy(team, size, lambda d, s: split(d, s, f, mech), 0, reps=10, warmup=3)
            rows.append({"size": size, "mech": mech, "fraction_ce": f, "GBps": row["bandwidth_GBps"], "cv": row["cv"]})
            print(rows[-1], flush=True)
print("total s", time.time() - t0)
