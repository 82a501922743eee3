"""Probe: the LL all-reduce with the current line layout against the recorded latency (exit 1 if 64 KiB is not faster)."""
import pandas as pd
from pkit.experiments import collectives
old = pd.read_csv("results/h200x2-nv18/collectives_latency.csv")
old = old[(old.implementation == "pkit_ll")].set_index("bytes")["time_median_us"]
new = collectives.sweep(ops=["all_reduce"], sizes=list(old.index), reps=20, calls_per_sample=20,
                        implementations=["pkit_ll"]).set_index("bytes")["time_median_us"]
print(pd.DataFrame({"recorded_us": old, "new_layout_us": new}).round(3))
raise SystemExit(0 if new[65536] < old[65536] else 1)
