"""Find and load problems: the repo's `problems/<NN>_<slug>/problem.py` files (docs/problems.md).

A `Problem` (defined in pkit.harness.problem) is what the parent process knows about one problem (names,
dtypes, sizes, cost model, and a `source` dict that tells a worker process how to rebuild it); `open_source`
is the worker's side: an object with `make_inputs(rank, world_size, size, dtype, seed, device)` and
`reference(*inputs)`.
ParallelKernelBench checkouts give the same two objects through `pkit.harness.pkb`.

Example:
    >>> from pkit.harness.problems import discover
    >>> [p.name for p in discover()][:2]
    ['01_all_reduce', '02_all_gather_uneven']
"""
from __future__ import annotations

from pathlib import Path
from typing import Iterable

from ..errors import PkitError
from .pkb import open_pkb_source
from .problem import Problem, load_module

REPO_ROOT = Path(__file__).resolve().parents[2]

CATEGORIES = ("collectives", "fused", "moe", "sequence", "data_parallel", "applications")
_REQUIRED = ("META", "SIZES", "make_inputs", "reference", "cost")


def default_root() -> Path:
    """The repository's `problems/` folder."""
    return REPO_ROOT / "problems"


def load_problem(path: Path) -> Problem:
    """A `Problem` from one `problem.py`, checking the contract of docs/problems.md."""
    path = Path(path).resolve()
    module = load_module(path, f"pkit_problem_{path.parent.name}")
    missing = [n for n in _REQUIRED if not hasattr(module, n)]
    if missing:
        raise PkitError(f"{path}: problem file lacks {missing} (see docs/problems.md)")
    meta, sizes = module.META, module.SIZES
    if meta.get("category") not in CATEGORIES:
        raise PkitError(f"{path}: META['category'] must be one of {CATEGORIES}, got {meta.get('category')!r}")
    if "tiny" not in sizes:
        raise PkitError(f"{path}: SIZES must define 'tiny', has {list(sizes)}")
    large = "large" if "large" in sizes else "tiny"
    names = {path.parent.name, meta.get("name", path.parent.name)}
    return Problem(
        name=path.parent.name, category=meta["category"], dtypes=tuple(meta["dtypes"]),
        world_sizes=tuple(meta.get("world_sizes", ())), sizes=tuple(sizes),
        default_size={"cpu": "tiny", "cuda": large}, source={"kind": "pkit", "path": str(path)},
        aliases=frozenset(names), cost=lambda ws, size, dtype: module.cost(ws, size, dtype),
        reference_path=path, reference_function="reference", inplace_inputs=tuple(meta.get("mutates_inputs", ())))


def discover(root: Path | None = None) -> list[Problem]:
    """Every `<root>/*/problem.py`, sorted by folder name (root: the repo's `problems/`)."""
    root = Path(root) if root is not None else default_root()
    if not root.is_dir():
        raise PkitError(f"problems root {root} is not a directory (pass --problems-root)")
    return [load_problem(p) for p in sorted(root.glob("*/problem.py"))]


def select(problems: list[Problem], wanted: Iterable[str] | None) -> list[Problem]:
    """The problems named in `wanted` (folder name, META name, or number), in discovery order."""
    if not wanted:
        return list(problems)
    wanted = list(wanted)
    chosen = []
    for w in wanted:
        hits = [p for p in problems if w == p.name or w in p.aliases or (w.isdigit() and p.number == int(w))]
        if not hits:
            raise ValueError(f"problems: no problem named {w!r}; known: {[p.name for p in problems]}")
        chosen.extend(h for h in hits if h not in chosen)
    return [p for p in problems if p in chosen]


def open_source(source: dict):
    """Worker side: the object giving `make_inputs` and `reference` for a problem `source` dict."""
    if source["kind"] == "pkit":
        path = Path(source["path"])
        return load_module(path, f"pkit_problem_{path.parent.name}")
    if source["kind"] == "pkb":
        return open_pkb_source(source)
    raise ValueError(f"source: expected kind 'pkit' or 'pkb', got {source['kind']!r}")


def cost_table(problems: list[Problem], world_size: int, dtype: str | None = None,
               sizes: Iterable[str] | None = None, ceilings: str = "H200"):
    """A DataFrame: per problem and size, the per-GPU cost (FLOPs, HBM bytes, link bytes) and roofline time.

    `dtype` None takes each problem's first dtype; `sizes` None takes every size the problem has. The
    roofline time (ms) and its bound come from `pkit.roofline.floor` under `ceilings`' datasheet figures.
    Problems without a cost model (PKB) get empty cost columns.
    """
    import pandas as pd

    from ..roofline import Ceilings, floor

    ceil = Ceilings.datasheet(ceilings)
    rows = []
    for p in problems:
        d = dtype or p.dtypes[0]
        for size in (sizes or p.sizes or (p.default_size["cuda"],)):
            if p.sizes and size not in p.sizes:
                continue
            cost = p.cost(world_size, size, d) or {}
            f = floor(cost, ceil) if cost else None
            rows.append({"problem": p.name, "category": p.category, "size": size, "dtype": d,
                         "world_size": world_size, "flops": cost.get("flops"), "hbm_bytes": cost.get("hbm_bytes"),
                         "link_bytes": cost.get("link_bytes"), "roofline_time_ms": f.time_s * 1e3 if f else None,
                         "bound": f.bound if f else None})
    return pd.DataFrame(rows, columns=["problem", "category", "size", "dtype", "world_size", "flops", "hbm_bytes",
                                       "link_bytes", "roofline_time_ms", "bound"])
