"""Start one worker process per rank, talk to them, wait with deadlines, and never leave a process behind.

A `WorkerSet` runs `python -m pkit.harness.worker SPEC RANK FD` for each rank, each in its own process
session, with one end of a socket pair (pkit.harness.channel) and its stdout and stderr in a pipe drained here
into a log file, capped at the spec's `output_bytes` (pkit.harness.contain.CappedOutput). Ranks meet at a
rendezvous file in the run folder (torch.distributed's FileStore). Every worker gets NCCL_NVLS_ENABLE=0,
TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and NVSHMEM_DISABLE_NVLS=1 (pkit never uses NVLink multicast) and its own
TORCH_EXTENSIONS_DIR (ranks building the same extension at once would corrupt a shared cache).

`gather(op)` waits until every rank has sent a message `op`, answering others on the way through a
callback. When a rank reports an error or dies, the others get up to `grace_s` to report theirs (they are
usually stuck in a collective) and `RunFailed` is raised once all have or the grace is over; past the deadline,
`RunTimeout`. `close()` kills the workers, everything they started and every orphan this process adopted
(pkit.harness.contain), except the processes of other sets still open.
"""
from __future__ import annotations

import json
import os
import re
import selectors
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from .channel import ProtocolError, pair
from .contain import OUTPUT_BYTES, CappedOutput, kill_tree
from .zygote import Zygote

PKIT_PARENT = Path(__file__).resolve().parents[2]


@dataclass
class RankState:
    """What the parent knows of one rank: its process, last phase, error report (as the worker sent it),
    exit code (negative: killed by that signal), order of exit among the ranks, the end of its output and the
    bytes of output dropped past the cap."""

    rank: int
    pid: int
    phase: str = "startup"
    error: dict | None = None
    returncode: int | None = None
    exit_order: int | None = None
    log_tail: str = ""
    output_dropped: int = 0
    inbox: list = field(default_factory=list)
    phase_s: dict = field(default_factory=dict)  # seconds per phase stem (phase_stem), by the parent's clock
    phase_since: float = field(default_factory=time.monotonic)

    @property
    def failed(self) -> bool:
        """True once this rank reported an error or exited."""
        return self.error is not None or self.returncode is not None

    def enter(self, phase: str, now: float) -> None:
        """Close the current phase's span at `now` (parent's monotonic clock) and start `phase`."""
        self.close_phase(now)
        self.phase = phase[:200]

    def close_phase(self, now: float) -> None:
        stem = phase_stem(self.phase)
        self.phase_s[stem] = self.phase_s.get(stem, 0.0) + now - self.phase_since
        self.phase_since = now


def phase_stem(phase: str) -> str:
    """A phase's name without its trial or set number, so repeated phases add up: 'inputs, trial 3' → 'inputs,
    trial'. Names come from the workers (pkit/harness/worker.py); the durations are measured here.

    >>> phase_stem("inputs, trial 3"), phase_stem("expect, set 12"), phase_stem("timing_candidate")
    ('inputs, trial', 'expect, set', 'timing_candidate')
    """
    return re.sub(r"\b(trial|set) \d+", r"\1", phase)


class RunFailed(Exception):
    """A rank reported an error, broke the protocol or died."""


class RunTimeout(Exception):
    """The deadline passed before every rank answered."""


def worker_env(rank: int, world_size: int, device: str) -> dict:
    """The environment of one worker process."""
    env = dict(os.environ)
    env.update(RANK=str(rank), LOCAL_RANK=str(rank),
               WORLD_SIZE=str(world_size), NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1",
               NVSHMEM_DISABLE_NVLS="1", PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join(p for p in (str(PKIT_PARENT), os.environ.get("PYTHONPATH")) if p))
    base = os.environ.get("TORCH_EXTENSIONS_DIR", str(Path.home() / ".cache" / "torch_extensions"))
    env["TORCH_EXTENSIONS_DIR"] = str(Path(base) / f"pkit_rank_{rank}")
    if device == "cpu" and "OMP_NUM_THREADS" not in os.environ:
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // world_size))
    return env


class WorkerSet:
    """The worker processes of one role (reference or candidate) for one problem."""

    open_sets: set = set()

    def __init__(self, spec: dict, folder: Path, *, grace_s: float = 5.0, log: Callable[[str], None] | None = None,
                 heartbeat_s: float = 30.0, zygote: Zygote | None = None):
        self.folder, self.grace_s, self.log, self.heartbeat_s = Path(folder), grace_s, log, heartbeat_s
        self.zygote = zygote
        self.folder.mkdir(parents=True, exist_ok=True)
        # the ranks meet at a file of their own, not at a TCP port: a port found free can be taken before rank 0
        # listens on it, which would fail a candidate for the machine's sake
        rendezvous = self.folder / f"{spec['role']}_rendezvous_{os.urandom(6).hex()}"
        spec = dict(spec, folder=str(self.folder), rendezvous=str(rendezvous))
        spec_path = self.folder / f"{spec['role']}_spec.json"
        spec_path.write_text(json.dumps(spec))
        self.world_size, self.role = spec["world_size"], spec["role"]
        self.selector = selectors.DefaultSelector()
        self.procs, self.channels, self.ranks, self.outputs = [], [], [], []
        self.exits = 0
        WorkerSet.open_sets.add(self)
        for rank in range(self.world_size):
            end, fd = pair()
            output = CappedOutput(self.folder / f"{self.role}{rank}.log", spec.get("output_bytes", OUTPUT_BYTES))
            self.outputs.append(output)
            env = worker_env(rank, self.world_size, spec["device"])
            try:
                if zygote is not None:
                    proc = zygote.spawn([str(spec_path), str(rank)], env, output.write_fd, fd)
                else:
                    proc = subprocess.Popen(
                        [sys.executable, "-m", "pkit.harness.worker", str(spec_path), str(rank), str(fd)],
                        stdout=output.write_fd, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, pass_fds=(fd,),
                        env=env, start_new_session=True)
            finally:
                os.close(fd)
                output.close_write()
            self.procs.append(proc)
            self.channels.append(end)
            self.ranks.append(RankState(rank, proc.pid))
            self.selector.register(end, selectors.EVENT_READ, rank)
            self.selector.register(output, selectors.EVENT_READ, output)
        if zygote is not None:  # its reports of the ranks' exits wake `_pump` as they come
            self.selector.register(zygote.sock, selectors.EVENT_READ, zygote)

    def send(self, message: dict, ranks=None) -> None:
        """Send `message` to every rank (or those listed)."""
        for r in ranks if ranks is not None else range(self.world_size):
            self.channels[r].send(message)

    def gather(self, op: str, deadline: float, on_message: Callable[[int, dict], None] | None = None) -> list[dict]:
        """The next `op` message of every rank, in rank order; other messages go to `on_message`."""
        got: dict[int, dict] = {}
        failed_at = None
        started = beat = time.monotonic()
        while len(got) < self.world_size:
            now = time.monotonic()
            if self.log is not None and now - beat > self.heartbeat_s:
                beat = now
                where = ", ".join(f"rank {r.rank} in {r.phase}" for r in self.ranks)
                self.log(f"  … {self.role} still running after {now - started:.0f} s ({where}); "
                         f"killed in {max(0.0, deadline - now):.0f} s")
            if failed_at is not None and (now > failed_at + self.grace_s or self.all_failed()):
                raise RunFailed(self.failure_summary())
            if now > deadline:
                raise RunTimeout(f"no {op!r} before the deadline")
            for rank_state in self.ranks:
                while rank_state.inbox and rank_state.rank not in got:
                    message = rank_state.inbox.pop(0)
                    if message["op"] == op:
                        got[rank_state.rank] = message
                    elif on_message is not None:
                        on_message(rank_state.rank, message)
            if len(got) == self.world_size:
                break
            self._pump(min(0.05, max(0.0, deadline - now)))
            if failed_at is None and self.failed():
                failed_at = time.monotonic()
        return [got[r] for r in range(self.world_size)]

    def failed(self) -> bool:
        """True once some rank reported an error or exited."""
        return any(r.failed for r in self.ranks)

    def all_failed(self) -> bool:
        """True once every rank reported an error or exited: no other rank's reason is left to wait for."""
        return all(r.failed for r in self.ranks)

    def failure_summary(self) -> str:
        return "; ".join(f"rank {r.rank}: {r.error['type'] if r.error else f'exit {r.returncode}'}"
                         for r in self.ranks if r.failed)

    def _pump(self, timeout: float) -> None:
        for key, _ in self.selector.select(timeout):
            if isinstance(key.data, Zygote):
                key.data.pump()
                if not key.data.alive():  # its socket, at its end, would wake every select
                    self.selector.unregister(key.fileobj)
                continue
            if isinstance(key.data, CappedOutput):
                key.data.drain()
                if key.data.ended:
                    self.selector.unregister(key.data)
                continue
            rank = key.data
            state, channel = self.ranks[rank], self.channels[rank]
            try:
                messages = channel.poll()
            except ProtocolError as e:
                messages = [{"op": "error", "kind": "runtime_error", "phase": state.phase, "type": "ProtocolError",
                             "message": str(e), "traceback": "", "peer_failure": False, "time": time.time()}]
            for message in messages:
                message["_at"] = time.monotonic()
                if message["op"] == "phase":
                    state.enter(str(message.get("name")), message["_at"])
                elif message["op"] == "error":
                    if state.error is None:
                        state.error = message
                else:
                    state.inbox.append(message)
            if channel.closed:
                self.selector.unregister(channel)
        for state, proc in zip(self.ranks, self.procs):
            if state.returncode is None and proc.poll() is not None:
                state.returncode, state.exit_order = proc.returncode, self.exits
                self.exits += 1

    def wait_exit(self, timeout_s: float) -> None:
        """Give the workers up to `timeout_s` to exit on their own (after `quit`)."""
        end = time.monotonic() + timeout_s
        while any(p.poll() is None for p in self.procs) and time.monotonic() < end:
            self._pump(0.02)

    def close(self) -> list[RankState]:
        """Kill the workers and all they started; returns the final state of each rank."""
        WorkerSet.open_sets.discard(self)
        keep = {p.pid for s in WorkerSet.open_sets for p in s.procs}
        spare = {self.zygote.proc.pid} if self.zygote is not None and self.zygote.alive() else set()
        try:
            self._pump(0.0)
        except OSError:
            pass
        kill_tree([p.pid for p in self.procs], keep=keep, spare=spare)
        for state, proc in zip(self.ranks, self.procs):
            proc.wait()
            state.close_phase(time.monotonic())
            if state.returncode is None:
                state.returncode, state.exit_order = proc.returncode, self.exits
                self.exits += 1
        for state, output in zip(self.ranks, self.outputs):
            output.close()
            state.log_tail, state.output_dropped = output.tail(), output.dropped
        for channel in self.channels:
            channel.close()
        self.selector.close()
        return self.ranks

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
