"""Record every problem's reference time at a real size: `results/<machine>/baselines.csv` (+ .json).

Each problem's reference runs as its own candidate through the harness (fresh worker processes, the
same correctness trials and timing), so a baseline is measured exactly as candidates are. Needs GPUs for
meaningful numbers; on the CPU it still runs (device 'cpu') and says so in the `device` column.
The same module records tables from JSONL sweeps run elsewhere (`main`): baselines, PKB references, and pkit's
own solutions (`results/<machine>/pkit_solutions.csv`, `python -m pkit.harness.baseline solutions part*.jsonl`).

Example:
    >>> import pkit.harness                                                   # doctest: +SKIP
    >>> frame = pkit.harness.baselines(size="large", world_size=2)            # doctest: +SKIP
    >>> frame[["problem", "ref_time_ms_median", "roofline_fraction"]]         # doctest: +SKIP
"""
from __future__ import annotations

import tempfile
from pathlib import Path, PurePosixPath
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
    """Time each problem's reference (`names`, default all) and record the table through pkit.results.record
    (unless `may_record` says no: then it is only returned, and a line says why).

    `out` also keeps the full JSONL records (default: they are not kept).
    Returns the frame, one row per problem, times in milliseconds.
    """
    from .. import results

    keep = may_record()

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
    if keep:
        results.record(experiment, frame, parameters, machine=machine)
    else:
        (log or print)(f"{experiment}: not recorded: this machine has no GPU, and the repository's results/ "
                       "holds GPU machines' runs only (set PKIT_RESULTS to a folder of your own to keep it)")
    return frame


def may_record() -> bool:
    """Whether `baselines` may record here: always on a machine with GPUs; on one without (slug 'cpu') only
    outside the repository's results/, i.e. with $PKIT_RESULTS naming another folder, as the tests do.

    >>> import os; from pkit import results                                    # doctest: +SKIP
    >>> results.machine_slug(), "PKIT_RESULTS" in os.environ, may_record()     # doctest: +SKIP
    ('cpu', False, False)
    """
    from .. import results

    return (results.machine_slug() != "cpu"
            or results.results_root().resolve() != (results.REPO_ROOT / "results").resolve())


def baseline_frame(records: Iterable[dict]) -> pd.DataFrame:
    """The baselines table (COLUMNS) from JSONL records of problems' references run as their own candidates."""
    rows = [{**_run_columns(r), **_timing_columns(r, "ref"), "rotations": r["rotations"],
             "roofline_time_ms": r["roofline_time_ms"], "roofline_bound": r["roofline_bound"],
             "roofline_fraction": (r["roofline_time_ms"] / r["ref_time_ms"]
                                   if r["ref_time_ms"] and r["roofline_time_ms"] is not None else None)}
            for r in records]
    return pd.DataFrame(rows, columns=list(COLUMNS))


def _run_columns(r: dict) -> dict:
    """What ran, from one record: problem, category, size, dtype, world_size, device, status."""
    return {key: r[key] for key in ("problem", "category", "size", "dtype", "world_size", "device", "status")}


def _timing_columns(r: dict, who: str) -> dict:
    """The timing columns of `who` ('ref' or 'sol') from one record: {who}_time_ms_median, _min, _iqr (ms), _cv."""
    return {f"{who}_time_ms_median": r[f"{who}_time_ms"], f"{who}_time_ms_min": r[f"{who}_time_min_ms"],
            f"{who}_time_ms_iqr": r[f"{who}_time_iqr_ms"], f"{who}_time_cv": r[f"{who}_time_cv"]}


def record_baselines(jsonl_paths: Iterable[str | Path], *, machine: str | None = None,
                     experiment: str = "baselines") -> pd.DataFrame:
    """Record `results/<machine>/baselines.{csv,json}` from the JSONL records of one or more runs of
    `pkit eval --reference-as-candidate --perf` (a sweep split into runs; other candidates' records are
    ignored), on any machine: the table's provenance is the measuring machine's (from the records; they
    must agree), the measuring runs' commits and times are listed in its parameters. Returns the frame.
    """
    chosen = latest(_read(jsonl_paths), lambda r: r["solution"].endswith("problem.py:reference"),
                    lambda r: r["problem"])
    if not chosen or any(r["timing"] != "full" for r in chosen):
        raise ValueError("jsonl_paths: expected records of references run as candidates with full timing "
                         "(pkit eval --reference-as-candidate --perf)")
    return _record_sweep(experiment, baseline_frame(chosen), chosen, machine, "ref_time_ms_median")


SOLUTION_COLUMNS = ("problem", "category", "solution", "size", "dtype", "world_size", "device", "status", "correct",
                    "sol_time_ms_median", "sol_time_ms_min", "sol_time_ms_iqr", "sol_time_cv", "ref_time_ms_median",
                    "speedup", "rotations", "trials", "trials_passed", "max_abs_err", "flags", "reason")
"""Columns of pkit_solutions.csv before the rooflines: one row per (problem, pkit solution). Times in ms;
`ref_time_ms_median` and `speedup` (reference time / solution time) come from the same run as the solution's
time; `reason` is the first line of a failure's error. `record_pkit_solutions` appends `roofline_report`'s
columns, whose fractions are roofline time over `sol_time_ms_median` (NaN for a solution that is not correct)."""


def is_pkit_solution(record: dict) -> bool:
    """Whether a record is of one of pkit's own solutions: `problems/<problem>/solutions/pkit_*.py`, no model."""
    return record.get("model") is None and PurePosixPath(record["solution"]).name.startswith("pkit_")


def pkit_solution_records(records: Iterable[dict]) -> list[dict]:
    """The records of pkit's own solutions among `records`, the last one per (problem, solution), in that order."""
    return latest(records, is_pkit_solution, lambda r: (r["problem"], r["solution"]))


def solution_frame(records: Iterable[dict]) -> pd.DataFrame:
    """The pkit solutions table (SOLUTION_COLUMNS) from JSONL records of candidates (any, e.g. pkit's solutions)."""
    from .records import first_line

    rows = [{**_run_columns(r), "solution": r["solution"], "correct": r["status"].startswith("correct"),
             **_timing_columns(r, "sol"), "ref_time_ms_median": r["ref_time_ms"], "speedup": r["speedup"],
             "rotations": r["rotations"], "trials": r["trials"], "trials_passed": r["trials_passed"],
             "max_abs_err": r["max_abs_err"], "flags": " ".join(r["flags"]), "reason": first_line(r["error"])}
            for r in records]
    return pd.DataFrame(rows, columns=list(SOLUTION_COLUMNS))


def record_pkit_solutions(jsonl_paths: Iterable[str | Path], *, machine: str | None = None,
                          experiment: str = "pkit_solutions") -> pd.DataFrame:
    """Record `results/<machine>/pkit_solutions.{csv,json}` from the JSONL records of one or more runs of
    `pkit eval --perf` over the shipped solutions (a sweep split into runs; records of other candidates, such
    as torch_alt.py or references, are ignored; a solution evaluated twice keeps its last record). Provenance
    as in `record_baselines`: the measuring machine's, from the records. One row per (problem, pkit solution),
    failed ones included (`correct` False, `reason`), with both rooflines of the solution's time. Returns the frame.
    """
    chosen = pkit_solution_records(_read(jsonl_paths))
    if not chosen or any(r["timing"] != "full" for r in chosen):
        raise ValueError("jsonl_paths: expected records of pkit solutions (problems/*/solutions/pkit_*.py) with "
                         "full timing (pkit eval --perf, default --solutions)")
    return _record_sweep(experiment, solution_frame(chosen), chosen, machine, "sol_time_ms_median")


def latest(records: Iterable[dict], keep: Callable[[dict], bool], key: Callable[[dict], object]) -> list[dict]:
    """The records that `keep` accepts, the last one per `key` (a later run of a sweep wins), in order of `key`."""
    chosen = {key(r): r for r in records if keep(r)}
    return [chosen[k] for k in sorted(chosen)]


def _read(jsonl_paths: Iterable[str | Path]) -> list[dict]:
    """Every record of the JSONL files, in order."""
    from .records import read_jsonl

    return [r for path in jsonl_paths for r in read_jsonl(path)]


def _record_sweep(experiment: str, frame: pd.DataFrame, records: list[dict], machine: str | None,
                  time_column: str) -> pd.DataFrame:
    """Record `frame` (built from `records`) with each row against both ceilings (`roofline_report` of
    `time_column`), under the provenance of the machine that measured the records; returns the recorded frame."""
    from .. import results

    provenance = measured_on(records)
    # the records' own columns first, then each problem against both ceilings, the measuring machine's measured
    # ones where its ceilings.csv is recorded
    frame = roofline_report(frame, discover(), time_column=time_column, machine=machine or provenance.get("machine"))
    results.record(experiment, frame, _sweep_parameters(records), machine=machine, measured_on=provenance)
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
    """`python -m pkit.harness.baseline {pkit,pkb,solutions} RECORDS.jsonl ... [--machine SLUG]`: record baselines
    (pkit problems' references), pkb_references or pkit_solutions (pkit's own solutions) from the JSONL records
    of sweeps. A RECORDS path that is not a regular file, a line that is not a record and records that do not
    make one table are one line on stderr, exit code 2, before anything is recorded."""
    from ..arguments import OneLineParser
    from .paths import check_input

    recorders = {"pkit": record_baselines, "pkb": record_pkb_references, "solutions": record_pkit_solutions}
    parser = OneLineParser(prog="python -m pkit.harness.baseline")
    parser.add_argument("what", choices=tuple(recorders))
    parser.add_argument("records", nargs="+", type=Path)
    parser.add_argument("--machine", default=None)
    args = parser.parse_args(argv)
    try:
        for path in args.records:
            check_input(path, "RECORDS")
        frame = recorders[args.what](args.records, machine=args.machine)
    except ValueError as e:
        parser.error(" ".join(str(e).split()))
    print(frame.to_string(index=False, max_colwidth=60))
    return 0

if __name__ == "__main__":
    raise SystemExit(main())
