"""Keep every process a candidate starts inside the run: find them, kill them, and clean up on signals.

The evaluating process makes itself a child subreaper (`prctl(PR_SET_CHILD_SUBREAPER)`, Linux), so a
process that a worker forks and detaches (`setsid`, double fork) is re-parented to it rather than to init.
`kill_tree` then finds everything below a set of roots (by the parent links in /proc) plus every adopted
orphan, and SIGKILLs it, round after round until nothing is left. `interruptible` turns SIGINT, SIGTERM and
SIGHUP into an exception, so `finally` blocks kill workers and remove temp folders. A worker's stdout and stderr
go to a pipe that this process drains (`CappedOutput`): the first bytes up to a cap are written to the log, the
rest counted and dropped, and the output's end kept in memory, so a candidate that prints without end fills
neither the disk nor this process's memory.
"""
from __future__ import annotations

import ctypes
import fcntl
import os
import signal
import time
from contextlib import contextmanager
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36
PR_SET_DUMPABLE = 4
TAIL_BYTES = 4000
OUTPUT_BYTES = 16 << 20
"""Bytes of a worker's stdout and stderr written to its log by default; the rest is counted and dropped."""
PIPE_BYTES = 1 << 20
"""Capacity asked for a worker's output pipe (Linux grants up to /proc/sys/fs/pipe-max-size), so a worker that
prints while this process is busy elsewhere rarely waits."""
READ_BYTES = 1 << 20


def _prctl(option: int, value: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


_bystanders: set[int] = set()


def become_subreaper() -> bool:
    """Adopt orphaned descendants (Linux); False where the kernel has no such option. The children this
    process has at that moment (e.g. a notebook's other subprocesses) are bystanders `kill_tree` spares."""
    me = os.getpid()
    _bystanders.update(p for p, pp in parent_links().items() if pp == me)
    return _prctl(PR_SET_CHILD_SUBREAPER, 1)


def make_undumpable() -> bool:
    """Forbid other processes of the same user (without CAP_SYS_PTRACE) to ptrace this one or read its memory."""
    return _prctl(PR_SET_DUMPABLE, 0)


def parent_links() -> dict[int, int]:
    """pid → parent pid of every process visible in /proc."""
    links = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                stat = Path(entry.path, "stat").read_text()
            except OSError:
                continue
            # the command name (field 2) may hold spaces and parentheses: parse after its last ')'
            fields = stat[stat.rindex(")") + 2:].split()
            links[int(entry.name)] = int(fields[1])
    return links


def descendants(roots, links: dict[int, int] | None = None) -> set[int]:
    """Every living process below `roots` (pids), following parent links."""
    links = parent_links() if links is None else links
    children: dict[int, list[int]] = {}
    for pid, ppid in links.items():
        children.setdefault(ppid, []).append(pid)
    found, todo = set(), [r for r in roots]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def kill_tree(roots, keep=(), spare=(), rounds: int = 50) -> set[int]:
    """SIGKILL `roots`, their descendants and this process's adopted orphans, until a scan finds none; reap
    the adopted ones. Processes in `keep` and below them are left alone, as are those in `spare` (but not
    what is below them, unless it is below `keep`). Returns every pid killed."""
    roots, spare = set(roots), set(spare)
    me, keep = os.getpid(), set(keep) | (_bystanders - spare)  # a spared bystander (a shared zygote): not its children
    killed: set[int] = set()
    for _ in range(rounds):
        links = parent_links()
        protected = keep | descendants(keep, links) | spare
        adopted = {p for p, pp in links.items() if pp == me} - protected - roots  # roots: their owners reap them
        targets = ({r for r in roots if r in links} | descendants(roots, links) | adopted
                   | descendants(adopted, links)) - protected - {me}
        targets = {p for p in targets if not _is_zombie(p)}
        if not targets:
            break
        for pid in targets:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        killed |= targets
        _reap(adopted)
        time.sleep(0.01)
    _reap({p for p, pp in parent_links().items() if pp == me} - keep - spare - roots)
    return killed


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2:].split()[0] in ("Z", "X")


def _reap(pids) -> None:
    """Collect the exit status of adopted children, so they do not stay as zombies."""
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except (ChildProcessError, OSError):
            pass


class Interrupted(BaseException):
    """`pkit eval` got SIGINT, SIGTERM or SIGHUP; `signum` says which."""

    def __init__(self, signum: int):
        super().__init__(f"interrupted by {signal.Signals(signum).name}")
        self.signum = signum


@contextmanager
def interruptible():
    """Within the block, SIGINT/SIGTERM/SIGHUP raise `Interrupted` (main thread only), so cleanup runs."""
    def handler(signum, frame):
        raise Interrupted(signum)

    wanted = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    try:
        previous = {s: signal.signal(s, handler) for s in wanted}
    except ValueError:  # not the main thread: leave the handlers alone
        yield
        return
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


class CappedOutput:
    """One worker's stdout and stderr: a pipe whose write end (`write_fd`) the worker gets, drained here into the
    log at `path`. The first `cap` bytes are written, later ones counted in `dropped`; the last `TAIL_BYTES` are
    kept in memory whatever was dropped (a traceback printed after a flood still shows).

    >>> import os, tempfile
    >>> out = CappedOutput(os.path.join(tempfile.mkdtemp(), "rank0.log"), cap=4)
    >>> os.write(out.write_fd, b"hello world"); out.close_write(); out.close()
    11
    >>> with open(out.path, "rb") as log: log.read(), out.dropped, out.tail()
    (b'hell', 7, 'hello world')
    """

    def __init__(self, path: str | Path, cap: int = OUTPUT_BYTES):
        self.path, self.cap = Path(path), cap
        self.read_fd, self.write_fd = os.pipe()
        try:
            fcntl.fcntl(self.read_fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        except OSError:  # over the user's pipe budget: the default capacity
            pass
        os.set_blocking(self.read_fd, False)
        self.log = open(self.path, "wb")
        self.kept = self.dropped = 0
        self.last = b""
        self.ended = False

    def fileno(self) -> int:
        return self.read_fd

    def close_write(self) -> None:
        """Close this process's copy of the write end (once the worker holds its own)."""
        if self.write_fd is not None:
            os.close(self.write_fd)
            self.write_fd = None

    def drain(self, limit: int = 4 * READ_BYTES) -> None:
        """Read what the pipe holds, at most `limit` bytes (so a flood cannot hold this process here); `ended`
        once every writer has closed it."""
        done = 0
        while not self.ended and done < limit:
            try:
                chunk = os.read(self.read_fd, READ_BYTES)
            except (BlockingIOError, InterruptedError):
                return
            if not chunk:
                self.ended = True
                return
            done += len(chunk)
            room = max(0, self.cap - self.kept)
            if room:
                self.log.write(chunk[:room])
                self.kept += min(room, len(chunk))
            self.dropped += max(0, len(chunk) - room)
            self.last = (self.last + chunk[-TAIL_BYTES:])[-TAIL_BYTES:]

    def tail(self) -> str:
        """The last `TAIL_BYTES` of the output as text."""
        return self.last.decode("utf-8", errors="replace")

    def close(self) -> None:
        """Drain what is left (bounded: a writer outside the run may still hold the pipe) and close."""
        self.close_write()
        if self.read_fd is None:
            return
        self.drain(limit=2 * PIPE_BYTES)
        os.close(self.read_fd)
        self.read_fd = None
        self.log.close()
