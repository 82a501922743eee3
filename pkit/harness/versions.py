"""What a record's verdict depends on beyond its key, stamped into its provenance: the harness's code, the
problem's file, the candidate's file and the run's settings. Records that disagree on any of them answer
different questions, so `pkit eval merge` and a resumed `pkit eval` refuse to mix them (`conflict`).

Records written before these stamps existed still read everywhere; here their missing stamps count as one more
value ('unrecorded'), so old records merge with each other but not with stamped ones.

Example:
    >>> from pkit.harness.versions import conflict, harness_version
    >>> harness_version().startswith("0.1.0+")
    True
    >>> old = {"problem": "01_sum", "solution": "a.py", "provenance": {}}
    >>> conflict([("a.jsonl:1", old), ("b.jsonl:1", old)]) is None
    True
"""
from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Iterable

SETTINGS = ("trials", "perf", "warmup", "iters", "timeout_s", "atol", "rtol", "ceilings", "fresh_mib")
"""The `EvalOptions` fields a verdict depends on that a record's key (`records.KEY_FIELDS`) does not hold."""

AGREE = (("harness_version", ()), ("settings", ()), ("problem_sha256", ("problem",)),
         ("solution_sha256", ("problem", "solution")))
"""Provenance stamps that must agree, each over all records sharing the record fields named beside it: the
harness and the settings over all, a problem's file over its records, a candidate's file over its records."""

UNRECORDED = "unrecorded"


@functools.cache
def harness_version() -> str:
    """pkit's version, '+', and the first 12 hex digits of a SHA-256 over the names and bytes of
    pkit/harness/*.py: any change to the harness's code gives another version."""
    import pkit

    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return f"{pkit.__version__}+{digest.hexdigest()[:12]}"


def file_sha256(path: str | Path | None) -> str | None:
    """The SHA-256 (hex) of a file's bytes; None for no path."""
    return None if path is None else hashlib.sha256(Path(path).read_bytes()).hexdigest()


def stamp(problem, candidate, options) -> dict:
    """The provenance fields of a record of `candidate` (a `solutions.Candidate`) on `problem` under `options`
    (an `EvalOptions`): `harness_version`, `problem_sha256` (the problem's file), `solution_sha256` (the
    candidate's file) and `settings` (the `SETTINGS` fields)."""
    return {"harness_version": harness_version(), "problem_sha256": file_sha256(problem.reference_path),
            "solution_sha256": file_sha256(candidate.path),
            "settings": {name: getattr(options, name) for name in SETTINGS}}


def conflict(entries: Iterable[tuple[str, dict]]) -> str | None:
    """The first disagreement on an `AGREE` stamp among records, each given with where it was read ('file:line');
    None when they all agree. A record is a dict with `problem`, `solution` and `provenance`.

    >>> a = {"problem": "p", "solution": "s.py", "provenance": {"settings": {"trials": 5, "perf": False}}}
    >>> b = {"problem": "p", "solution": "s.py", "provenance": {"settings": {"trials": 1, "perf": False}}}
    >>> conflict([("a.jsonl:1", a), ("b.jsonl:7", b)])
    'settings: b.jsonl:7 has trials 1, a.jsonl:1 has trials 5'
    """
    first: dict[tuple, tuple[str, object]] = {}
    for where, record in entries:
        provenance = record.get("provenance") or {}
        for name, scope in AGREE:
            group = (name, *(record.get(field) for field in scope))
            value = provenance.get(name, UNRECORDED)
            seen_where, seen = first.setdefault(group, (where, value))
            if _canonical(value) != _canonical(seen):
                of = f" of {' '.join(str(g) for g in group[1:])}" if scope else ""
                return f"{name}{of}: {where} has {_shown(value, seen)}, {seen_where} has {_shown(seen, value)}"
    return None


def _canonical(value) -> str:
    """`value` as JSON text: a stamp read back from a file equals the one it was written from."""
    return json.dumps(value, sort_keys=True, default=str)


def _shown(value, other) -> str:
    """`value` for a message: of a dict, only the items that differ from `other`'s.

    >>> _shown({"trials": 1, "perf": True}, {"trials": 5, "perf": True}), _shown("1+ab", "1+cd")
    ('trials 1', '1+ab')
    """
    if isinstance(value, dict) and isinstance(other, dict):
        return ", ".join(f"{k} {v}" for k, v in value.items() if _canonical(v) != _canonical(other.get(k)))
    return str(value)
