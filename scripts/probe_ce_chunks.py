"""Exploratory probe (not recorded): copy-engine all-reduce of 1 GiB by pipeline step, staging depth and SMs."""
import numpy as np

import pkit
from pkit.ops import copy_engine
from pkit.ops.baselines import NcclCollectives
from pkit.ops.collectives import Collectives

team = pkit.Team([0, 1])
n = 1 << 29
x, y = team.empty((n,), "bfloat16"), team.empty((n,), "bfloat16")
x.fill(np.uint16(0x3F80))
nccl = NcclCollectives(team)
r = pkit.bench(lambda: nccl.all_reduce(y, x), devices=[0, 1], reps=20, warmup=5, hide_launch=True)
print(f"nccl {r.median_us:.1f} us", flush=True)
for blocks in (64, 132):
    copy_engine.REDUCE_BLOCKS = blocks
    for chunk_mib, slots in ((64, 2), (128, 2), (256, 2), (64, 4), (512, 1)):
        coll = Collectives(team, ce_chunk_bytes=chunk_mib << 20, ce_slots=slots)
        r = pkit.bench(lambda: coll.all_reduce(y, x, mechanism="ce"), devices=[0, 1], reps=20, warmup=5, hide_launch=True)
        print(f"blocks {blocks} chunk {chunk_mib} MiB slots {slots}: {r.median_us:.1f} us (cv {r.cv:.3f})", flush=True)
        del coll
