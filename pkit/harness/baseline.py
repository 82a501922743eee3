"""Record every problem's reference time at a real size: `results/<machine>/baselines.csv` (+ .json).

Each problem's reference runs as its own candidate through the harness (fresh worker processes, the
same correctness trials and timing), so a baseline is measured exactly as candidates are. Needs GPUs for
meaningful numbers; on the CPU it still runs (device 'cpu') and says so in the `device` column.

Example:
    >>> import pkit.harness                                                   # doctest: +SKIP
    >>> frame = pkit.harness.baselines(size="large", world_size=2)            # doctest: +SKIP
    >>> frame[["problem", "ref_time_ms_median", "roofline_fraction"]]         # doctest: +SKIP
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Callable, Iterable

import pandas as pd

from .problems import discover, roofline_report, select
from .runner import EvalOptions, evaluate, reference_candidate

COLUMNS = ("problem", "category", "size", "dtype", "world_size", "device", "status", "ref_time_ms_median",
           "ref_time_ms_min", "ref_time_ms_iqr", "ref_time_cv", "rotations", "roofline_time_ms", "roofline_bound",
           "roofline_fraction")
"""Columns of baselines.csv; `roofline_fraction` is roofline time over the reference's median time."""


def baselines(*, size: str = "large", dtype: str | None = None, world_size: int = 2,
              problems_root: str | Path | None = None, names: Iterable[str] | None = None, trials: int = 1,
              warmup: int = 25, iters: int = 100, timeout_s: float = 600.0, device: str = "auto",
              machine: str | None = None, out: str | Path | None = None, experiment: str = "baselines",
              log: Callable[[str], None] | None = None) -> pd.DataFrame:
    """Time each problem's reference (`names`, default all) and record the table through pkit.results.record.

    `out` also keeps the full JSONL records (default: they are not kept).
    Returns the recorded frame, one row per problem, times in milliseconds.
    """
    from .. import results

    problems = select(discover(problems_root), names)
    options = EvalOptions(world_size=world_size, size=size, dtype=dtype, trials=trials, perf=True, warmup=warmup,
                          iters=iters, timeout_s=timeout_s, device=device)
    parameters = {"size": size, "dtype": dtype, "world_size": world_size, "trials": trials, "warmup": warmup,
                  "iters": iters, "problems": [p.name for p in problems]}
    pairs = [(p, reference_candidate(p)) for p in problems]
    with tempfile.TemporaryDirectory(prefix="pkit-baselines-") as scratch:
        records = evaluate(pairs, options, out or Path(scratch) / "baselines.jsonl",
                           provenance=results.provenance(parameters), log=log)
    frame = baseline_frame(records)
    results.record(experiment, frame, parameters, machine=machine)
    return frame


def baseline_frame(records: Iterable[dict]) -> pd.DataFrame:
    """The baselines table (COLUMNS) from JSONL records of problems' references run as their own candidates."""
    rows = [{"problem": r["problem"], "category": r["category"], "size": r["size"], "dtype": r["dtype"],
             "world_size": r["world_size"], "device": r["device"], "status": r["status"],
             "ref_time_ms_median": r["ref_time_ms"], "ref_time_ms_min": r["ref_time_min_ms"],
             "ref_time_ms_iqr": r["ref_time_iqr_ms"], "ref_time_cv": r["ref_time_cv"], "rotations": r["rotations"],
             "roofline_time_ms": r["roofline_time_ms"], "roofline_bound": r["roofline_bound"],
             "roofline_fraction": (r["roofline_time_ms"] / r["ref_time_ms"]
                                   if r["ref_time_ms"] and r["roofline_time_ms"] is not None else None)}
            for r in records]
    return pd.DataFrame(rows, columns=list(COLUMNS))


def record_baselines(jsonl_paths: Iterable[str | Path], *, machine: str | None = None,
                     experiment: str = "baselines") -> pd.DataFrame:
    """Record `results/<machine>/baselines.{csv,json}` from the JSONL records of one or more runs of
    `pkit eval --reference-as-candidate --perf` (a sweep split into runs; other candidates' records are
    ignored), on any machine: the table's provenance is the measuring machine's (from the records; they
    must agree), the measuring runs' commits and times are listed in its parameters. Returns the frame.
    """
    from .. import results
    from .records import read_jsonl

    records = {r["problem"]: r for path in jsonl_paths for r in read_jsonl(path)
               if r["solution"].endswith("problem.py:reference")}
    if not records or any(r["timing"] != "full" for r in records.values()):
        raise ValueError("jsonl_paths: expected records of references run as candidates with full timing "
                         "(pkit eval --reference-as-candidate --perf)")
    chosen = sorted(records.values(), key=lambda r: r["problem"])
    provenance = measured_on(chosen)
    # the records' datasheet floor first (COLUMNS), then each problem against both ceilings, the measuring
    # machine's measured ones where its ceilings.csv is recorded
    frame = roofline_report(baseline_frame(chosen), discover(), machine=machine or provenance.get("machine"))
    results.record(experiment, frame, _sweep_parameters(chosen), machine=machine, measured_on=provenance)
    return frame


MACHINE_FIELDS = ("machine", "gpus", "gpu_count", "driver", "link_matrix", "versions", "host")
"""Provenance fields that say where a record was measured; one table's records must agree on all of them."""


def measured_on(records: list[dict]) -> dict:
    """The machine provenance the records share (ValueError naming the field when they disagree)."""
    first = records[0]["provenance"]
    for r in records[1:]:
        for key in MACHINE_FIELDS:
            if r["provenance"].get(key) != first.get(key):
                raise ValueError(f"jsonl_paths: records measured on different machines ({key}: "
                                 f"{first.get(key)!r} vs {r['provenance'].get(key)!r} in {r['problem']})")
    commits = sorted({str(r["provenance"].get("pkit_commit")) for r in records})
    return {key: first.get(key) for key in MACHINE_FIELDS} | {"pkit_commit": " + ".join(commits),
                                                               "utc_time": max(r["provenance"].get("utc_time", "")
                                                                               for r in records)}


def _sweep_parameters(records: list[dict]) -> dict:
    """The recorded parameters of a table built from several runs' records: each run's commit and time."""
    runs = sorted({(r["provenance"].get("pkit_commit"), r["provenance"].get("utc_time")) for r in records}, key=str)
    return {"runs": [{"pkit_commit": c, "utc_time": t} for c, t in runs], "problems": len(records),
            "trials": sorted({r["trials"] for r in records}), "sizes": sorted({r["size"] for r in records})}


PKB_COLUMNS = ("problem", "status", "correct", "dtype", "size", "world_size", "device", "ref_time_ms_median",
               "max_abs_err", "flags", "reason", "explanation")
"""Columns of pkb_references.csv: one row per PKB reference evaluated as its own candidate."""


def record_pkb_references(jsonl_paths: Iterable[str | Path], *, machine: str | None = None,
                          experiment: str = "pkb_references") -> pd.DataFrame:
    """Record `results/<machine>/pkb_references.{csv,json}` from the JSONL records of one or more runs of
    `pkit eval --pkb-root ... --reference-as-candidate` (a long sweep split into runs).

    `reason` is the first line of a failure's error; `explanation` says why a reference that is not correct
    fails, from `pkit.harness.pkb.KNOWN_FAILURES` (empty when none is known: then it is a harness bug to fix).
    Returns the recorded frame, one row per problem, in PKB's id order.
    """
    from .. import results
    from .pkb import KNOWN_FAILURES, problem_id
    from .records import first_line, read_jsonl

    records = {r["problem"]: r for path in jsonl_paths for r in read_jsonl(path)}
    rows = [{"problem": r["problem"], "status": r["status"], "correct": r["status"].startswith("correct"),
             "dtype": r["dtype"], "size": r["size"], "world_size": r["world_size"], "device": r["device"],
             "ref_time_ms_median": r["ref_time_ms"], "max_abs_err": r["max_abs_err"], "flags": " ".join(r["flags"]),
             "reason": first_line(r["error"]), "explanation": KNOWN_FAILURES.get(r["problem"], "")
             if not r["status"].startswith("correct") else ""}
            for r in sorted(records.values(), key=lambda r: problem_id(r["problem"]))]
    frame = pd.DataFrame(rows, columns=list(PKB_COLUMNS))
    chosen = list(records.values())
    results.record(experiment, frame, _sweep_parameters(chosen), machine=machine, measured_on=measured_on(chosen))
    return frame


def main(argv: list[str] | None = None) -> int:
    """`python -m pkit.harness.baseline {pkit,pkb} RECORDS.jsonl ... [--machine SLUG]`: record baselines (pkit
    problems' references) or pkb_references from the JSONL records of sweeps."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m pkit.harness.baseline")
    parser.add_argument("what", choices=("pkit", "pkb"))
    parser.add_argument("records", nargs="+", type=Path)
    parser.add_argument("--machine", default=None)
    args = parser.parse_args(argv)
    record = record_baselines if args.what == "pkit" else record_pkb_references
    frame = record(args.records, machine=args.machine)
    print(frame.to_string(index=False, max_colwidth=60))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
