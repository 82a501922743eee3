"""Process helpers for tests that start servers (JupyterLab): a free local port, the live members of a process
group, and ending a group so that nothing is left behind."""
import os
import signal
import socket
import subprocess
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def group_members(pgid: int) -> list[tuple[int, str]]:
    """(pid, command line) of the live (not zombie) processes in process group `pgid`."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if fields[0] != "Z" and int(fields[2]) == pgid:
                cmd = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                found.append((int(stat.parent.name), cmd))
        except (OSError, IndexError, ValueError):
            continue  # the process ended while being read
    return found


def end_group(pgid: int, proc: subprocess.Popen | None = None, grace_s: float = 20) -> tuple[list, list]:
    """SIGTERM the process group `pgid`, then SIGKILL what is still there after `grace_s` seconds.

    Returns (the members alive when the grace period ended, the members alive after the SIGKILL): a server
    that stops on SIGTERM leaves the first empty; nothing at all may be left in the second.
    """
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and group_members(pgid):
        if proc is not None:
            proc.poll()  # reap the leader, so it does not stay as a zombie
        time.sleep(0.2)
    survived_term = group_members(pgid)
    for pid, _ in survived_term:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if proc is not None:
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and group_members(pgid):
        time.sleep(0.2)
    return survived_term, group_members(pgid)
