"""Start one worker process per rank for one candidate, wait with a timeout, and never leave orphans.

Each rank runs `python -m pkit.harness.worker` in its own process session, so a kill reaches everything
it started (compilers, helper processes). Ranks meet over a free TCP port on 127.0.0.1. Every worker
gets NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and NVSHMEM_DISABLE_NVLS=1 (NVLink
multicast is forbidden on the shared GPU hosts) and its own TORCH_EXTENSIONS_DIR (ranks building the
same extension at once would corrupt a shared cache).

When a rank exits with an error, the others get `grace_s` to finish (they are usually stuck in a
collective) and are then killed; when the whole run passes `timeout_s`, all are killed.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

PKIT_PARENT = Path(__file__).resolve().parents[2]
LOG_TAIL_CHARS = 4000


@dataclass
class RankOutcome:
    """What one rank left behind: exit code (negative: killed by that signal), result file, log tail, the
    last phase it entered (e.g. 'candidate, trial 1') and when it exited relative to the others."""

    rank: int
    pid: int | None
    returncode: int | None
    result: dict | None
    log_tail: str
    phase: str | None
    exit_order: int | None


@dataclass
class RunOutcome:
    """All ranks of one run; `timed_out` when the run was killed at its deadline; `wall_s` in seconds."""

    ranks: list[RankOutcome]
    timed_out: bool
    wall_s: float


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def worker_env(rank: int, world_size: int, port: int, device: str) -> dict:
    """The environment of one worker process."""
    env = dict(os.environ)
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), LOCAL_RANK=str(rank),
               WORLD_SIZE=str(world_size), NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1",
               NVSHMEM_DISABLE_NVLS="1", PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join(p for p in (str(PKIT_PARENT), os.environ.get("PYTHONPATH")) if p))
    base = os.environ.get("TORCH_EXTENSIONS_DIR", str(Path.home() / ".cache" / "torch_extensions"))
    env["TORCH_EXTENSIONS_DIR"] = str(Path(base) / f"pkit_rank_{rank}")
    if device == "cpu" and "OMP_NUM_THREADS" not in os.environ:
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // world_size))
    return env


def run_workers(spec: dict, *, timeout_s: float, grace_s: float = 5.0, poll_s: float = 0.05) -> RunOutcome:
    """Run one evaluation described by `spec` (see pkit.harness.worker) on `spec['world_size']` ranks."""
    folder = Path(tempfile.mkdtemp(prefix="pkit-eval-"))
    try:
        return _run_in(folder, spec, timeout_s, grace_s, poll_s)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _run_in(folder: Path, spec: dict, timeout_s: float, grace_s: float, poll_s: float) -> RunOutcome:
    world_size = spec["world_size"]
    spec_path = folder / "spec.json"
    spec_path.write_text(json.dumps(spec))
    procs, logs = [], []
    start = time.monotonic()
    timed_out = False
    order: dict[int, int] = {}
    try:
        port = free_port()
        for rank in range(world_size):
            log = open(folder / f"rank_{rank}.log", "wb")
            logs.append(log)
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "pkit.harness.worker", str(spec_path), str(rank)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=worker_env(rank, world_size, port, spec["device"]), start_new_session=True))
        settle_by = None
        while True:
            for rank, proc in enumerate(procs):
                if rank not in order and proc.poll() is not None:
                    order[rank] = len(order)
            if len(order) == world_size:
                break
            now = time.monotonic()
            if now - start > timeout_s:
                timed_out = True
                break
            failed = any(procs[r].returncode != 0 for r in order)
            results_in = all((folder / f"rank_{r}.json").exists() for r in range(world_size))
            if settle_by is None and (failed or results_in):
                settle_by = now + grace_s
            if settle_by is not None and now > settle_by:
                break
            time.sleep(poll_s)
    finally:
        for proc in procs:
            _kill_session(proc)
        for log in logs:
            log.close()
    ranks = [RankOutcome(r, proc.pid, proc.returncode, _read_json(folder / f"rank_{r}.json"),
                         _tail(folder / f"rank_{r}.log"), _read_text(folder / f"rank_{r}.phase"), order.get(r))
             for r, proc in enumerate(procs)]
    return RunOutcome(ranks, timed_out, time.monotonic() - start)


def _kill_session(proc: subprocess.Popen) -> None:
    """SIGKILL the worker's whole process session (it leads its own group), then reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _tail(path: Path) -> str:
    try:
        return path.read_bytes()[-LOG_TAIL_CHARS:].decode("utf-8", errors="replace")
    except OSError:
        return ""
