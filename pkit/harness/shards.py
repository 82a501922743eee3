"""Split the (problem, candidate) pairs of `pkit eval` into N shards that partition them, alike on every machine.

The pairs are sorted by their identity (problem name, candidate path relative to --solutions, model label,
function called), which depends neither on the machine, nor on absolute paths, nor on the order files were
found in, and cut into N contiguous blocks whose sizes differ by at most one. Contiguous blocks keep a problem's
candidates together: a shard starts each of its problems' references once, and at most N - 1 problems are split
over two shards. K is 0-based: shard K/N is what `#SBATCH --array=0-(N-1)` gives as
`$SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT`.

Example:
    >>> from pkit.harness.shards import Shard, blocks
    >>> Shard.parse("1/4"), Shard.parse("1/4").label
    (Shard(index=1, count=4), '1/4')
    >>> blocks(list("abcdefg"), 3)
    [['a', 'b'], ['c', 'd'], ['e', 'f', 'g']]
"""
from __future__ import annotations

import re
from dataclasses import dataclass

SHAPE = re.compile(r"(\d+)/(\d+)")


@dataclass(frozen=True)
class Shard:
    """Shard `index` (0-based) of `count`."""

    index: int
    count: int

    @classmethod
    def parse(cls, text: str) -> "Shard":
        """The shard spelled 'K/N' (0 <= K < N); ValueError naming --shard otherwise.

        >>> Shard.parse("4/4")
        Traceback (most recent call last):
        ...
        ValueError: --shard: expected K/N with N >= 1 and 0 <= K < N (K counts from 0, as SLURM_ARRAY_TASK_ID \
under --array=0-(N-1)), got '4/4'
        """
        match = SHAPE.fullmatch(text.strip())
        if not match or not int(match.group(1)) < int(match.group(2)):
            raise ValueError(f"--shard: expected K/N with N >= 1 and 0 <= K < N (K counts from 0, as "
                             f"SLURM_ARRAY_TASK_ID under --array=0-(N-1)), got {text!r}")
        return cls(int(match.group(1)), int(match.group(2)))

    @property
    def label(self) -> str:
        return f"{self.index}/{self.count}"


def identity(pair) -> tuple[str, str, str, str]:
    """What sorts a (problem, candidate) pair: names and relative paths only, nothing of this machine."""
    problem, candidate = pair
    return problem.name, candidate.relpath, candidate.model or "", candidate.function


def blocks(items: list, count: int) -> list[list]:
    """`items` cut into `count` contiguous blocks, in order, whose sizes differ by at most one (the later
    blocks are the larger); blocks are empty when there are fewer items than blocks."""
    return [items[k * len(items) // count:(k + 1) * len(items) // count] for k in range(count)]


def split(pairs: list, count: int) -> list[list]:
    """The `count` shards of `pairs`: sorted by `identity`, then cut into `blocks`."""
    return blocks(sorted(pairs, key=identity), count)


def select(pairs: list, shard: Shard) -> list:
    """The pairs of `shard`."""
    return split(pairs, shard.count)[shard.index]
