"""Keep every process a candidate starts inside the run: find them, kill them, and clean up on signals.

The evaluating process makes itself a child subreaper (`prctl(PR_SET_CHILD_SUBREAPER)`, Linux), so a
process that a worker forks and detaches (`setsid`, double fork) is re-parented to it rather than to init.
`kill_tree` then finds everything below a set of roots (by the parent links in /proc) plus every adopted
orphan, and SIGKILLs it, round after round until nothing is left. `interruptible` turns SIGINT, SIGTERM and
SIGHUP into an exception, so `finally` blocks kill workers and remove temp folders. `tail` reads the end of
a log by seeking (bounded memory, whatever the log's size).

Example:
    >>> from pkit.harness.contain import tail
    >>> tail("/nonexistent/log")
    ''
"""
from __future__ import annotations

import ctypes
import os
import signal
import time
from contextlib import contextmanager
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36
PR_SET_DUMPABLE = 4
TAIL_BYTES = 4000


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


def tail(path: str | Path, nbytes: int = TAIL_BYTES) -> str:
    """The last `nbytes` bytes of a file as text ('' when it cannot be read), read by seeking."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - nbytes))
            return f.read(nbytes).decode("utf-8", errors="replace")
    except OSError:
        return ""
