"""The ParallelKernelBench-style evaluation harness: `pkit eval`, `pkit problems`, `pkit.harness.baselines`.

Modules, one job each:
    problems   find and load `problems/*/problem.py`; cost table
    solutions  find candidate files; model and sample index from their paths
    pkb        the same for a ParallelKernelBench checkout
    launch     one worker process per rank, timeout, no orphans
    worker     one rank: inputs, reference, candidate, checks, timing
    checks     correctness of one rank's output
    timer      PKB-style timing inside a worker
    records    JSONL record schema and status taxonomy
    runner     evaluate candidates into records
    baseline   reference times at a real size → results/<machine>/baselines.csv
    cli        argparse wiring

Example:
    >>> import pkit.harness
    >>> pkit.harness.STATUSES[-1]
    'correct_faster'
"""
from __future__ import annotations

from .records import STATUSES


def baselines(**kwargs):
    """Record every problem's reference time; see `pkit.harness.baseline.baselines`."""
    from .baseline import baselines as _baselines

    return _baselines(**kwargs)


__all__ = ["STATUSES", "baselines"]
