"""Start workers by forking a process that has already imported torch, instead of starting Python anew.

Importing torch takes seconds; a worker set of W ranks per candidate plus one per problem would pay it every time.
The zygote (`python -m pkit.harness.zygote FD`) imports torch, torch.distributed, the worker module and what
problem modules import (pkit.problem_kit, pkit.roofline) once, initialises neither CUDA nor any process group, and
then forks one child per request. A child starts its own process session, takes the two descriptors it was sent
(SCM_RIGHTS) as its stdout/stderr and its channel, applies the rank's environment and runs
`pkit.harness.worker.main`. The zygote reaps its children and reports each exit code to the evaluating process,
which holds the `Zygote` object.

Everything a forked worker starts is still below the evaluating process (a child subreaper), so
pkit.harness.contain finds and kills it as for a worker started with Popen.

Each evaluation (`runner.evaluations`) starts a zygote of its own and stops it at the end; inside `shared()`,
every evaluation of the process forks from one zygote instead (a test module running many small evaluations).
"""
from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import closing, contextmanager, nullcontext
from typing import Iterator

from .contain import make_undumpable

_MAX_MESSAGE = 1 << 20


class ForkedWorker:
    """A worker forked by the zygote, with the part of Popen's interface the launcher uses."""

    def __init__(self, zygote: "Zygote", pid: int):
        self.zygote, self.pid, self.returncode = zygote, pid, None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.zygote.pump()
            self.returncode = self.zygote.exits.pop(self.pid, None)
            if self.returncode is None and not self.zygote.alive():
                self.returncode = self._status_without_zygote()
        return self.returncode

    def _status_without_zygote(self) -> int | None:
        """After the zygote died the worker was adopted by us (subreaper) or is gone: ask the kernel."""
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            return None if os.path.exists(f"/proc/{self.pid}") else -signal.SIGKILL
        return os.waitstatus_to_exitcode(status) if pid else None

    def wait(self, timeout: float = 10.0) -> int | None:
        end = time.monotonic() + timeout
        while self.poll() is None and time.monotonic() < end:
            time.sleep(0.005)
        return self.returncode


class Zygote:
    """The evaluating process's handle on one zygote process (started on first use, restarted if it died)."""

    def __init__(self):
        self.proc: subprocess.Popen | None = None
        self.sock: socket.socket | None = None
        self.exits: dict[int, int] = {}
        self._buffer = b""
        self._pending: dict | None = None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _start(self, env: dict) -> None:
        self.close()
        ours, theirs = socket.socketpair()
        fd = theirs.detach()
        os.set_inheritable(fd, True)
        self.proc = subprocess.Popen([sys.executable, "-m", "pkit.harness.zygote", str(fd)], pass_fds=(fd,),
                                     stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        os.close(fd)
        self.sock = ours
        self._expect("ready", timeout=120.0)

    def spawn(self, argv: list[str], env: dict, output_fd: int, channel_fd: int) -> ForkedWorker:
        """Fork one worker running `python -m pkit.harness.worker *argv` with `env`, its stdout and stderr to
        the descriptor `output_fd`."""
        if not self.alive():
            self._start(env)
        request = json.dumps({"argv": argv, "env": env}).encode()
        socket.send_fds(self.sock, [request], [channel_fd, output_fd])
        reply = self._expect("forked", timeout=30.0)
        return ForkedWorker(self, int(reply["pid"]))

    def pump(self) -> None:
        """Read exit reports that have arrived."""
        if self.sock is None:
            return
        self.sock.setblocking(False)
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    break
                self._buffer += chunk
        except (BlockingIOError, InterruptedError):
            pass
        except OSError:
            pass
        finally:
            self.sock.setblocking(True)
        while b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            message = json.loads(line)
            if message.get("op") == "exited":
                self.exits[int(message["pid"])] = int(message["code"])
            else:
                self._pending = message

    def _expect(self, op: str, timeout: float) -> dict:
        self._pending = None
        end = time.monotonic() + timeout
        while (left := end - time.monotonic()) > 0:
            self.pump()
            if self._pending is not None and self._pending.get("op") == op:
                return self._pending
            if not self.alive():
                break
            select.select([self.sock], [], [], min(left, 0.05))  # until the zygote writes (or it died: checked above)
        raise RuntimeError(f"the worker zygote did not answer {op!r} (alive: {self.alive()})")

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.sock is not None:
            self.sock.close()
        self.proc, self.sock, self._buffer = None, None, b""


_SHARED: list["Zygote"] = []
"""The zygote of the innermost open `shared()` block."""


@contextmanager
def shared() -> Iterator["Zygote"]:
    """Within the block, every evaluation this process runs forks its workers from one zygote (started at first
    use, restarted if it died, stopped when the block ends) instead of starting one per evaluation.

    >>> with shared() as zygote:
    ...     with for_evaluation() as used:
    ...         used is zygote
    True
    """
    zygote = Zygote()
    _SHARED.append(zygote)
    try:
        yield zygote
    finally:
        _SHARED.remove(zygote)
        zygote.close()


def for_evaluation():
    """A context giving the zygote of one evaluation: the shared one inside `shared()` (left running), else a new one
    stopped when the context ends."""
    return nullcontext(_SHARED[-1]) if _SHARED else closing(Zygote())


def _child(sock: socket.socket, exits: int, request: dict, channel_fd: int, output_fd: int) -> None:
    """In the forked child: become a worker. Never returns."""
    try:
        sock.close()
        os.close(exits)
        os.close(signal.set_wakeup_fd(-1))  # the zygote's SIGCHLD pipe (`_exit_pipe`)
        os.setsid()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(output_fd, 1)
        os.dup2(output_fd, 2)
        os.close(null)
        os.close(output_fd)
        os.environ.clear()
        os.environ.update(request["env"])
        tempfile.tempdir = None  # TMPDIR is the request's, not the one the zygote started with
        import torch

        threads = os.environ.get("OMP_NUM_THREADS")
        if threads and threads.isdigit():
            torch.set_num_threads(int(threads))
        from . import worker

        sys.argv = ["pkit.harness.worker", *request["argv"]]
        worker.main([*request["argv"][:2], str(channel_fd)])
    finally:
        os._exit(70)


def _exit_pipe() -> int:
    """The read end of a pipe that gets a byte each time a child of this process ends (SIGCHLD)."""
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # the wakeup fd is written for signals with a handler only
    return read_end


def serve(fd: int) -> None:
    """The zygote's loop: fork on request; report each exit as it happens (a SIGCHLD wakes the loop)."""
    import torch  # noqa: F401 - the point: pay the import once
    import torch.distributed  # noqa: F401

    from .. import problem_kit, roofline  # noqa: F401 - what problem modules import
    from . import worker  # noqa: F401

    make_undumpable()
    sock = socket.socket(fileno=fd)
    exits = _exit_pipe()
    sock.sendall(b'{"op": "ready"}\n')
    while True:
        ready = select.select([sock, exits], [], [])[0]
        if exits in ready:
            os.read(exits, 4096)  # a wakeup only: waitpid below finds the children that ended
        if sock in ready:
            data, fds, _, _ = socket.recv_fds(sock, _MAX_MESSAGE, 2)
            if not data:
                os._exit(0)  # the evaluating process has gone
            channel_fd, output_fd = fds
            pid = os.fork()
            if pid == 0:
                _child(sock, exits, json.loads(data), channel_fd, output_fd)
            os.close(channel_fd)
            os.close(output_fd)
            sock.sendall(json.dumps({"op": "forked", "pid": pid}).encode() + b"\n")
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            sock.sendall(json.dumps({"op": "exited", "pid": pid,
                                     "code": os.waitstatus_to_exitcode(status)}).encode() + b"\n")


if __name__ == "__main__":
    serve(int(sys.argv[1]))
