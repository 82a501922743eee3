"""Evaluate a ParallelKernelBench (PKB) checkout's problems and solutions unchanged.

A PKB checkout (github.com/togethercomputer/ParallelKernelBench) holds `reference/<id>_<name>.py`, each
defining `solution(*inputs)` (the PyTorch + NCCL reference), and `utils/input_output_tensors.py`, whose
`create_input_tensor(rank, world_size, problem_id, base_shape, dtype, trial=0, device=None)` builds every
problem's inputs from an (M, N) base shape. Candidates are `<id>_<name>_<backend>.py` files defining
`solution`, in a folder such as PKB's `solutions_cuda/` (or the samples layout of pkit.harness.solutions).

The adapter maps PKB onto the harness: problem = reference stem, size = base shape spelled `MxN`
(PKB's default `1024x1024`), trial t of seed s = PKB's `trial=s+t` (so seed 0 gives PKB's own trials),
tolerance atol = rtol = 1e-2 (PKB's run_local.py defaults), dtypes = PKB worker's choices (bfloat16 first,
PKB's default). PKB has no cost model, so records carry no roofline.

Example:
    >>> from pkit.harness import pkb                                        # doctest: +SKIP
    >>> [p.name for p in pkb.discover("/src/ParallelKernelBench")][:2]      # doctest: +SKIP
    ['1_allreduce', '2_allgather']
"""
from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

from ..errors import PkitError
from .problem import Problem, load_module

DTYPES = ("bfloat16", "float32", "float16", "float64")
DEFAULT_SHAPE = "1024x1024"
TOLERANCE = (1e-2, 1e-2)
INPUT_BUILDER = Path("utils") / "input_output_tensors.py"


KNOWN_FAILURES: dict[str, str] = {}
"""PKB reference stem → why that reference does not pass as its own candidate (a PKB bug, a missing optional
dependency); filled from the recorded run, see results/h200x2-nv18/pkb_references.csv."""


def problem_id(stem: str) -> int:
    """The leading id of a PKB stem (`19_blocked_fp8_quantize` → 19)."""
    m = re.match(r"^(\d+)_", stem)
    if not m:
        raise ValueError(f"stem: expected <id>_<name>, got {stem!r}")
    return int(m.group(1))


def check_root(root: str | Path) -> Path:
    """The checkout's absolute path, after checking it has `reference/` and the input builder."""
    root = Path(root).resolve()
    for needed in (root / "reference", root / INPUT_BUILDER):
        if not needed.exists():
            raise PkitError(f"pkb-root: {root} is not a ParallelKernelBench checkout: {needed} is missing")
    return root


def discover(root: str | Path) -> list[Problem]:
    """One Problem per `reference/<id>_<name>.py`, sorted by id then name."""
    root = check_root(root)
    found = []
    for path in (root / "reference").glob("*.py"):
        m = re.match(r"^(\d+)_", path.stem)
        if m:
            found.append((int(m.group(1)), path.stem, path))
    return [Problem(name=stem, category="pkb", dtypes=DTYPES, world_sizes=(), sizes=(),
                    default_size={"cpu": DEFAULT_SHAPE, "cuda": DEFAULT_SHAPE},
                    source={"kind": "pkb", "root": str(root), "stem": stem, "problem_id": pid},
                    aliases=frozenset({stem}), reference_path=path, reference_function="solution",
                    tolerance=TOLERANCE)
            for pid, stem, path in sorted(found)]


def parse_shape(size: str) -> tuple[int, int]:
    """(M, N) from a size spelled `MxN`."""
    m = re.fullmatch(r"(\d+)x(\d+)", size)
    if not m:
        raise ValueError(f"size: expected a PKB base shape spelled MxN (e.g. {DEFAULT_SHAPE}), got {size!r}")
    return int(m.group(1)), int(m.group(2))


class PkbSource:
    """Worker side of one PKB problem: its reference `solution` and the checkout's input builder."""

    def __init__(self, root: str, stem: str, problem_id: int):
        if root not in sys.path:
            sys.path.insert(0, root)
        self._create = importlib.import_module("utils.input_output_tensors").create_input_tensor
        self._problem_id = problem_id
        self.reference = load_module(Path(root) / "reference" / f"{stem}.py", f"pkb_reference_{problem_id}").solution

    def make_inputs(self, rank: int, world_size: int, size: str, dtype: str, seed: int, device: str = "cpu"):
        """PKB's inputs for this rank: `create_input_tensor(..., trial=seed, device=device)`."""
        import torch

        from ..problem_kit import parse_dtype

        return tuple(self._create(rank, world_size, self._problem_id, parse_shape(size), parse_dtype(dtype),
                                  trial=seed, device=torch.device(device)))


def open_pkb_source(source: dict) -> PkbSource:
    """A PkbSource from the `source` dict of a PKB Problem."""
    return PkbSource(source["root"], source["stem"], source["problem_id"])
