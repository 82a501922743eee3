"""The files `pkit eval` and `pkit eval merge` read and write, checked before any work: `--out` (and merge's OUT)
is a regular file or a new one that this user can make, folders included; merge's SHARD files are regular files.
A folder, a device (/dev/zero, /dev/null), a FIFO or a socket is refused in one line naming the argument. The files
are then opened by `open_regular`, which never blocks on a FIFO and refuses what is not a regular file once open (a
path swapped after the check).

Example:
    >>> from pathlib import Path
    >>> from pkit.harness.paths import check_out
    >>> check_out(Path("/dev/zero"))
    Traceback (most recent call last):
    ...
    ValueError: --out: expected a regular file or a new file, got /dev/zero, a character device
"""
from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path
from typing import IO

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
    existing = next(p for p in (path.parent, *path.parent.parents) if os.path.exists(p))
    if not existing.is_dir():
        raise ValueError(f"{name}: expected a path under folders, got {path}: {existing} is a file")
    longest = _name_max(existing)
    too_long = [part for part in path.relative_to(existing).parts if len(os.fsencode(part)) > longest]
    if too_long:
        raise ValueError(f"{name}: expected a path this user can write, got {path} (a name of "
                         f"{len(os.fsencode(too_long[0]))} bytes, where {existing} takes at most {longest})")
    try:
        if os.path.exists(path):
            with open(path, "ab"):
                pass
        else:
            fd, probe = tempfile.mkstemp(dir=existing, prefix=".pkit-probe-")
            os.close(fd)
            os.unlink(probe)
    except OSError as e:
        raise ValueError(f"{name}: expected a path this user can write, got {path} ({e.strerror} in {existing}); "
                         "pass a path under a folder of yours") from None


def _name_max(folder: Path) -> int:
    """The longest file name, in bytes, that the file system of `folder` takes (255 where it does not say)."""
    try:
        return os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError):
        return 255


def check_input(path: Path, name: str = "SHARD") -> None:
    """ValueError naming the argument `name` unless `path` is a regular file this user can read."""
    what = kind(path) or "no such file"
    if what == REGULAR and not os.access(path, os.R_OK):
        what = "not readable"
    if what != REGULAR:
        raise ValueError(f"{name}: expected JSONL files written by pkit eval --out, got {path} ({what})")


class NotRegular(ValueError):
    """What `open_regular` raises for a path that is not a regular file: `path` and `what` it is."""

    def __init__(self, path, what: str):
        super().__init__(f"{path}: expected a regular file, got {what}")
        self.path, self.what = path, what


def open_regular(path: str | Path, mode: str = "rb") -> IO:
    """`path` opened in `mode` ('rb' to read, 'a' to append, made when missing) provided it is a regular file once
    open: a FIFO is opened without waiting for its other end, and a device, a FIFO, a folder or a socket is a
    `NotRegular` (a ValueError) naming the path and what it is.

    >>> open_regular("/dev/zero")
    Traceback (most recent call last):
    ...
    pkit.harness.paths.NotRegular: /dev/zero: expected a regular file, got a character device
    """
    flags = os.O_RDONLY if mode == "rb" else os.O_WRONLY | os.O_APPEND | os.O_CREAT
    try:
        fd = os.open(path, flags | os.O_NONBLOCK | os.O_NOCTTY, 0o666)
    except OSError as e:
        if e.errno in (errno.ENXIO, errno.EISDIR):  # a FIFO nobody reads, a folder: say what it is
            raise NotRegular(path, kind(Path(path)) or e.strerror) from None
        raise
    mode_bits = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode_bits):
        os.close(fd)
        what = next((what for test, what in KINDS if test(mode_bits)), "not a regular file")
        raise NotRegular(path, what)
    os.set_blocking(fd, True)
    return open(fd, mode, encoding=None if "b" in mode else "utf-8")
