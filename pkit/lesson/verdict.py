"""A lesson check's answer (`Verdict`), and how findings about wrong elements become its message.

A finding is a dict: the rank, its kind, the wrong elements (as index runs), a line saying what is wrong, and the
likely cause. `from_findings` writes one line per finding, or the findings that share a cause once with it.

Example:
    >>> import numpy as np
    >>> f = finding(1, "unwritten", np.array([4, 5, 6, 9]), "still hold the poison value", "is the grid covering n?")
    >>> print(from_findings([f]))
    ✗ rank 1 elements 4..6, 9 still hold the poison value: is the grid covering n?
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

_MARKS = {True: "✓", False: "✗", None: "·"}  # right, wrong, not run


@dataclass(frozen=True, repr=False)
class Verdict:
    """A check's answer. `ok`: True (right), False (wrong), None (compiled, not run: no GPUs). `message`: what is
    wrong and the likely cause, one line per finding. `details`: the same for programs (e.g. `findings`: rank,
    kind, element ranges, count)."""

    ok: bool | None
    message: str
    details: dict = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{_MARKS[self.ok]} {self.message}"

    __repr__ = __str__


def finding(rank: int, kind: str, idx: np.ndarray, what: str, cause: str, where: str | None = None) -> dict:
    """A finding about rank `rank`'s wrong elements `idx` (sorted indices): `where` (default: their ranges) and
    `what` make its line, `cause` its likely cause."""
    where = where or ranges(idx)
    return {"rank": rank, "kind": kind, "count": int(len(idx)), "elements": spans(idx),
            "text": f"rank {rank} {where} {what}", "cause": cause}


def from_findings(findings: list, most: int = 6) -> Verdict:
    """One line per finding (at most `most`), each followed by its likely cause, or findings that share a cause
    listed together with the cause once after them."""
    shown, groups = findings[:most], {}
    for f in shown:
        groups.setdefault(f["cause"], []).append(f["text"])
    lines = []
    for cause, texts in groups.items():
        lines += [f"{texts[0]}: {cause}"] if len(texts) == 1 else [*texts, f"  likely cause of these {len(texts)}: "
                                                                           f"{cause}"]
    if len(findings) > most:
        lines.append(f"... and {len(findings) - most} more findings (Verdict.details['findings'])")
    return Verdict(False, "\n".join(lines), {"findings": findings})


def spans(idx: np.ndarray) -> list[tuple[int, int]]:
    """Sorted indices as (first, last) runs of consecutive indices."""
    breaks = np.flatnonzero(np.diff(idx) != 1)
    return [(int(a), int(b)) for a, b in zip(np.r_[idx[0], idx[breaks + 1]], np.r_[idx[breaks], idx[-1]])]


def ranges(idx: np.ndarray, most: int = 3) -> str:
    """'elements 0..1023, 2048' for sorted indices; at most `most` runs named."""
    runs = spans(idx)
    text = ", ".join(f"{a}..{b}" if b > a else f"{a}" for a, b in runs[:most])
    more = f" and {len(runs) - most} more runs" if len(runs) > most else ""
    return f"{'element' if len(idx) == 1 else 'elements'} {text}{more}"

