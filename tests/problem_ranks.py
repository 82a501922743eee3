"""Checks of every discovered problem on every rank, in one gloo process group per world size: each rank runs
`check(name, rank, world_size)` for every problem declaring that world size and writes what it returned (a dict;
`{"errors": [traceback]}` where it raised) as JSON, so a test reads one report per rank instead of spawning per
problem. The ranks fork from a forkserver that imported torch and pkit once (for every spawn of the test process).
"""
import json
import multiprocessing
import traceback
import warnings
from datetime import timedelta
from functools import cache
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from pkit.harness.launch import free_port

PRELOAD = ["torch", "torch.distributed", "pkit", "pkit.problem_kit"]
"""What the forkserver imports before it forks a rank."""


def _worker(rank, world_size, port, out_dir, check, names):
    warnings.filterwarnings("ignore", category=FutureWarning)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size,
                            timeout=timedelta(seconds=30))
    report = {}
    try:
        for name in names:
            try:
                report[name] = check(name, rank, world_size)
            except Exception:
                report[name] = {"errors": [traceback.format_exc()]}
    finally:
        dist.destroy_process_group()
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(report))


def rank_reports(tmp_path_factory, check, problems: dict, tag: str):
    """reports(world_size): each rank's {problem name: what `check` returned}, from one spawn per world size over
    the problems of `problems` (name -> Problem) that declare it."""

    @cache
    def spawn(world_size):
        out_dir = tmp_path_factory.mktemp(f"{tag}{world_size}")
        names = [name for name, p in problems.items() if world_size in p.world_sizes]
        multiprocessing.set_forkserver_preload(PRELOAD)
        mp.start_processes(_worker, args=(world_size, free_port(), str(out_dir), check, names), nprocs=world_size,
                           start_method="forkserver")
        return [json.loads(Path(out_dir, f"rank{r}.json").read_text()) for r in range(world_size)]

    return spawn
