"""`pkit eval merge OUT SHARD...`: join the JSONL files of a split run into one.

Every record keeps its own provenance (its shard, host and commit). Refused, in one line naming the file and
line: a record of another harness version, problem file, candidate file or setting than the others
(`versions.conflict`), and two records of one key (`records.KEY_FIELDS`) whose statuses differ; two that agree
are one record (the first kept, the other counted). A last line cut short by a kill is left out and counted; the
shard files are never changed. OUT is written anew through a temporary file beside it, so a refused merge leaves
it as it was.

Example:
    >>> import json, tempfile
    >>> from pathlib import Path
    >>> from pkit.harness.merge import merge
    >>> folder = Path(tempfile.mkdtemp())
    >>> rec = {"problem": "01_sum", "solution": "a.py", "model": None, "world_size": 2, "size": "tiny",
    ...        "dtype": "float32", "device": "cpu", "seed": 0, "status": "timeout", "provenance": {"shard": "0/2"}}
    >>> _ = (folder / "s0.jsonl").write_text(json.dumps(rec) + "\\n" + '{"probl')
    >>> _ = (folder / "s1.jsonl").write_text(json.dumps(dict(rec, solution="b.py")) + "\\n")
    >>> merged = merge([folder / "s0.jsonl", folder / "s1.jsonl"])
    >>> [r["solution"] for r in merged.records], merged.sources[0].partial_bytes
    (['a.py', 'b.py'], 7)
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from .paths import check_input
from .records import describe_key, read_lines, record_key, write_line
from .versions import conflict


@dataclass
class Source:
    """One input file of a merge: records kept from it, duplicates left out, bytes of a last line cut short, and
    the shards, hosts and commits its records name."""

    path: Path
    kept: int = 0
    duplicates: int = 0
    partial_bytes: int = 0
    shards: set = field(default_factory=set)
    hosts: set = field(default_factory=set)
    commits: set = field(default_factory=set)

    def describe(self) -> str:
        """One line for the console.

        >>> Source(Path("s0.jsonl"), 3, 1, 0, {"0/4"}, {"node7"}, {"0123456789abcdef-dirty"}).describe()
        's0.jsonl: 3 records (shard 0/4; host node7; commit 0123456789-dirty); 1 duplicate left out'
        """
        def named(what: str, values: set) -> str:
            return f"{what} {', '.join(sorted(values))}" if values else f"no {what}"

        commits = {c[:10] + ("-dirty" if c.endswith("-dirty") else "") for c in self.commits}
        line = (f"{self.path}: {self.kept} records ({named('shard', self.shards)}; {named('host', self.hosts)}; "
                f"{named('commit', commits)})")
        if self.duplicates:
            line += f"; {self.duplicates} duplicate{'s' * (self.duplicates > 1)} left out"
        if self.partial_bytes:
            line += f"; a last line cut short ({self.partial_bytes} bytes) left out"
        return line


@dataclass
class Merged:
    """The records of a merge, in the order read (file by file), and what each input gave."""

    records: list[dict]
    sources: list[Source]


def merge(paths: list[Path]) -> Merged:
    """The records of the JSONL files `paths`, one per key; ValueError for records that may not be merged, and
    for a path that is not a regular file (every path checked before any is read)."""
    paths = [Path(p) for p in paths]
    for path in paths:
        check_input(path)
    sources, entries = [], []
    for path in paths:
        lines, partial = read_lines(path)
        source = Source(path, partial_bytes=partial)
        sources.append(source)
        entries += [(source, f"{path}:{number}", record) for number, record in lines]
    why = conflict((where, record) for _, where, record in entries)
    if why:
        raise ValueError(f"records of different runs: {why}")
    first: dict[tuple, tuple[str, dict]] = {}
    records = []
    for source, where, record in entries:
        key = record_key(record)
        if key in first:
            seen_where, seen = first[key]
            if seen["status"] != record["status"]:
                raise ValueError(f"{where}: {describe_key(key)} is {record['status']}, but {seen_where} says "
                                 f"{seen['status']}: evaluated twice with different outcomes; merge one of them")
            source.duplicates += 1
            continue
        first[key] = (where, record)
        records.append(record)
        source.kept += 1
        provenance = record.get("provenance") or {}
        for bucket, name in ((source.shards, "shard"), (source.hosts, "host"), (source.commits, "pkit_commit")):
            if provenance.get(name):
                bucket.add(str(provenance[name]))
    return Merged(records, sources)


def write(records: list[dict], out: Path) -> None:
    """Write `records` to `out` as JSONL, replacing it at once (a temporary file beside it, then a rename). The
    file gets the mode `pkit eval --out` gives one: that of the file replaced, or a new file's (0666 less the
    umask)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    temporary = out.parent / f".{out.name}.{os.urandom(4).hex()}"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        if out.exists():
            os.chmod(fd, stat.S_IMODE(out.stat().st_mode))
        with open(fd, "w", encoding="utf-8") as handle:
            for record in records:
                write_line(handle, record)
        os.replace(temporary, out)
    finally:
        if temporary.exists():
            temporary.unlink()
