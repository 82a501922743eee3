"""The JSONL record of one evaluated candidate: status taxonomy, error excerpts and the writer.

One line per (problem, solution, sample). Field names are a contract (docs/harness.md lists them); times
are in milliseconds, errors are absolute (abs) or relative to max(|reference|, atol) (rel).

Example:
    >>> from pkit.harness.records import STATUSES, excerpt
    >>> STATUSES[0], len(excerpt("x" * 5000))
    ('compile_error', 2000)
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import IO, Iterable

STATUSES = ("compile_error", "runtime_error", "timeout", "wrong_result", "correct_slower", "correct_faster")
"""The fixed taxonomy, worst first. A correct candidate is `correct_faster` when speedup > 1."""

FLAGS = ("aliases_input", "equals_input", "all_zero", "mutated_input", "inplace_result", "side_stream", "non_finite",
         "wrong_structure", "wrong_shape", "wrong_dtype", "wrong_device", "wrong_layout", "tensor_subclass",
         "unreadable_output", "timed_output", "timing_mismatch", "reference_error")
"""Diagnostic flags a record may carry; docs/harness.md says which of them make a result wrong."""

FIELDS = ("problem", "category", "solution", "model", "sample", "backend", "world_size", "size", "dtype",
          "device", "status", "error", "max_abs_err", "max_rel_err", "per_rank", "flags", "ref_time_ms",
          "sol_time_ms", "ref_time_cv", "sol_time_cv", "ref_time_min_ms", "sol_time_min_ms", "ref_time_iqr_ms",
          "sol_time_iqr_ms", "speedup", "roofline_time_ms", "roofline_bound", "roofline_fraction", "rotations",
          "trials", "trials_passed", "seed", "timing", "wall_s", "phase_s", "provenance")
"""Every key of a record, in the order they are written."""

EXCERPT_CHARS = 2000


def excerpt(text: str | None, limit: int = EXCERPT_CHARS, head: int = 0) -> str | None:
    """`text` cut to `limit` characters: its first `head` characters (the message) and its end (where a
    traceback names the failing line), joined by '…' where something was cut."""
    if not text:
        return None
    text = text.strip()
    if len(text) <= limit:
        return text
    head = min(head, limit // 2)
    return (text[:head] + "…" if head else "…") + text[-(limit - head - 1):]


def first_line(text: str | None, limit: int = 160) -> str:
    """The first non-empty line of `text`, cut to `limit` characters ('' for none)."""
    return next(iter(leading_lines(text, 1, limit)), "").strip()


def leading_lines(text: str | None, count: int, limit: int = 160) -> list[str]:
    r"""The first `count` non-empty lines of `text` that come before a Python traceback, each cut to `limit`
    characters: the message of an error, such as a compiler's log below its first line.

    >>> leading_lines("CompileError: failed:\nk.cu(3): error: x\nTraceback (most recent call last):\n  y", 5)
    ['CompileError: failed:', 'k.cu(3): error: x']
    """
    lines = []
    for line in (text or "").splitlines():
        if line.startswith("Traceback (most recent call last)") or len(lines) == count:
            break
        if line.strip():
            line = line.rstrip()
            lines.append(line if len(line) <= limit else line[:limit - 1] + "…")
    return lines


def speed_status(speedup: float) -> str:
    """`correct_faster` when the candidate beat the reference (speedup > 1), else `correct_slower`."""
    return "correct_faster" if speedup > 1.0 else "correct_slower"


def new_record(**fields) -> dict:
    """A record with every field of `FIELDS` (absent ones None), checking names and status."""
    unknown = set(fields) - set(FIELDS)
    if unknown:
        raise ValueError(f"fields: unknown record fields {sorted(unknown)}; expected names from FIELDS")
    record = {name: fields.get(name) for name in FIELDS}
    if record["status"] not in STATUSES:
        raise ValueError(f"status: expected one of {STATUSES}, got {record['status']!r}")
    record["flags"] = sorted(set(record["flags"] or ()))
    record["per_rank"] = record["per_rank"] or []
    return record


def write_line(stream: IO[str], record: dict) -> None:
    """Append one record as a JSON line and flush, so an interrupted run keeps what it finished.

    NaN and infinite numbers become null (JSON has no spelling for them).
    """
    stream.write(json.dumps(_finite(record), default=str, allow_nan=False) + "\n")
    stream.flush()


def _finite(value):
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def read_jsonl(path: str | Path) -> list[dict]:
    """All records of a JSONL file written by `pkit eval`."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def status_counts(records: Iterable[dict]) -> dict:
    """How many records have each status (every status present, zero when unseen)."""
    counts = dict.fromkeys(STATUSES, 0)
    for r in records:
        counts[r["status"]] += 1
    return counts
