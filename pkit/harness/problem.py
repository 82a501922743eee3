"""What problems.py and pkb.py both build on: the `Problem` record and loading a Python file as a module.

Example:
    >>> from pkit.harness.problem import Problem
    >>> p = Problem(name="01_all_reduce", category="collectives", dtypes=("float32",), world_sizes=(),
    ...             sizes=("tiny",), default_size={"cpu": "tiny", "cuda": "tiny"}, source={})
    >>> p.number, p.resolve_size("auto", "cpu")
    (1, 'tiny')
"""
from __future__ import annotations

import importlib.util
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Callable

from ..errors import PkitError


@dataclass(frozen=True, eq=False)
class Problem:
    """One problem as the parent process sees it.

    `sizes` lists size names (pkit) or is empty when any size spelled `MxN` works (PKB); `world_sizes` is
    empty when any world size works; `cost` maps (world_size, size, dtype) to a cost dict or None;
    `tolerance` is an (atol, rtol) pair replacing the dtype-based table, or None; `inplace_inputs` lists
    the indices of inputs the reference updates in place (its contract; more are found by running it);
    `rank_sums` says its floating outputs are sums over the ranks rounded in their dtype, whose tolerance
    grows with the world size (`pkit.tolerance.rank_sum_factor`).
    """

    name: str
    category: str
    dtypes: tuple[str, ...]
    world_sizes: tuple[int, ...]
    sizes: tuple[str, ...]
    default_size: dict
    source: dict
    aliases: frozenset = field(default_factory=frozenset)
    cost: Callable[[int, str, str], dict | None] = field(default=lambda ws, size, dtype: None, repr=False)
    reference_path: Path | None = None
    reference_function: str = "reference"
    tolerance: tuple[float, float] | None = None
    inplace_inputs: tuple[int, ...] = ()
    rank_sums: bool = False

    @property
    def number(self) -> int | None:
        """The leading number of the name (`01_all_reduce` → 1), or None."""
        m = re.match(r"^(\d+)", self.name)
        return int(m.group(1)) if m else None

    def has_size(self, size: str) -> bool:
        """Whether `size` names one of the problem's sizes (a PKB problem: any shape spelled MxN).

        >>> Problem("01_x", "collectives", ("float32",), (), ("tiny", "large"), {}, {}).has_size("huge")
        False
        """
        return size in self.sizes if self.sizes else re.fullmatch(r"\d+x\d+", size) is not None

    def resolve_size(self, size: str, device: str) -> str:
        """`size`, or for 'auto' the default for `device` ('cpu' or 'cuda'); checks it exists."""
        if size == "auto":
            size = self.default_size[device]
        if not self.has_size(size):
            raise ValueError(f"size: problem {self.name} takes {describe_sizes([self])}, got {size!r}")
        return size


def describe_sizes(problems: list[Problem]) -> str:
    """The sizes `problems` take, spelled for an error message.

    >>> describe_sizes([Problem("01_x", "collectives", ("float32",), (), ("tiny", "large"), {}, {})])
    'tiny, large'
    """
    named = list(dict.fromkeys(s for p in problems for s in p.sizes))
    shapes = ["a shape spelled MxN (e.g. 1024x1024)"] if any(not p.sizes for p in problems) else []
    return ", ".join(named + shapes)


def load_module(path: Path, name: str) -> ModuleType:
    """Import the Python file at `path` as a fresh module called `name` (not cached in sys.modules)."""
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise PkitError(f"cannot import {path}: not a Python source file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(name, None)
    return module
