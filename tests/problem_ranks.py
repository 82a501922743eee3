"""Ranks forked from a forkserver that imported torch and pkit once (for every spawn of the test process), each with
the environment torchrun gives a rank (`forked_ranks`); and on them, checks of every discovered problem in one gloo
process group per world size (`rank_reports`): each rank runs `check(name, rank, world_size)` for every problem
declaring that world size and writes what it returned (a dict; `{"errors": [traceback]}` where it raised) as JSON,
so a test reads one report per rank instead of spawning per problem. A program's `main` forked from the same server
runs as `python -m` would start it (`forked_program`), without importing torch anew.
"""
import importlib
import json
import multiprocessing
import os
import signal
import sys
import tempfile
import traceback
import warnings
from datetime import timedelta
from functools import cache
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from processes import free_port

PRELOAD = ["torch", "torch.distributed", "torch.nn.attention.bias", "pkit", "pkit.problem_kit"]
"""What the forkserver imports before it forks a rank: with torch.nn.attention.bias, which solutions of problems 15
and 17 import (it imports torch._dynamo, about 1 s of a core), once for every rank forked."""


def _as_rank(rank, world_size, port, target, args):
    """In a forked process: the environment torchrun gives rank `rank` of `world_size`, one thread, then
    `target(*args)`."""
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size),
                      LOCAL_WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                      OMP_NUM_THREADS="1")
    warnings.filterwarnings("ignore", category=FutureWarning)
    torch.set_num_threads(1)
    target(*args)


def forked_ranks(world_size: int, target, *args) -> None:
    """`target(*args)` in `world_size` processes forked from the forkserver, as torchrun would start them; raises
    when one fails. `target` must be importable by name (a module-level function)."""
    multiprocessing.set_forkserver_preload(PRELOAD)
    mp.start_processes(_as_rank, args=(world_size, free_port(), target, args), nprocs=world_size,
                       start_method="forkserver")


def _check_problems(out_dir, check, names):
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", timeout=timedelta(seconds=30))
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
        forked_ranks(world_size, _check_problems, str(out_dir), check, names)
        return [json.loads(Path(out_dir, f"rank{r}.json").read_text()) for r in range(world_size)]

    return spawn


def _as_program(module: str, argv: list[str], env: dict, cwd: str, log: str) -> None:
    """In a forked process: `python -m MODULE ARGV` as a process started anew would run it, in a session of its own,
    SIGINT, SIGTERM and SIGHUP at their default actions, `env` its environment, `cwd` its folder, stdin /dev/null,
    stdout and stderr to the file `log`; what the module's `main(argv)` returns is the exit code."""
    os.setsid()
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, signal.SIG_DFL)
    os.environ.clear()
    os.environ.update(env)
    tempfile.tempdir = None
    os.chdir(cwd)
    null, out = os.open(os.devnull, os.O_RDONLY), os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    for fd, to in ((null, 0), (out, 1), (out, 2)):
        os.dup2(fd, to)
    sys.argv = [module, *argv]
    sys.exit(importlib.import_module(module).main(argv))


def forked_program(module: str, argv: list[str], env: dict, cwd, log) -> multiprocessing.Process:
    """`python -m MODULE ARGV` (`_as_program`) in a process forked from the forkserver, started: its pid, exit code
    (`exitcode`, None while it runs) and `join` are the Process's. The server preloads torch and pkit; the program
    imports the rest."""
    multiprocessing.set_forkserver_preload(PRELOAD)
    proc = multiprocessing.get_context("forkserver").Process(target=_as_program, daemon=True,
                                                             args=(module, argv, env, str(cwd), str(log)))
    proc.start()
    return proc
