"""The files `pkit eval` and `pkit eval merge` read and write, checked before any work: `--out` (and merge's OUT)
is a regular file or a new one that this user can make, folders included; merge's SHARD files are regular files.
A folder, a device (/dev/zero, /dev/null), a FIFO or a socket is refused in one line naming the argument.

Example:
    >>> from pathlib import Path
    >>> from pkit.harness.paths import check_out
    >>> check_out(Path("/dev/zero"))
    Traceback (most recent call last):
    ...
    ValueError: --out: expected a regular file or a new file, got /dev/zero, a character device
"""
from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

REGULAR = "a regular file"
KINDS = ((stat.S_ISREG, REGULAR), (stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"),
         (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"))


def kind(path: Path) -> str | None:
    """What is at `path`, links followed ('a regular file', 'a folder', 'a character device', 'a FIFO', ...); None
    for nothing there (or nothing this user may look at)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    return next((what for test, what in KINDS if test(mode)), "not a regular file")


def check_out(path: Path, name: str = "--out") -> None:
    """ValueError naming the argument `name` unless `path` is a regular file this user can append to, or a new
    file that can be made with its folders (tried with a temporary file in the nearest folder that exists)."""
    what = kind(path)
    if what == "a folder":
        raise ValueError(f"{name}: expected a regular file or a new file, got {path}, a folder (e.g. {name} "
                         f"{path / 'run.jsonl'})")
    if what not in (None, REGULAR):
        raise ValueError(f"{name}: expected a regular file or a new file, got {path}, {what}")
    existing = next(p for p in (path.parent, *path.parent.parents) if p.exists())
    if not existing.is_dir():
        raise ValueError(f"{name}: expected a path under folders, got {path}: {existing} is a file")
    try:
        if path.exists():
            with open(path, "ab"):
                pass
        else:
            fd, probe = tempfile.mkstemp(dir=existing, prefix=".pkit-probe-")
            os.close(fd)
            os.unlink(probe)
    except OSError as e:
        raise ValueError(f"{name}: expected a path this user can write, got {path} ({e.strerror} in {existing}); "
                         "pass a path under a folder of yours") from None


def check_input(path: Path, name: str = "SHARD") -> None:
    """ValueError naming the argument `name` unless `path` is a regular file this user can read."""
    what = kind(path) or "no such file"
    if what == REGULAR and not os.access(path, os.R_OK):
        what = "not readable"
    if what != REGULAR:
        raise ValueError(f"{name}: expected JSONL files written by pkit eval --out, got {path} ({what})")
