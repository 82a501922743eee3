"""Exploratory probe (not recorded): does the copy-engine all-reduce survive pkit.bench's stream hold?"""
import sys
import time

import numpy as np

import pkit
from pkit.launch import timeout_report
from pkit.ops.collectives import Collectives

nbytes, hide = int(sys.argv[1]), sys.argv[2] == "1"
pkit.launch.set_wait_timeout(3.0)
team = pkit.Team([0, 1])
coll = Collectives(team)
x, y = team.empty((nbytes // 2,), "bfloat16"), team.empty((nbytes // 2,), "bfloat16")
x.fill(np.uint16(0x3F80))
coll.all_reduce(y, x, mechanism="ce")
team.synchronize()
stamps = []
def call():
    t = time.perf_counter()
    coll.all_reduce(y, x, mechanism="ce")
    stamps.append(time.perf_counter() - t)
try:
    r = pkit.bench(call, devices=[0, 1], reps=20, warmup=5, hide_launch=hide)
    print(f"OK size={nbytes} hide={hide} median_us={r.median_us:.1f} busbw={nbytes / r.median_ms / 1e6:.1f}")
except Exception as e:
    print(f"FAIL size={nbytes} hide={hide}: {type(e).__name__}: {str(e)[:300]}")
    print("report:", timeout_report())
print("host enqueue s per call:", np.round(stamps, 4).tolist())
