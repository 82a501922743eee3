"""Record every problem's reference time at a real size: `results/<machine>/baselines.csv` (+ .json).

Each problem's reference runs as its own candidate through the harness (fresh worker processes, the
same correctness trials and timing), so a baseline is measured exactly as candidates are. Needs GPUs for
meaningful numbers; on the CPU it still runs (device 'cpu') and says so in the `device` column.

Example:
    >>> import pkit.harness                                                   # doctest: +SKIP
    >>> frame = pkit.harness.baselines(size="large", world_size=2)            # doctest: +SKIP
    >>> frame[["problem", "ref_time_ms_median", "roofline_fraction"]]         # doctest: +SKIP
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Callable, Iterable

import pandas as pd

from .problems import discover, select
from .runner import EvalOptions, evaluate, reference_candidate

COLUMNS = ("problem", "category", "size", "dtype", "world_size", "device", "status", "ref_time_ms_median",
           "ref_time_ms_min", "ref_time_ms_iqr", "ref_time_cv", "rotations", "roofline_time_ms", "roofline_bound",
           "roofline_fraction")
"""Columns of baselines.csv; `roofline_fraction` is roofline time over the reference's median time."""


def baselines(*, size: str = "large", dtype: str | None = None, world_size: int = 2,
              problems_root: str | Path | None = None, names: Iterable[str] | None = None, trials: int = 1,
              warmup: int = 25, iters: int = 100, timeout_s: float = 600.0, device: str = "auto",
              machine: str | None = None, out: str | Path | None = None, experiment: str = "baselines",
              log: Callable[[str], None] | None = None) -> pd.DataFrame:
    """Time each problem's reference (`names`, default all) and record the table through pkit.results.record.

    `out` also keeps the full JSONL records (default: they are not kept).
    Returns the recorded frame, one row per problem, times in milliseconds.
    """
    from .. import results

    problems = select(discover(problems_root), names)
    options = EvalOptions(world_size=world_size, size=size, dtype=dtype, trials=trials, perf=True, warmup=warmup,
                          iters=iters, timeout_s=timeout_s, device=device)
    parameters = {"size": size, "dtype": dtype, "world_size": world_size, "trials": trials, "warmup": warmup,
                  "iters": iters, "problems": [p.name for p in problems]}
    pairs = [(p, reference_candidate(p)) for p in problems]
    with tempfile.TemporaryDirectory(prefix="pkit-baselines-") as scratch:
        records = evaluate(pairs, options, out or Path(scratch) / "baselines.jsonl",
                           provenance=results.provenance(parameters), log=log)
    rows = [{"problem": r["problem"], "category": r["category"], "size": r["size"], "dtype": r["dtype"],
             "world_size": r["world_size"], "device": r["device"], "status": r["status"],
             "ref_time_ms_median": r["ref_time_ms"], "ref_time_ms_min": r["ref_time_min_ms"],
             "ref_time_ms_iqr": r["ref_time_iqr_ms"], "ref_time_cv": r["ref_time_cv"], "rotations": r["rotations"],
             "roofline_time_ms": r["roofline_time_ms"], "roofline_bound": r["roofline_bound"],
             "roofline_fraction": (r["roofline_time_ms"] / r["ref_time_ms"]
                                   if r["ref_time_ms"] and r["roofline_time_ms"] is not None else None)}
            for r in records]
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    results.record(experiment, frame, parameters, machine=machine)
    return frame
