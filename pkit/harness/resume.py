"""Resume a `pkit eval` whose --out already holds records: the candidates recorded there are skipped, a last
line cut short by a kill is dropped (and its candidate run again), and a file whose records another harness
version, problem file, candidate file or setting wrote is refused, as is a second process writing the file.

Example:
    >>> import tempfile
    >>> from pathlib import Path
    >>> from pkit.harness.resume import OutRecords
    >>> out = Path(tempfile.mkdtemp()) / "run.jsonl"
    >>> out.write_text('{"problem": "01_s')     # killed in the middle of its first line
    17
    >>> done = OutRecords.read(out)
    >>> len(done.lines), done.partial_bytes
    (0, 17)
    >>> done.drop_partial(); out.read_text()
    ''
"""
from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from .paths import NotRegular, open_regular
from .records import read_lines, record_key
from .options import spec_for
from .versions import conflict, stamp


def pair_key(problem, candidate, options, device: str) -> tuple:
    """The `records.KEY_FIELDS` values the record of `candidate` on `problem` under `options` (an `EvalOptions`)
    on `device` ('cpu' or 'cuda') will carry."""
    spec = spec_for(problem, options, device)
    return (problem.name, candidate.relpath, candidate.model, options.world_size, spec["size"], spec["dtype"],
            device, options.seed)


@dataclass
class OutRecords:
    """What a --out file holds: its complete lines as (line number, record) and the bytes of a last line cut
    short (0: none). A file that does not exist holds nothing."""

    path: Path
    lines: list = field(default_factory=list)
    partial_bytes: int = 0

    @classmethod
    def read(cls, path: str | Path) -> "OutRecords":
        """The records at `path` (ValueError naming --out for a line that is not a record)."""
        path = Path(path)
        if not path.exists():
            return cls(path)
        try:
            lines, partial = read_lines(path)
        except ValueError as e:
            raise ValueError(f"--out: {e}; pass another --out, or remove the file to start anew") from None
        return cls(path, lines, partial)

    @property
    def keys(self) -> set:
        return {record_key(record) for _, record in self.lines}

    def remaining(self, pairs: list, options, device: str) -> list:
        """The `pairs` whose record the file does not hold yet."""
        done = self.keys
        return [(p, c) for p, c in pairs if pair_key(p, c, options, device) not in done]

    def check(self, pairs: list, options) -> None:
        """ValueError naming --out when a record of the file disagrees with what this run would stamp on its
        `pairs` (`versions.conflict`): a run of another harness, problem file, candidate file or setting."""
        here = [("this run", {"problem": p.name, "solution": c.relpath, "provenance": stamp(p, c, options)})
                for p, c in pairs]
        written = [(f"{self.path}:{n}", record) for n, record in self.lines]
        why = conflict(here + written)
        if why:
            raise ValueError(f"--out: cannot resume {self.path}: {why}; pass another --out, or remove the file to "
                             "start anew")

    def drop_partial(self) -> None:
        """Cut the file back to the end of its last complete line."""
        if self.partial_bytes:
            os.truncate(self.path, self.path.stat().st_size - self.partial_bytes)
            self.partial_bytes = 0


@contextmanager
def sole_writer(path: str | Path):
    """Hold an exclusive lock on `path` (made, with its folders, when missing) for the block; ValueError naming
    --out when another process holds it, the file cannot be made or it is not a regular file once open
    (`paths.open_regular`: a path swapped for a FIFO or a device after the arguments were checked). Where the file
    system has no locks, the block runs unlocked."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open_regular(path, "a")
    except OSError as e:
        raise ValueError(f"--out: expected a path this user can write, got {path}: {e.strerror}") from None
    except NotRegular as e:
        raise ValueError(f"--out: expected a regular file or a new file, got {path}, {e.what}") from None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ValueError(f"--out: {path} is being written by another pkit eval; give each shard its own "
                             "--out") from None
        except OSError:
            pass
        yield
