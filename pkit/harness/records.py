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
from typing import IO, Iterable, Iterator

from .paths import open_regular

STATUSES = ("compile_error", "runtime_error", "timeout", "wrong_result", "correct_slower", "correct_level",
            "correct_faster")
"""The fixed taxonomy, worst first. A correct candidate is `correct_faster` when the speedup's confidence interval
lies above the tie band (`TIE_BAND`), `correct_slower` when it lies below, `correct_level` when it meets the band.
Records written before `correct_level` existed carry only the other six (their speedup is a ratio of medians)."""

CORRECT = ("correct_slower", "correct_level", "correct_faster")
"""The statuses of a correct candidate."""

TIE_BAND = 0.05
"""Speedups within [1/(1 + TIE_BAND), 1 + TIE_BAND] count as a tie. 5%: below it a speedup does not reproduce
from one run to the next on the same machine (the references recorded as their own candidates on 2xH200 read
0.63x to 1.63x with one window each, taken minutes apart; clocks, placement and the input sets drawn still move
a run by a few percent when both roles are timed side by side), and a kernel 5% faster is not what a benchmark
wants to credit as a win. The interval alone is not enough: many rounds make it narrow around a
ratio like 1.02 that is no speedup anyone could reproduce."""

FLAGS = ("aliases_input", "equals_input", "all_zero", "mutated_input", "inplace_result", "side_stream", "non_finite",
         "wrong_structure", "wrong_shape", "wrong_dtype", "wrong_device", "wrong_layout", "tensor_subclass",
         "unreadable_output", "timed_output", "timing_mismatch", "beyond_roofline", "reference_error", "loud_output")
"""Diagnostic flags a record may carry; docs/harness.md says which of them make a result wrong."""

FIELDS = ("problem", "category", "solution", "model", "sample", "backend", "world_size", "size", "dtype",
          "device", "status", "error", "max_abs_err", "max_rel_err", "per_rank", "flags", "ref_time_ms",
          "sol_time_ms", "ref_time_cv", "sol_time_cv", "ref_time_cv_rounds", "sol_time_cv_rounds", "ref_time_min_ms",
          "sol_time_min_ms", "ref_time_iqr_ms", "sol_time_iqr_ms", "ref_time_max_ms", "sol_time_max_ms",
          "ref_time_slow_calls", "sol_time_slow_calls", "ref_time_cv_calm", "sol_time_cv_calm", "speedup",
          "speedup_low", "speedup_high", "timing_rounds", "roofline_time_ms", "roofline_bound", "roofline_fraction",
          "rotations", "trials", "trials_passed", "seed", "timing", "wall_s", "phase_s", "output_dropped_bytes",
          "provenance")
"""Every key of a record, in the order they are written."""

KEY_FIELDS = ("problem", "solution", "model", "world_size", "size", "dtype", "device", "seed")
"""What makes a record unique: one candidate (its path under --solutions and its model label) at one world size,
size, dtype, device and seed. A resumed run skips the keys its --out holds; `pkit eval merge` keeps one record
per key."""

EXCERPT_CHARS = 2000
MAX_LINE_BYTES = 1 << 20
"""Longest line `numbered_lines` takes for a record (records are a few KB); reading stops at a longer one."""


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


def add_reason(error: str | None, reason: str) -> str:
    """`reason` after the reasons `error` gives already ('; '), or alone.

    >>> add_reason(None, "b"), add_reason("a", "b")
    ('b', 'a; b')
    """
    return f"{error}; {reason}" if error else reason


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


def speed_status(low: float, high: float | None = None, band: float = TIE_BAND) -> str:
    """The status of a correct candidate whose speedup's confidence interval is [low, high] (one number: a point):
    `correct_faster` when the whole interval lies above 1 + band, `correct_slower` when it lies below
    1 / (1 + band), else `correct_level`.

    >>> speed_status(1.2, 1.4), speed_status(0.97, 1.3), speed_status(0.5, 0.9), speed_status(1.01)
    ('correct_faster', 'correct_level', 'correct_slower', 'correct_level')
    """
    high = low if high is None else high
    if low > 1.0 + band:
        return "correct_faster"
    if high < 1.0 / (1.0 + band):
        return "correct_slower"
    return "correct_level"


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
    """All records of a JSONL file written by `pkit eval`, read line by line (`numbered_lines`); a line that is not
    JSON is a ValueError naming the file and line."""
    found = []
    for number, line in numbered_lines(path):
        if line.strip():
            try:
                found.append(json.loads(line))
            except ValueError:
                raise ValueError(f"{path}:{number}: expected a record of pkit eval (a line of JSON), got "
                                 f"{line[:60].decode(errors='replace')!r}") from None
    return found


def numbered_lines(path: str | Path) -> Iterator[tuple[int, bytes]]:
    """(line number, line as bytes) of a regular file, read at most `MAX_LINE_BYTES` at a time: a longer line is a
    ValueError naming the file and line, and so is a path that is not a regular file (`paths.open_regular`: a
    device or a FIFO is never read), so a huge file that is not records costs neither memory nor time."""
    with open_regular(path) as f:
        for number, line in enumerate(iter(lambda: f.readline(MAX_LINE_BYTES + 1), b""), 1):
            if len(line) > MAX_LINE_BYTES:
                raise ValueError(f"{path}:{number}: expected a record of pkit eval (a line of at most "
                                 f"{MAX_LINE_BYTES >> 20} MiB), got a longer line")
            yield number, line


def record_key(record: dict) -> tuple:
    """The `KEY_FIELDS` values of a record.

    >>> record_key({"problem": "01_sum", "solution": "m/01_sum/0.py", "model": "m", "world_size": 2,
    ...             "size": "tiny", "dtype": "float32", "device": "cpu", "seed": 0, "status": "timeout"})
    ('01_sum', 'm/01_sum/0.py', 'm', 2, 'tiny', 'float32', 'cpu', 0)
    """
    return tuple(record[name] for name in KEY_FIELDS)


def describe_key(key: tuple) -> str:
    """A record key for a message: problem, solution and model, then the rest in parentheses.

    >>> describe_key(("01_sum", "a.py", None, 2, "tiny", "float32", "cpu", 0))
    '01_sum a.py (2 ranks, tiny, float32, cpu, seed 0)'
    """
    problem, solution, model, world_size, size, dtype, device, seed = key
    by = f" by {model}" if model else ""
    return f"{problem} {solution}{by} ({world_size} ranks, {size}, {dtype}, {device}, seed {seed})"


def read_lines(path: str | Path) -> tuple[list[tuple[int, dict]], int]:
    """(line number, record) of every complete line of a `pkit eval` JSONL file, and the length in bytes of a
    last line cut short (a run killed while writing it leaves one; 0 when the file ends with a newline). Read
    line by line (`numbered_lines`): a complete line that is not a record, or a line longer than `MAX_LINE_BYTES`,
    is a ValueError naming the file and line."""
    found = []
    for number, line in numbered_lines(path):
        if not line.endswith(b"\n"):
            return found, len(line)
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if not isinstance(record, dict) or not {*KEY_FIELDS, "status"} <= set(record):
            raise ValueError(f"{path}:{number}: expected a record of pkit eval (JSON with {', '.join(KEY_FIELDS)} "
                             f"and status), got {line[:60].decode(errors='replace')!r}")
        found.append((number, record))
    return found, 0


def status_counts(records: Iterable[dict]) -> dict:
    """How many records have each status (every status present, zero when unseen)."""
    counts = dict.fromkeys(STATUSES, 0)
    for r in records:
        counts[r["status"]] += 1
    return counts
