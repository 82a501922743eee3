"""The ParallelKernelBench-style evaluation harness: `pkit eval`, `pkit problems`, `pkit.harness.baselines`.

Modules, one job each:
    problem    one problem: its META, files and functions; loading a Python file as a module
    problems   find and load `problems/*/problem.py`; cost table
    solutions  find candidate files; model and sample index from their paths
    pkb        the same for a ParallelKernelBench checkout
    launch     worker sets: one process per rank, messages, deadlines, no orphans
    zygote     forks workers from a process that imported torch once
    contain    subreaper, killing process trees, signals, bounded log tails
    channel    JSON messages between the parent and a worker
    snapshot   outputs and inputs as plain data, loaded safely by the parent
    worker     one rank: serves trials, timing and expected outputs; judges nothing
    fresh      each timed call's inputs changed just before it, with a seed revealed then
    reference  the reference's workers: trial outputs, in-place contract, timing, expected outputs
    checks     correctness of one rank's output, fingerprints of timed outputs (in the parent)
    timer      PKB-style timing inside a worker, clocks bound before a candidate loads
    records    JSONL record schema and status taxonomy
    options    EvalOptions and what they mean for a problem: device, dtype, worker spec, timing counts, tolerances
    candidate  one candidate against a started reference: trials, interleaved timing rounds, its verdict
    integrity  timing checks: reported times against what the parent saw, the rounds' verdict, the reference
               slowed beside the candidate, the roofline wall
    speedup    a correct candidate's timing fields: medians, speedup, its interval over rounds, the status
    failures   status and reason of a run that stopped early: which rank's failure explains it
    outcome    a candidate's record: its trials' fields, what ran, roofline, provenance
    runner     the evaluation loop: a reference per problem, each candidate in fresh workers, records as known
    versions   what a record's verdict depends on beyond its key (harness, problem, candidate, settings)
    shards     split the (problem, candidate) pairs into N shards alike on every machine
    resume     skip what an --out holds, drop a line cut short, one writer at a time
    merge      join shard files into one, refusing mixed versions and disagreeing duplicates
    ray_pool   the shards as Ray tasks, their records written by the process that started them
    baseline   reference times at a real size → results/<machine>/baselines.csv (also from JSONL sweeps)
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
