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
    if not isinstance(meta.get("rank_sums", False), bool):
        raise PkitError(f"{path}: META['rank_sums'] must be True or False, got {meta['rank_sums']!r}")
    large = "large" if "large" in sizes else "tiny"
    names = {path.parent.name, meta.get("name", path.parent.name)}
    return Problem(
        name=path.parent.name, category=meta["category"], dtypes=tuple(meta["dtypes"]),
        world_sizes=tuple(meta.get("world_sizes", ())), sizes=tuple(sizes),
        default_size={"cpu": "tiny", "cuda": large}, source={"kind": "pkit", "path": str(path)},
        aliases=frozenset(names), cost=lambda ws, size, dtype: module.cost(ws, size, dtype),
        reference_path=path, reference_function="reference", inplace_inputs=tuple(meta.get("mutates_inputs", ())),
        rank_sums=meta.get("rank_sums", False))


def discover(root: Path | None = None) -> list[Problem]:
    """Every `<root>/*/problem.py`, sorted by folder name (root: the repo's `problems/`)."""
    root = Path(root) if root is not None else default_root()
    if not root.is_dir():
        raise PkitError(f"problems root {root} is not a directory (pass --problems-root)")
    return [load_problem(p) for p in sorted(root.glob("*/problem.py"))]


def not_problems(root: Path) -> list[Path]:
    """The folders directly under `root` that hold no problem.py (names starting with '.' or '_' aside): what
    `discover` passed over. Only one level is looked at, so a large unrelated folder costs one listing.

    >>> not_problems(default_root())
    []
    """
    return sorted(d for d in Path(root).iterdir()
                  if d.is_dir() and not d.name.startswith((".", "_")) and not (d / "problem.py").is_file())


def select(problems: list[Problem], wanted: Iterable[str] | None, what: str = "problems") -> list[Problem]:
    """The problems named in `wanted` (folder name, META name, or number), in discovery order; `what` names
    `wanted` in the error for a name that matches none (the command line passes '--problems')."""
    if not wanted:
        return list(problems)
    wanted = list(wanted)
    chosen = []
    for w in wanted:
        hits = [p for p in problems if w == p.name or w in p.aliases or (w.isdigit() and p.number == int(w))]
        if not hits:
            raise ValueError(f"{what}: expected a problem's folder name, META name or number, got {w!r}; "
                             f"known: {', '.join(p.name for p in problems)}")
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


def flops_dtype(dtype: str) -> str | None:
    """The `pkit.roofline` dtype whose rate bounds a problem's FLOPs when it runs in `dtype`.

    bfloat16, float16 and float32 name themselves (float32 is the rate without tensor cores: PyTorch runs
    float32 matmuls without TF32 unless asked to); dtypes with no matmul rate (integer sort keys) give None,
    which `flops_time` accepts only for costs declaring no FLOPs.

    >>> flops_dtype("bf16"), flops_dtype("float32"), flops_dtype("int64")
    ('bfloat16', 'float32', None)
    """
    from ..roofline import dtype_name

    try:
        return dtype_name(dtype)
    except ValueError:
        return None


def roofline_floor(cost: dict, dtype: str, ceilings):
    """`pkit.roofline.floor` of a problem's `cost` in `dtype` under `ceilings`: FLOPs at that dtype's rate
    (`flops_dtype`), plus α x cost['sync_steps']. A cost with FLOPs in a dtype without a rate is a ValueError."""
    from ..roofline import floor

    name = flops_dtype(dtype)
    if name is None and cost.get("flops", 0) > 0:
        raise ValueError(f"dtype: {dtype!r} has no FLOP rate in pkit.roofline, but the cost declares "
                         f"{cost['flops']} FLOPs")
    return floor(cost, ceilings, name)


def measured_ceilings(machine: str | None = None):
    """(`pkit.roofline.Ceilings.measured` from results/<machine>/ceilings.csv, their origin: machine and
    commit), or (None, 'none: <path> not recorded'). `machine` None: this machine's slug
    (`pkit.results.machine_slug`); results/ is $PKIT_RESULTS when set. The file is recorded on the GPU
    machine by `python -m pkit.experiments.ceilings --record`."""
    from .. import results
    from ..roofline import Ceilings

    machine = machine or results.machine_slug()
    path = results.results_root() / machine / "ceilings.csv"
    if not path.exists():
        return None, f"none: {path} not recorded"
    recorded = results.load("ceilings", machine)
    ceilings = Ceilings.measured(recorded.frame, {"machine": machine, **recorded.provenance})
    return ceilings, ceilings.origin


ROOFLINE_COLUMNS = ("sync_steps", "roofline_datasheet_ms", "roofline_datasheet_bound", "roofline_measured_ms",
                    "roofline_measured_bound", "measured_ceilings")
"""Roofline columns of `cost_table` and `roofline_report`, beside the older roofline_time_ms and bound (the
datasheet ones): under the datasheet and under measured ceilings (NaN/None without a ceilings.csv; then
`measured_ceilings` says why)."""


def rooflines(cost: dict | None, dtype: str, datasheet, measured=None, note: str = "") -> dict:
    """The `ROOFLINE_COLUMNS` of one cost: floors (ms) and bounds under `datasheet` and `measured` ceilings
    (None: NaN and no bound); `note` fills `measured_ceilings`. A None cost (PKB) gives NaN everywhere."""
    nan = float("nan")
    row = {"sync_steps": cost.get("sync_steps", 0) if cost else None, "roofline_datasheet_ms": nan,
           "roofline_datasheet_bound": None, "roofline_measured_ms": nan, "roofline_measured_bound": None,
           "measured_ceilings": note}
    if not cost:
        return row
    for name, ceilings in (("datasheet", datasheet), ("measured", measured)):
        if ceilings is not None:
            f = roofline_floor(cost, dtype, ceilings)
            row[f"roofline_{name}_ms"], row[f"roofline_{name}_bound"] = f.time_s * 1e3, f.bound
    return row


def cost_table(problems: list[Problem], world_size: int, dtype: str | None = None,
               sizes: Iterable[str] | None = None, ceilings: str = "H200", machine: str | None = None):
    """A DataFrame: per problem and size, the per-GPU cost (FLOPs, HBM bytes, link bytes, sync steps) and its
    roofline under `ceilings`' datasheet and under the ceilings measured on `machine`.

    `dtype` None takes each problem's first (default) dtype; `sizes` None takes every size the problem has.
    FLOPs run at the dtype's rate (`flops_dtype`); sync steps cost α each (0 on a datasheet).
    roofline_time_ms and bound are the datasheet floor (the columns older tables had); `ROOFLINE_COLUMNS`
    add the measured floor from results/<machine>/ceilings.csv (`measured_ceilings`; NaN when there is
    none, the `measured_ceilings` column then says why). Problems without a cost model (PKB) get empty
    cost columns.

    >>> from pkit.harness.problems import cost_table, discover
    >>> t = cost_table(discover(), 2, sizes=["large"], machine="no-such-machine").set_index("problem")
    >>> row = t.loc["05_allgather_gemm"]
    >>> row["dtype"], int(row["sync_steps"]), row["bound"], round(float(row["roofline_datasheet_ms"]), 3)
    ('bfloat16', 1, 'compute', 0.972)
    >>> bool(t["roofline_measured_ms"].isna().all()), t["measured_ceilings"].iloc[0].split(":")[0]
    (True, 'none')
    """
    import pandas as pd

    from ..roofline import Ceilings

    datasheet = Ceilings.datasheet(ceilings)
    measured, note = measured_ceilings(machine)
    rows = []
    for p in problems:
        d = dtype or p.dtypes[0]
        for size in (sizes or p.sizes or (p.default_size["cuda"],)):
            if p.sizes and size not in p.sizes:
                continue
            cost = p.cost(world_size, size, d) or {}
            roof = rooflines(cost, d, datasheet, measured, note)
            rows.append({"problem": p.name, "category": p.category, "size": size, "dtype": d,
                         "world_size": world_size, "flops": cost.get("flops"), "hbm_bytes": cost.get("hbm_bytes"),
                         "link_bytes": cost.get("link_bytes"),
                         "roofline_time_ms": roof["roofline_datasheet_ms"] if cost else None,
                         "bound": roof["roofline_datasheet_bound"], **roof})
    return pd.DataFrame(rows, columns=["problem", "category", "size", "dtype", "world_size", "flops", "hbm_bytes",
                                       "link_bytes", "roofline_time_ms", "bound", *ROOFLINE_COLUMNS])


RUN_COLUMNS = ("world_size", "measured_ceilings")
"""Columns of `cost_table` that the command's options fix (one world size, one machine's ceilings): `narrow`
says them once under the table."""


def narrow(table):
    """`table` (a `cost_table`) for a terminal, and the lines to print under it: without columns repeating an
    earlier one (roofline_datasheet_ms is roofline_time_ms) or holding no value (NaN/None in every row), and
    with each `RUN_COLUMNS` column holding one value in every row said once, as 'column: value'.

    >>> t, notes = narrow(cost_table(discover()[:2], 2, machine="no-such-machine"))
    >>> list(t.columns)  # doctest: +NORMALIZE_WHITESPACE
    ['problem', 'category', 'size', 'dtype', 'flops', 'hbm_bytes', 'link_bytes', 'roofline_time_ms', 'bound',
     'sync_steps']
    >>> notes[0], notes[1].split(":")[:2]
    ('world_size: 2', ['measured_ceilings', ' none'])
    """
    keep, notes = [], []
    for name, column in table.items():
        if column.isna().all() or any(column.equals(table[k]) for k in keep):
            continue
        if name in RUN_COLUMNS and column.nunique(dropna=False) == 1:
            notes.append(f"{name}: {column.iloc[0]}")
            continue
        keep.append(name)
    return table[keep], notes


def roofline_report(frame, problems: list[Problem], *, time_column: str = "ref_time_ms_median",
                    ceilings: str = "H200", machine: str | None = None):
    """`frame` (one row per problem, size, dtype, world_size and a time in ms, e.g. baselines.csv) with the
    `ROOFLINE_COLUMNS` of each row's problem and the fractions of both floors: roofline_datasheet_fraction and
    roofline_measured_fraction = floor / `time_column` (1 reaches the floor). Rows whose problem is not in
    `problems`, or has no cost model, get NaN; so do the measured columns without results/<machine>/ceilings.csv
    (`measured_ceilings` says why). The frame's own columns are kept as they are.

    >>> import pandas as pd
    >>> from pkit.harness.problems import discover, roofline_report
    >>> times = pd.DataFrame({"problem": ["01_all_reduce"], "size": ["large"], "dtype": ["bfloat16"],
    ...                       "world_size": [2], "ref_time_ms_median": [0.5]})
    >>> r = roofline_report(times, discover(), machine="no-such-machine")
    >>> round(float(r.loc[0, "roofline_datasheet_ms"]), 3), round(float(r.loc[0, "roofline_datasheet_fraction"]), 3)
    (0.298, 0.597)
    >>> float(r.loc[0, "roofline_measured_fraction"])
    nan
    """
    import pandas as pd

    from ..roofline import Ceilings

    missing = {"problem", "size", "dtype", "world_size", time_column} - set(frame.columns)
    if missing:
        raise ValueError(f"frame: expected columns problem, size, dtype, world_size and {time_column!r}; "
                         f"missing {sorted(missing)}")
    datasheet = Ceilings.datasheet(ceilings)
    measured, note = measured_ceilings(machine)
    by_name = {p.name: p for p in problems}
    rows = []
    for r in frame.itertuples(index=False):
        p = by_name.get(r.problem)
        cost = p.cost(int(r.world_size), r.size, r.dtype) if p is not None else None
        roof = rooflines(cost, r.dtype, datasheet, measured, note)
        time_ms = getattr(r, time_column)
        for name in ("datasheet", "measured"):
            roof[f"roofline_{name}_fraction"] = (roof[f"roofline_{name}_ms"] / time_ms
                                                 if time_ms is not None and time_ms > 0 else float("nan"))
        rows.append(roof)
    extra = pd.DataFrame(rows, index=frame.index, columns=[*ROOFLINE_COLUMNS, "roofline_datasheet_fraction",
                                                          "roofline_measured_fraction"])
    return pd.concat([frame.drop(columns=[c for c in extra.columns if c in frame.columns]), extra], axis=1)
