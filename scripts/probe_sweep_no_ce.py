"""Exploratory probe (not recorded): the collectives sweep without the copy-engine reductions."""
import time

import pandas as pd

from pkit.experiments import collectives

pd.set_option("display.width", 250)
original = collectives._variants
collectives._variants = lambda op, nbytes, ranks: [v for v in original(op, nbytes, ranks)
                                                   if not (v[0] == "pkit_ce" and op in ("all_reduce", "reduce_scatter"))]
t0 = time.time()
df = collectives.sweep(sizes=[1 << p for p in (16, 18, 20, 22, 24, 26, 28, 30)], dtype="bfloat16", reps=20)
print(df.pivot_table(index=["op", "bytes"], columns="implementation", values="time_median_us").round(1).to_string())
print(df.pivot_table(index=["op", "bytes"], columns="implementation", values="busbw_GBps").round(1).to_string())
print("sweep s", time.time() - t0, flush=True)
