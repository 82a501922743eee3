"""The harness's command lines parsed once: `ProblemSource` (which problems), `EvalCommand` (`pkit eval`),
`ProblemsCommand` (`pkit problems`) and `MergeCommand` (`pkit eval merge`), each made from argparse's namespace by
`from_namespace` and handed to its command (`eval_command`, `problems_command`); and what their messages share:
option names, short lists, one-line notes and errors.

Example:
    >>> import argparse
    >>> source = ProblemSource.from_namespace(argparse.Namespace(problems=["01"], problems_root=None, pkb_root=None,
    ...                                                          world_size=2, dtype=None, ceilings="H200"))
    >>> source.problems, source.world_size
    (['01'], 2)
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from . import pkb
from .options import EvalOptions
from .paths import kind
from .problem import Problem
from .problems import default_root, discover, not_problems, select

SHOWN = 3
"""How many names a one-line message lists before '... (N in all)'."""



@dataclass(frozen=True)
class ProblemSource:
    """Which problems a command reads: `problems` (names, None: all) under `problems_root` (None: the shipped
    problems) or a ParallelKernelBench checkout `pkb_root`, at `world_size` ranks and `dtype` (None: each problem's
    first), their roofline from the datasheet of GPU `ceilings`."""

    problems: list[str] | None
    problems_root: Path | None
    pkb_root: Path | None
    world_size: int
    dtype: str | None
    ceilings: str

    @classmethod
    def from_namespace(cls, args) -> "ProblemSource":
        return cls(args.problems, args.problems_root, args.pkb_root, args.world_size, args.dtype, args.ceilings)

    def find(self, command: str) -> tuple[list[Problem], list[Problem]]:
        """(every problem found, the ones `--problems` selects); ValueError naming the option when there are
        none."""
        if self.pkb_root is not None and self.problems_root is not None:
            raise ValueError("--pkb-root and --problems-root: give one of them, not both")
        if self.pkb_root is not None:
            if not self.pkb_root.is_dir():
                raise ValueError(f"--pkb-root: expected a ParallelKernelBench checkout (a folder holding reference/), "
                                 f"got {self.pkb_root} ({kind(self.pkb_root) or 'no such folder'})")
            found = pkb.discover(self.pkb_root)
        else:
            root = self.problems_root or default_root()
            found = discover(root) if root.is_dir() else []
            if not found:
                why = "none there" if root.is_dir() else kind(root) or "no such folder"
                raise ValueError(f"--problems-root: expected a folder of <NN>_<name>/problem.py, got {root} ({why})")
            others = not_problems(root)
            if others:
                note(command, f"{len(others)} folder(s) under {root} hold no problem.py and are not problems: "
                              f"{listed([d.name for d in others])}")
        return found, select(found, self.problems, "--problems")


@dataclass(frozen=True)
class EvalCommand:
    """`pkit eval`'s arguments: the problems, how to evaluate (`options`), where the candidates are and the run
    goes, and `parameters`, the command line as the records' provenance carries it."""

    source: ProblemSource
    options: EvalOptions
    solutions: Path | None
    reference_as_candidate: bool
    model: str | None
    out: Path | None
    shard: str | None
    ray: str | None
    shards: int | None
    baselines: bool
    machine: str | None
    force: bool
    dry_run: bool
    parameters: dict

    @classmethod
    def from_namespace(cls, args) -> "EvalCommand":
        options = EvalOptions(world_size=args.world_size, size=args.size, dtype=args.dtype, trials=args.trials,
                              seed=args.seed, perf=args.perf, warmup=args.warmup, iters=args.iters,
                              timeout_s=args.timeout, atol=args.atol, rtol=args.rtol, device=args.device,
                              ceilings=args.ceilings, fresh_mib=args.fresh_mib, output_mib=args.output_mib)
        parameters = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "func"}
        return cls(ProblemSource.from_namespace(args), options, args.solutions, args.reference_as_candidate,
                   args.model, args.out, args.shard, args.ray, args.shards, args.baselines, args.machine, args.force,
                   args.dry_run, parameters)


@dataclass(frozen=True)
class ProblemsCommand:
    """`pkit problems`' arguments: the problems, the `sizes` to list (None: all), the output `format`, whose
    measured ceilings (`machine`) and whether `wide` (every column)."""

    source: ProblemSource
    sizes: list[str] | None
    format: str
    machine: str
    wide: bool

    @classmethod
    def from_namespace(cls, args) -> "ProblemsCommand":
        return cls(ProblemSource.from_namespace(args), args.sizes, args.format, args.machine, args.wide)


@dataclass(frozen=True)
class MergeCommand:
    """`pkit eval merge`'s arguments: the file to write (`merged`) and the shards' files (`inputs`)."""

    merged: Path
    inputs: list[Path]

    @classmethod
    def from_namespace(cls, args) -> "MergeCommand":
        return cls(args.merged, args.inputs)


def option_name(field: str) -> str:
    """The command-line option of an `EvalOptions` field, for messages.

    >>> option_name("timeout_s"), option_name("world_size")
    ('--timeout', '--world-size')
    """
    return "--timeout" if field == "timeout_s" else "--" + field.replace("_", "-")


def listed(names: list[str]) -> str:
    """`names` joined for a one-line message: the first `SHOWN`, then how many in all.

    >>> listed(["a", "b"]), listed(["a", "b", "c", "d", "e"])
    ('a, b', 'a, b, c, ... (5 in all)')
    """
    return ", ".join(names) if len(names) <= SHOWN else ", ".join(names[:SHOWN]) + f", ... ({len(names)} in all)"



def note(command: str, line: str) -> None:
    """One line on stderr from `pkit <command>`."""
    print(f"pkit {command}: {line}", file=sys.stderr, flush=True)


def error(command: str, e: Exception) -> int:
    """Print `e` as the one line of a bad argument; the exit code 2."""
    print(f"pkit {command}: error: {' '.join(str(e).split())}", file=sys.stderr)
    return 2


def check_dtype(problems: list[Problem], dtype: str | None) -> None:
    """ValueError naming --dtype unless `dtype` (None: each problem's first) is one of a problem's dtypes."""
    dtypes = list(dict.fromkeys(d for p in problems for d in p.dtypes))
    if dtype is not None and dtype not in dtypes:
        raise ValueError(f"--dtype: expected a dtype of the selected problems ({', '.join(dtypes)}), got {dtype!r}")

