"""The lesson's six steps (`STEPS`, in order): each one's title, the kernels a learner's source defines, its check,
and its reference answer, pkit/kernels/lesson_<step>.cu (`solution`).

Example:
    >>> [(s.name, s.kernels) for s in STEPS.values()][:2]
    [('addressing', ('gather_pull',)), ('copy', ('push_next',))]
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..compiler import KERNEL_DIR
from ..ops.collectives import lookup
from .checks import check_addressing, check_barrier, check_copy, check_flag, check_overlap, check_ring


@dataclass(frozen=True)
class Step:
    """One step of the lesson: its key, title, the kernels a learner's source defines, and its check."""

    name: str
    title: str
    kernels: tuple[str, ...]
    check: Callable

    @property
    def solution(self) -> str:
        """The reference kernel source, pkit/kernels/lesson_<name>.cu."""
        return (KERNEL_DIR / f"lesson_{self.name}.cu").read_text()


STEPS = {s.name: s for s in (
    Step("addressing", "unified addressing and peer access", ("gather_pull",), check_addressing),
    Step("copy", "a first peer-copy kernel", ("push_next",), check_copy),
    Step("flag", "a flag needs release/acquire ordering", ("produce", "consume"), check_flag),
    Step("barrier", "signal/wait and a barrier", ("exchange",), check_barrier),
    Step("ring", "a ring all-reduce", ("ring_step",), check_ring),
    Step("overlap", "compute on chunks as they land", ("consume_chunks",), check_overlap),
)}


def solution(step: str) -> str:
    """The reference kernel source of `step` (a key of STEPS).

    >>> "push_next" in solution("copy")
    True
    """
    return lookup(STEPS, step, "step").solution

