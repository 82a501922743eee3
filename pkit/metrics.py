"""Benchmark metrics over `pkit eval` records: pass@k, fast_p, geometric-mean speedup.

A record is one evaluated candidate (see pkit/harness/records.py). Samples are grouped by (model, problem):
a problem with n samples of which c are correct contributes the unbiased pass@k estimate
1 - C(n-c, k) / C(n, k) (Chen et al. 2021, "Evaluating Large Language Models Trained on Code"); fast_p@k
uses the same estimator with "correct and speedup > p" in place of "correct" (KernelBench's fast_p; p = 1
is "correct and faster than the reference"; a `correct_level` record, tied with the reference within the
harness's tie band, is correct and credited a speedup of exactly 1). Scores are the mean over problems, so each problem weighs
the same however many samples it has.

Example:
    >>> from pkit.metrics import pass_at_k, fast_p
    >>> round(pass_at_k(10, 3, 1), 3), pass_at_k(10, 0, 5), pass_at_k(10, 8, 3)
    (0.3, 0.0, 1.0)
    >>> recs = [{"problem": "a", "category": "c", "model": "m", "status": "correct_faster", "speedup": 1.5},
    ...         {"problem": "b", "category": "c", "model": "m", "status": "wrong_result", "speedup": None}]
    >>> fast_p(recs, p=1.0)
    0.5
"""
from __future__ import annotations

import math
from typing import Iterable, Sequence

import pandas as pd

from .harness.records import CORRECT  # the statuses that count as correct (older records lack correct_level)

ALL = "all"
"""The category label of rows that pool every category."""

UNNAMED_MODEL = "unnamed"
"""The model label of records whose `model` is None (candidates that name no model)."""


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k samples drawn without replacement from n (c correct) is correct.

    Computed as 1 - prod_{i=n-c+1..n} (1 - k/i) in log space, which stays accurate for large n where the
    binomial coefficients overflow floats.

    Example:
        >>> pass_at_k(5, 1, 2)
        0.4
    """
    for name, value in (("n", n), ("c", c), ("k", k)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name}: expected an int, got {value!r}")
    if n < 1:
        raise ValueError(f"n: expected at least one sample, got {n}")
    if not 0 <= c <= n:
        raise ValueError(f"c: expected 0 <= c <= n = {n}, got {c}")
    if not 1 <= k <= n:
        raise ValueError(f"k: expected 1 <= k <= n = {n}, got {k}")
    if c == 0:
        return 0.0
    if n - c < k:
        return 1.0
    return -math.expm1(math.fsum(math.log1p(-k / i) for i in range(n - c + 1, n + 1)))


def outcomes(records: Iterable[dict]) -> pd.DataFrame:
    """One row per record: model, problem, category, sample, status, correct, speedup (NaN unless correct).

    Example:
        >>> row = outcomes([{"problem": "a", "category": "c", "status": "correct_slower", "speedup": 0.5}]).iloc[0]
        >>> row["model"], bool(row["correct"]), float(row["speedup"])
        ('unnamed', True, 0.5)
    """
    rows = []
    for i, r in enumerate(records):
        missing = [key for key in ("problem", "category", "status") if key not in r]
        if missing:
            raise ValueError(f"records[{i}]: missing fields {missing} (expected `pkit eval` records)")
        correct = r["status"] in CORRECT
        speedup = r.get("speedup") if correct else None
        rows.append({"model": r.get("model") or UNNAMED_MODEL, "problem": r["problem"], "category": r["category"],
                     "sample": r.get("sample"), "status": r["status"], "correct": correct,
                     "speedup": float(speedup) if speedup is not None else math.nan})
    return pd.DataFrame(rows, columns=["model", "problem", "category", "sample", "status", "correct", "speedup"])


def per_problem(records: Iterable[dict] | pd.DataFrame, p: float | None = None) -> pd.DataFrame:
    """Sample counts per (model, problem): n samples, c correct, and (with `p`) f correct with speedup > p."""
    frame = records if isinstance(records, pd.DataFrame) else outcomes(records)
    ok = frame["correct"] if p is None else credited_speedup(frame) > p
    grouped = frame.assign(ok=ok).groupby(["model", "problem", "category"], sort=True)
    return grouped.agg(n=("ok", "size"), c=("ok", "sum")).reset_index()


def credited_speedup(frame: pd.DataFrame) -> pd.Series:
    """The speedup each record is credited with: NaN unless correct; a `correct_level` record, tied with the
    reference (its speedup's interval meets the tie band), is credited with exactly 1, so it is fast for p < 1
    and never for p >= 1, whatever its point estimate."""
    return frame["speedup"].where(frame["status"] != "correct_level", 1.0).where(frame["correct"])


def _score(counts: pd.DataFrame, k: int, total: int | None = None, cap: bool = False) -> float:
    """Mean pass@k estimate over the problems in `counts`; `total` problems in the denominator if given;
    `cap` scores a problem with fewer than k samples at its n."""
    if k < 1:
        raise ValueError(f"k: expected k >= 1, got {k}")
    estimates = [pass_at_k(int(n), int(c), min(k, int(n)) if cap else k) for n, c in zip(counts["n"], counts["c"])]
    if total is not None and total < len(estimates):
        raise ValueError(f"total: {total} problems is fewer than the {len(estimates)} present in the records")
    denominator = total if total is not None else len(estimates)
    if denominator == 0:
        raise ValueError("records: no records to score")
    return math.fsum(estimates) / denominator


def _one_model(records, what: str) -> pd.DataFrame:
    frame = records if isinstance(records, pd.DataFrame) else outcomes(records)
    models = frame["model"].unique()
    if len(models) > 1:
        raise ValueError(f"records: {what} pools one model's samples; got models {sorted(models)} "
                         f"(filter first, or use metrics.table)")
    return frame


def pass_rate(records, k: int = 1, total: int | None = None) -> float:
    """pass@k of one model's records: the mean over problems of the per-problem estimate.

    `total` counts problems with no record as unsolved (e.g. 87 for the full ParallelKernelBench).
    """
    return _score(per_problem(_one_model(records, "pass_rate")), k, total)


def fast_p(records, p: float = 1.0, k: int = 1, total: int | None = None) -> float:
    """fast_p@k of one model's records: chance that one of k samples is correct with speedup > p, averaged
    over problems. With one sample per problem and k = 1 this is the fraction of problems solved correctly
    and more than p times faster than the reference."""
    return _score(per_problem(_one_model(records, "fast_p"), p), k, total)


def geomean_speedup(records) -> float:
    """Geometric mean of the speedups of correct records (NaN when none is correct and timed)."""
    frame = records if isinstance(records, pd.DataFrame) else outcomes(records)
    speedups = frame.loc[frame["correct"], "speedup"].dropna()
    speedups = speedups[speedups > 0]
    return float(math.exp(speedups.map(math.log).mean())) if len(speedups) else math.nan


def table(records, ks: Sequence[int] = (1,), ps: Sequence[float] = (1.0,)) -> pd.DataFrame:
    """Every metric per model and category (and category 'all'): one row per (model, category, metric, k, p).

    `metric` is 'pass', 'fast' or 'geomean_speedup'; `k` is capped at each problem's sample count (a
    problem with fewer than k samples is scored at its n). Columns: model, category, problems, metric, k, p,
    value.

    Example:
        >>> t = table([{"problem": "a", "category": "c", "model": "m", "status": "correct_faster",
        ...             "speedup": 2.0}], ks=[1], ps=[1.0])
        >>> t[["category", "metric", "value"]].values.tolist()
        [['all', 'pass', 1.0], ['all', 'fast', 1.0], ['all', 'geomean_speedup', 2.0], ['c', 'pass', 1.0], ['c', 'fast', 1.0], ['c', 'geomean_speedup', 2.0]]
    """
    frame = records if isinstance(records, pd.DataFrame) else outcomes(records)
    if frame.empty:
        raise ValueError("records: no records to score")
    rows = []
    for model, by_model in frame.groupby("model", sort=True):
        scopes = [(ALL, by_model)] + list(by_model.groupby("category", sort=True))
        for category, part in scopes:
            base = {"model": model, "category": category, "problems": part["problem"].nunique()}
            for k in ks:
                rows.append({**base, "metric": "pass", "k": k, "p": math.nan,
                             "value": _score(per_problem(part), k, cap=True)})
            for k in ks:
                for p in ps:
                    rows.append({**base, "metric": "fast", "k": k, "p": p, "value": _score(per_problem(part, p), k, cap=True)})
            rows.append({**base, "metric": "geomean_speedup", "k": math.nan, "p": math.nan,
                         "value": geomean_speedup(part)})
    return pd.DataFrame(rows, columns=["model", "category", "problems", "metric", "k", "p", "value"])


def fast_p_curve(records, ps: Sequence[float], k: int = 1, total: int | None = None) -> pd.DataFrame:
    """fast_p@k of each model at every speedup threshold in `ps` (reference time / candidate time): a row per
    (model, p), `fast` a share of problems in [0, 1] (of `total` problems when given, else of those with records).

    Example:
        >>> recs = [{"problem": "a", "category": "c", "model": "m", "status": "correct_faster", "speedup": 1.5},
        ...         {"problem": "b", "category": "c", "model": "m", "status": "correct_slower", "speedup": 0.5}]
        >>> fast_p_curve(recs, [0.0, 1.0, 2.0]).values.tolist()
        [['m', 0.0, 1.0], ['m', 1.0, 0.5], ['m', 2.0, 0.0]]
    """
    frame = records if isinstance(records, pd.DataFrame) else outcomes(records)
    rows = []
    for model, mine in frame.groupby("model", sort=True):
        speedups = [group.to_numpy() for _, group in credited_speedup(mine).groupby(
            [mine["problem"], mine["category"]], sort=True)]  # each problem's samples, grouped once for every p
        for p in ps:
            counts = pd.DataFrame({"n": [len(s) for s in speedups], "c": [int((s > p).sum()) for s in speedups]})
            rows.append({"model": model, "p": p, "fast": _score(counts, k, total)})
    return pd.DataFrame(rows, columns=["model", "p", "fast"])


def by_category(records, k: int = 1, p: float = 1.0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """pass@k and fast_p@k of each model per category, as two grids for a heatmap, (scores, problems): a row
    per category (`ALL` first, then by name), a column per model and metric, labelled '<model>\\npass@<k>' and
    '<model>\\nfast_<p>@<k>'; scores are shares of the problems that `problems` counts (those the model has
    records for in the category), NaN where it has none.

    Example:
        >>> recs = [{"problem": "a", "category": "x", "model": "m", "status": "correct_faster", "speedup": 2.0},
        ...         {"problem": "b", "category": "y", "model": "m", "status": "wrong_result", "speedup": None}]
        >>> scores, problems = by_category(recs)
        >>> scores.index.tolist(), scores.columns.tolist()
        (['all', 'x', 'y'], ['m\\npass@1', 'm\\nfast_1@1'])
        >>> scores.values.tolist()
        [[0.5, 0.5], [1.0, 1.0], [0.0, 0.0]]
        >>> problems["m\\npass@1"].tolist()
        [2.0, 1.0, 1.0]
    """
    frame = records if isinstance(records, pd.DataFrame) else outcomes(records)
    scores = table(frame, ks=[k], ps=[p])
    names = {"pass": f"pass@{k}", "fast": f"fast_{p:g}@{k}"}
    scores = scores[scores["metric"].isin(list(names))]
    scores = scores.assign(column=scores["model"] + "\n" + scores["metric"].map(names))
    order = [ALL] + sorted(c for c in scores["category"].unique() if c != ALL)
    columns = [f"{m}\n{name}" for m in sorted(frame["model"].unique()) for name in names.values()]
    grids = (scores.pivot_table(index="category", columns="column", values=v).reindex(index=order, columns=columns)
             for v in ("value", "problems"))
    return tuple(grids)
