"""The roofline gap: how far each PyTorch + NCCL reference sits from its communication-aware roofline, whether
most sit below half of it (the claim of the ParallelKittens / ParallelKernelBench talk, pkit/data/published_pkb.csv),
and how much pkit's own solutions close it.

Inputs are recorded tables, nothing here times anything:
  * baselines: `results/<machine>/baselines.csv`, written by `python -m pkit.harness.baseline pkit part*.jsonl`
    (per problem the reference's median time and its roofline under datasheet and measured ceilings);
  * pkit solutions: `results/<machine>/pkit_solutions.csv`, written by
    `python -m pkit.harness.baseline solutions part*.jsonl`, or the `pkit eval --perf` JSONL records themselves.
Times are milliseconds. A fraction of roofline is roofline time / measured time: 1 reaches the floor, 0.5 takes
twice its time. Each row uses the measured ceilings where the table has them (the measuring machine's
ceilings.csv), else the datasheet's; the `ceilings` column says which.

Usage (notebook 06), on a machine whose ceilings, baselines and pkit solutions are recorded:
    from pkit import results
    from pkit.experiments import roofline_gap
    from pkit.roofline import Ceilings
    run = results.load("ceilings", "h200x2-nv18")
    roofline_gap.ceilings_vs_datasheet(Ceilings.measured(run.frame, run.provenance))
    base = results.load("baselines", "h200x2-nv18")
    gap = roofline_gap.gap_table(base.frame)          # sorted; category, bound, ceilings
    roofline_gap.claim_test(gap)                      # share of problems below 50% of their roofline
    sol = results.load("pkit_solutions", "h200x2-nv18")
    both = roofline_gap.solutions_vs_baselines(sol.frame, base.frame)
    roofline_gap.speedup_summary(both, speedup_target=1.5, min_problems=12, min_categories=5, roofline_target=0.7)

Example:
    >>> import pandas as pd
    >>> from pkit.experiments import roofline_gap
    >>> base = pd.DataFrame({"problem": ["a", "b"], "category": ["x", "y"], "ref_time_ms_median": [2.0, 1.0],
    ...                      "roofline_datasheet_ms": [0.5, 0.9], "roofline_datasheet_bound": ["link", "compute"],
    ...                      "roofline_measured_ms": [1.0, float("nan")], "roofline_measured_bound": ["sync", None]})
    >>> roofline_gap.gap_table(base)[["problem", "fraction", "bound", "ceilings"]].values.tolist()
    [['a', 0.5, 'sync', 'measured'], ['b', 0.9, 'compute', 'datasheet']]
"""
from __future__ import annotations

import numpy as np
import pandas as pd

BASELINE_COLUMNS = ("problem", "category", "ref_time_ms_median", "roofline_datasheet_ms", "roofline_datasheet_bound",
                    "roofline_measured_ms", "roofline_measured_bound")
"""Columns `gap_table` needs: those `pkit.harness.baseline.record_baselines` writes (since both rooflines)."""
PASSED_THROUGH = ("size", "dtype", "world_size", "status")
"""Baseline columns `gap_table` keeps when the frame has them."""
SOLUTION_COLUMNS = ("problem", "category", "solution", "status", "correct", "sol_time_ms_median", "speedup")
"""Columns `solutions_vs_baselines` needs of a pkit solutions table (`pkit.harness.baseline.SOLUTION_COLUMNS`)."""
BOUNDS = ("compute", "hbm", "link", "sync")
"""The terms that can bound a roofline (`pkit.roofline.Floor.bound`): sync is latency, α × sync steps."""


def require(frame: pd.DataFrame, columns, what: str, fix: str) -> None:
    """ValueError naming the `columns` that `frame` (called `what`) lacks, and `fix`.

    >>> require(pd.DataFrame({"a": [1]}), ("a", "b"), "baselines", "re-record it")
    Traceback (most recent call last):
    ValueError: baselines: expected columns ['a', 'b']; missing ['b']: re-record it
    """
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{what}: expected columns {list(columns)}; missing {missing}: {fix}")


def ceilings_vs_datasheet(measured, datasheet=None) -> pd.DataFrame:
    """Measured ceilings (a `pkit.roofline.Ceilings`, e.g. `Ceilings.measured` of a recorded ceilings.csv) beside
    a datasheet's (default the H200's), one row per ceiling: ceiling ('gemm <dtype>' for each dtype both have,
    hbm, link, sync), unit, datasheet, measured and measured_over_datasheet (NaN where the datasheet states
    nothing: datasheets give no sync latency α).

    >>> from pkit.roofline import Ceilings
    >>> sheet = Ceilings(989e12, 4.8e12, 450e9, "datasheet")
    >>> got = ceilings_vs_datasheet(Ceilings(700e12, 4.0e12, 360e9, "measured", 2e-6), sheet)
    >>> got.set_index("ceiling")["measured_over_datasheet"].round(2).to_dict()
    {'gemm bfloat16': 0.71, 'hbm': 0.83, 'link': 0.8, 'sync': nan}
    >>> got.loc[3, "unit"], float(got.loc[3, "datasheet"]), float(got.loc[3, "measured"])
    ('us', 0.0, 2.0)
    """
    from ...roofline import DTYPES, MEASURED, Ceilings

    sheet = datasheet or Ceilings.datasheet()

    def values(c) -> dict:
        gemm = {f"gemm {d}": c.flops_per_s_by_dtype[d] / MEASURED["gemm"][1] for d in DTYPES
                if d in c.flops_per_s_by_dtype}
        return {**gemm, "hbm": c.hbm_bytes_per_s / MEASURED["hbm"][1], "link": c.link_bytes_per_s / MEASURED["link"][1],
                "sync": c.sync_s / MEASURED["sync"][1]}

    theirs, ours = values(sheet), values(measured)
    rows = [{"ceiling": name, "unit": MEASURED[name.split()[0]][0], "datasheet": theirs[name], "measured": ours[name],
             "measured_over_datasheet": ours[name] / theirs[name] if theirs[name] > 0 else np.nan}
            for name in ours if name in theirs]
    return pd.DataFrame(rows)


def gap_table(baselines: pd.DataFrame, *, time_column: str = "ref_time_ms_median") -> pd.DataFrame:
    """Every problem's reference time as a fraction of its roofline, lowest fraction first (rows without a
    time or a roofline last, fraction NaN).

    `baselines`: a baselines.csv frame (`BASELINE_COLUMNS`; an old one with only the datasheet roofline is
    refused with the missing columns named). Returns problem, category, the `PASSED_THROUGH` columns it has,
    time_ms (`time_column`, ms), roofline_ms, fraction (roofline_ms / time_ms), bound (`BOUNDS`) and ceilings
    ('measured' where the row has a measured roofline, else 'datasheet'; 'none' without any), then
    datasheet_fraction and measured_fraction (each ceilings' roofline / time_ms, NaN where absent).

    >>> base = pd.DataFrame({"problem": ["p", "q", "r"], "category": ["c"] * 3, "ref_time_ms_median": [4.0, 1.0, 0],
    ...                      "roofline_datasheet_ms": [1.0, 0.8, 1.0], "roofline_datasheet_bound": ["hbm"] * 3,
    ...                      "roofline_measured_ms": [2.0, 0.9, 1.0], "roofline_measured_bound": ["link"] * 3})
    >>> gap_table(base)[["problem", "fraction", "datasheet_fraction"]].values.tolist()
    [['p', 0.5, 0.25], ['q', 0.9, 0.8], ['r', nan, nan]]
    """
    require(baselines, (*BASELINE_COLUMNS[:2], time_column, *BASELINE_COLUMNS[3:]), "baselines",
            "an old baselines.csv (datasheet roofline only); re-record it from the sweep's JSONL with "
            "`python -m pkit.harness.baseline pkit part*.jsonl --machine SLUG`")
    time = baselines[time_column].astype(float)
    time = time.where(time > 0)
    datasheet, measured = (baselines[f"roofline_{c}_ms"].astype(float) for c in ("datasheet", "measured"))
    has = measured.notna()
    out = baselines[["problem", "category", *[c for c in PASSED_THROUGH if c in baselines.columns]]].copy()
    out["time_ms"] = time
    out["roofline_ms"] = measured.where(has, datasheet)
    out["fraction"] = out["roofline_ms"] / time
    out["bound"] = baselines["roofline_measured_bound"].where(has, baselines["roofline_datasheet_bound"])
    out["ceilings"] = np.select([has, datasheet.notna()], ["measured", "datasheet"], "none")
    out["datasheet_fraction"], out["measured_fraction"] = datasheet / time, measured / time
    return out.sort_values(["fraction", "problem"], na_position="last").reset_index(drop=True)


def claim_test(gap: pd.DataFrame, threshold: float = 0.5) -> pd.DataFrame:
    """The ParallelKernelBench talk's claim, "PyTorch + NCCL implementations reach less than half of their
    communication-aware roofline", tested on a `gap_table`: one row per ceilings ('chosen': measured where
    recorded, else the datasheet; 'datasheet'; 'measured'), with problems (those with a fraction), below
    (fraction < `threshold`), share_below, median_fraction, and holds (a majority below; None without problems).

    >>> gap = pd.DataFrame({"fraction": [0.2, 0.4, 0.7, np.nan], "datasheet_fraction": [0.1, 0.2, 0.3, 0.4],
    ...                     "measured_fraction": [np.nan] * 4})
    >>> claim_test(gap)[["problems", "below", "share_below", "holds"]].to_dict("index")["chosen"]
    {'problems': 3, 'below': 2, 'share_below': 0.6666666666666666, 'holds': True}
    """
    require(gap, ("fraction", "datasheet_fraction", "measured_fraction"), "gap", "expected a gap_table")
    rows = {}
    for name, column in (("chosen", "fraction"), ("datasheet", "datasheet_fraction"),
                         ("measured", "measured_fraction")):
        values = gap[column].dropna()
        below = int((values < threshold).sum())
        share = below / len(values) if len(values) else np.nan
        rows[name] = {"problems": len(values), "below": below, "share_below": share,
                      "median_fraction": values.median(), "threshold": threshold,
                      "holds": bool(share > 0.5) if len(values) else None}
    return pd.DataFrame.from_dict(rows, orient="index").rename_axis("ceilings")


def bounds_by_category(gap: pd.DataFrame) -> pd.DataFrame:
    """Which term bounds each problem's roofline, counted per category of a `gap_table` (rows with a fraction):
    one row per category and an 'all' row, one column per term of `BOUNDS`, then problems.

    >>> gap = pd.DataFrame({"category": ["moe", "moe", "fused"], "bound": ["link", "sync", "compute"],
    ...                     "fraction": [0.2, 0.4, np.nan]})
    >>> bounds_by_category(gap)  # doctest: +NORMALIZE_WHITESPACE
              compute  hbm  link  sync  problems
    category
    moe             0    0     1     1         2
    all             0    0     1     1         2
    """
    require(gap, ("category", "bound", "fraction"), "gap", "expected a gap_table")
    shown = gap[gap["fraction"].notna()]
    counts = pd.crosstab(shown["category"], shown["bound"]).reindex(columns=list(BOUNDS), fill_value=0)
    counts.loc["all"] = counts.sum()
    counts.columns.name, counts.index.name = None, "category"
    return counts.assign(problems=counts.sum(axis=1))


def solution_table(solutions) -> pd.DataFrame:
    """pkit's solutions as one row per problem: a pkit_solutions frame (`SOLUTION_COLUMNS`) or `pkit eval`
    JSONL records (records of other candidates are dropped; of a solution evaluated twice, the last, as
    `pkit.harness.baseline.record_pkit_solutions` keeps). Where a problem has several pkit solutions, its
    fastest correct one is kept (else the first by name).

    >>> rows = pd.DataFrame({"problem": ["p", "p"], "category": ["c", "c"],
    ...                      "solution": ["p/solutions/pkit_a.py", "p/solutions/pkit_b.py"],
    ...                      "status": ["wrong_result", "correct_faster"], "correct": [False, True],
    ...                      "sol_time_ms_median": [np.nan, 1.0], "speedup": [np.nan, 2.0]})
    >>> solution_table(rows)["solution"].tolist()
    ['p/solutions/pkit_b.py']
    """
    if not isinstance(solutions, pd.DataFrame):
        from ...harness.baseline import pkit_solution_records, solution_frame

        solutions = solution_frame(pkit_solution_records(solutions))
    require(solutions, SOLUTION_COLUMNS, "solutions", "expected pkit_solutions.csv or pkit eval records")
    ranked = solutions.assign(_wrong=~solutions["correct"].astype(bool))
    ranked = ranked.sort_values(["problem", "_wrong", "sol_time_ms_median", "solution"], na_position="last")
    return ranked.drop_duplicates("problem").drop(columns="_wrong").reset_index(drop=True)


def solutions_vs_baselines(solutions, baselines: pd.DataFrame) -> pd.DataFrame:
    """Per problem with a pkit solution: its solution, status, correct, ref_time_ms (the recorded baseline's),
    sol_time_ms, speedup (reference time / solution time, from the solution's own run; NaN unless correct),
    baseline_fraction and pkit_fraction of the same roofline (ms over ms; pkit's NaN unless correct), with the
    baseline's bound and ceilings; lowest baseline fraction first. `solutions` as in `solution_table`,
    `baselines` as in `gap_table`. A problem without a baseline keeps NaN baseline columns; a problem whose
    size, dtype or world size differ between the two tables is a ValueError naming it.

    >>> base = pd.DataFrame({"problem": ["p"], "category": ["c"], "dtype": ["bfloat16"], "ref_time_ms_median": [2.0],
    ...                      "roofline_datasheet_ms": [0.5], "roofline_datasheet_bound": ["link"],
    ...                      "roofline_measured_ms": [1.0], "roofline_measured_bound": ["link"]})
    >>> sol = pd.DataFrame({"problem": ["p"], "category": ["c"], "solution": ["p/solutions/pkit_x.py"],
    ...                     "dtype": ["bfloat16"], "status": ["correct_faster"], "correct": [True],
    ...                     "sol_time_ms_median": [1.25], "speedup": [1.6]})
    >>> solutions_vs_baselines(sol, base)[["baseline_fraction", "pkit_fraction", "speedup"]].values.tolist()
    [[0.5, 0.8, 1.6]]
    """
    pkit = solution_table(solutions)
    gap = gap_table(baselines).set_index("problem")
    shared = [c for c in ("size", "dtype", "world_size") if c in pkit.columns and c in gap.columns]
    theirs = gap.reindex(pkit["problem"])
    differ = [p for p, mine, other in zip(pkit["problem"], pkit[shared].itertuples(index=False),
                                          theirs[shared].itertuples(index=False))
              if p in gap.index and tuple(mine) != tuple(other)]
    if differ:
        raise ValueError(f"solutions, baselines: {shared} differ for {differ}; compare runs of the same size, "
                         "dtype and world size")
    correct = pkit["correct"].astype(bool).to_numpy()
    sol_time = pkit["sol_time_ms_median"].astype(float).where(correct).to_numpy()
    roof = theirs["roofline_ms"].to_numpy()
    out = pd.DataFrame({"problem": pkit["problem"], "category": pkit["category"], "solution": pkit["solution"],
                        "status": pkit["status"], "correct": correct, "ref_time_ms": theirs["time_ms"].to_numpy(),
                        "sol_time_ms": sol_time, "speedup": pkit["speedup"].astype(float).where(correct),
                        "baseline_fraction": theirs["fraction"].to_numpy(), "pkit_fraction": roof / sol_time,
                        "bound": theirs["bound"].to_numpy(), "ceilings": theirs["ceilings"].to_numpy()})
    return out.sort_values(["baseline_fraction", "problem"], na_position="last").reset_index(drop=True)


def speedup_summary(table: pd.DataFrame, *, speedup_target: float, min_problems: int, min_categories: int,
                    roofline_target: float) -> dict:
    """What pkit's solutions achieve, from a `solutions_vs_baselines` table, against targets the caller names:
    problems (with a pkit solution), correct, failed (problems whose solution is not correct: flagged, left out
    of the geomean), categories (of the correct ones), geomean_speedup (geometric mean of the correct solutions'
    speedups, ×), faster (speedup > 1), below_roofline_target (correct solutions under `roofline_target`, a
    fraction of their roofline: each needs a reason), meets_speedup (geomean ≥ `speedup_target`, ×) and
    meets_coverage (≥ `min_problems` correct problems in ≥ `min_categories` categories).

    >>> t = pd.DataFrame({"problem": ["a", "b", "c"], "category": ["x", "y", "y"], "correct": [True, True, False],
    ...                   "speedup": [2.0, 0.5, np.nan], "pkit_fraction": [0.9, 0.3, np.nan]})
    >>> s = speedup_summary(t, speedup_target=1.5, min_problems=2, min_categories=2, roofline_target=0.7)
    >>> s["geomean_speedup"], s["failed"], s["below_roofline_target"], s["meets_coverage"], s["meets_speedup"]
    (1.0, ['c'], ['b'], True, False)
    """
    from ...metrics import geomean_speedup

    require(table, ("problem", "category", "correct", "speedup", "pkit_fraction"), "table",
            "expected a solutions_vs_baselines table")
    good = table[table["correct"].astype(bool)]
    geomean = geomean_speedup(table.assign(correct=table["correct"].astype(bool)))
    categories = good["category"].nunique()
    failed = sorted(set(table["problem"]) - set(good["problem"]))
    return {"problems": len(table), "correct": len(good), "failed": failed,
            "categories": categories, "geomean_speedup": geomean, "faster": int((good["speedup"] > 1).sum()),
            "below_roofline_target": sorted(good.loc[~(good["pkit_fraction"] >= roofline_target), "problem"]),
            "meets_speedup": bool(geomean >= speedup_target), "meets_coverage": len(good) >= min_problems
            and categories >= min_categories}
