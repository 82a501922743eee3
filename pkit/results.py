"""Recorded results: `results/<machine>/<experiment>.csv` plus a `.json` provenance file, and replay.

A GPU run writes both files through `record`; replay reads them back through `load`. Both use
`results_root()`: `results/` at the repository root, or $PKIT_RESULTS when set (tests point it at a
temporary folder). Numbers in `results/` come only from `record` called by code that measured them. When
pkit renames something a result names (a mechanism, an implementation), the recorded names may be mapped
once to the new ones, numbers untouched; the `.json` then carries a `renamed` entry (column → {old: new}, the
commit that introduced the new names, a note), which `describe` mentions.

Example:
    >>> import pandas as pd, pkit.results as R
    >>> df = pd.DataFrame({"bytes": [1 << 20], "bandwidth_GBps": [1.0]})      # doctest: +SKIP
    >>> R.record("demo", df, {"sizes": [1 << 20]}, machine="h200x2-nv18")    # doctest: +SKIP
    >>> R.load("demo", "h200x2-nv18").frame                                  # doctest: +SKIP
"""
from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pandas as pd

from .errors import PkitError

REPO_ROOT = Path(__file__).resolve().parents[1]
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def results_root() -> Path:
    """Where recorded results live: $PKIT_RESULTS, else `results/` at the repository root."""
    return Path(os.environ.get("PKIT_RESULTS", REPO_ROOT / "results"))


def _check_name(what: str, value: str) -> str:
    if not isinstance(value, str) or not _NAME.match(value):
        raise ValueError(f"{what}: expected a name of letters, digits, '.', '_' or '-', got {value!r}")
    return value


def git_commit() -> str:
    """The pkit checkout's commit (with '-dirty' when tracked files changed), $PKIT_COMMIT, or 'unknown'.

    $PKIT_COMMIT serves copies of the tree that travel without `.git` (e.g. a working copy copied to a GPU host).
    """
    if os.environ.get("PKIT_COMMIT"):
        return os.environ["PKIT_COMMIT"]
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True,
                             timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                ":!results", ":!figures"],  # outputs being rewritten do not make the code dirty
                               cwd=REPO_ROOT, capture_output=True, text=True, timeout=10).stdout.strip()
        return (sha + ("-dirty" if dirty else "")) if sha else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _versions() -> dict:
    out = {"python": platform.python_version()}
    for mod in ("numpy", "pandas", "cupy", "torch", "matplotlib"):
        try:
            out[mod] = __import__(mod).__version__
        except Exception:  # noqa: BLE001 - an absent or broken optional package is recorded as absent
            out[mod] = None
    try:
        import warnings

        import cupy

        out["cuda_runtime"] = cupy.cuda.runtime.runtimeGetVersion()
        out["cuda_driver"] = cupy.cuda.runtime.driverGetVersion()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # CuPy warns when libnccl is absent (CPU machines)
            from cupy.cuda import nccl

            out["nccl"] = nccl.get_version()
    except Exception:  # noqa: BLE001
        pass
    return out


def provenance(parameters: dict | None = None) -> dict:
    """Everything needed to say where a number came from: GPUs, links, driver, versions, commit, UTC time."""
    from . import gpus as _devices

    gpus = _devices.devices()
    topo = _devices.topology() if gpus else None
    return {
        "machine": machine_slug(),
        "gpus": [g.name for g in gpus],
        "gpu_count": len(gpus),
        "driver": _devices.driver_version(),
        "link_matrix": topo.link_labels() if topo else [],
        "versions": _versions(),
        "pkit_commit": git_commit(),
        "host": platform.node(),
        "utc_time": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "parameters": parameters or {},
    }


def machine_slug() -> str:
    """A stable name for this machine's GPU set, e.g. 'h200x2-nv18'; 'cpu' when there is no GPU."""
    from . import gpus as _devices

    gpus = _devices.devices()
    if not gpus:
        return "cpu"
    model = re.sub(r"^nvidia\s+", "", gpus[0].name.lower()).split()[0]
    slug = f"{re.sub(r'[^a-z0-9]', '', model)}x{len(gpus)}"
    if len(gpus) > 1:
        links = _devices.topology().nvlink_counts()
        fewest = min(links[i][j] for i in range(len(gpus)) for j in range(len(gpus)) if i != j)
        slug += f"-nv{fewest}" if fewest else "-pcie"
    return slug


@dataclass
class Recorded:
    """A recorded result: the measurements and where they came from."""

    frame: pd.DataFrame
    provenance: dict
    csv_path: Path


def record(experiment: str, frame: pd.DataFrame, parameters: dict | None = None, *,
           machine: str | None = None, root: Path | None = None, measured_on: dict | None = None) -> Recorded:
    """Write `frame` and its provenance to `<root>/<machine>/<experiment>.{csv,json}`; returns what was written.

    `measured_on` is the `provenance()` of the machine that measured the rows, when the table is built
    elsewhere from records that carry it (e.g. JSONL files brought back from a GPU host): then it is the
    table's provenance (machine, GPUs, versions), `machine` defaults to its slug, and the commit and time of
    this writing are added under `recorded_by`.
    """
    if not isinstance(frame, pd.DataFrame) or frame.empty:
        raise ValueError(f"frame: expected a non-empty pandas DataFrame, got {type(frame).__name__}")
    if measured_on is not None:
        machine = machine or measured_on.get("machine")
    machine = _check_name("machine", machine or machine_slug())
    folder = Path(root or results_root()) / machine
    folder.mkdir(parents=True, exist_ok=True)
    csv_path = folder / f"{_check_name('experiment', experiment)}.csv"
    frame.to_csv(csv_path, index=False, float_format="%.6g")
    prov = provenance(parameters)
    if measured_on is not None:
        prov = dict(measured_on, parameters=parameters or {},
                    recorded_by={"pkit_commit": prov["pkit_commit"], "utc_time": prov["utc_time"]})
    prov.update(experiment=experiment, rows=len(frame), columns=list(frame.columns))
    (folder / f"{experiment}.json").write_text(json.dumps(prov, indent=2, sort_keys=True, default=str) + "\n")
    return load(experiment, machine, root=root)  # what replay will see, so both modes draw the same figure


def is_recorded(experiment: str, machine: str, *, root: Path | None = None) -> bool:
    """Whether `<root>/<machine>/<experiment>.csv` and its `.json` both exist (what `load` reads)."""
    folder = Path(root or results_root()) / _check_name("machine", machine)
    return all((folder / f"{_check_name('experiment', experiment)}{s}").exists() for s in (".csv", ".json"))


def load(experiment: str, machine: str, *, root: Path | None = None) -> Recorded:
    """Read back a recorded result; a clear error names the missing file and what is there instead."""
    folder = Path(root or results_root()) / _check_name("machine", machine)
    csv_path = folder / f"{_check_name('experiment', experiment)}.csv"
    json_path = csv_path.with_suffix(".json")
    if not is_recorded(experiment, machine, root=root):
        have = sorted(p.stem for p in folder.glob("*.csv")) if folder.exists() else []
        machines = sorted(p.name for p in folder.parent.glob("*") if p.is_dir()) if folder.parent.exists() else []
        raise PkitError(f"no recorded result {experiment!r} for machine {machine!r} (looked for {csv_path} and "
                        f"its .json); recorded there: {have or 'nothing'}; machines with results: {machines}")
    return Recorded(pd.read_csv(csv_path), json.loads(json_path.read_text()), csv_path)


COMMIT_CHARS = 7  # characters of a commit hash in `describe`'s lines (git's short form)


def hardware_words(provenance: dict, none: str = "no GPU") -> str:
    """The GPUs and links of recorded provenance in words: each GPU model with its count, then the kinds of link
    between distinct GPUs; `none` where it lists no GPU.

    Example:
        >>> hardware_words({"gpus": ["NVIDIA H200"] * 2, "link_matrix": [["X", "NV18"], ["NV18", "X"]]})
        '2× NVIDIA H200, NV18 links'
        >>> hardware_words({"gpus": []}, none="CPU only, no GPU")
        'CPU only, no GPU'
    """
    gpus = list(provenance.get("gpus") or [])
    words = ", ".join(f"{gpus.count(g)}× {g}" for g in dict.fromkeys(gpus)) or none
    matrix = provenance.get("link_matrix") or []
    links = sorted({str(v) for i, row in enumerate(matrix) for j, v in enumerate(row) if i != j and v not in ("X", "")})
    return words + (f", {'/'.join(links)} links" if links else "")


def describe(provenance: dict) -> str:
    """One line saying where recorded numbers came from (machine, GPUs, links, pkit commit, UTC time), and when
    names in them were updated once to pkit's current vocabulary (a `renamed` entry: per column, old name → new
    name, with the commit that introduced the new names; the numbers are untouched). Commits are shown at
    `COMMIT_CHARS` characters.

    Example:
        >>> describe({"machine": "h200x2-nv18", "gpus": ["NVIDIA H200"] * 2, "link_matrix": [["X", "NV18"],
        ...           ["NV18", "X"]], "pkit_commit": "0123456789abcdef", "utc_time": "2026-11-29T17:58:07Z",
        ...           "renamed": {"commit": "fedcba9876543210", "mechanism": {"memcpy": "ce"}, "note": "..."}})
        'h200x2-nv18: GPUs 2× NVIDIA H200, NV18 links, pkit 0123456, recorded 2026-11-29 17:58 UTC; mechanism names updated at fedcba9'
        >>> describe({"machine": "h200x1", "gpus": ["NVIDIA H200"], "link_matrix": [["X"]], "pkit_commit": "6748b27"})
        'h200x1: GPUs 1× NVIDIA H200, pkit 6748b27'
    """
    parts = [f"GPUs {hardware_words(provenance, none='none')}", f"pkit {str(provenance.get('pkit_commit'))[:COMMIT_CHARS]}"]
    when = provenance.get("utc_time")
    parts += [f"recorded {when[:10]} {when[11:16]} UTC"] if when else []
    line = f"{provenance.get('machine')}: " + ", ".join(parts)
    renamed = provenance.get("renamed")
    if renamed:
        columns = " and ".join(c for c in renamed if c not in ("commit", "note"))
        line += f"; {columns} names updated at {str(renamed.get('commit'))[:COMMIT_CHARS]}"
    return line


def measure_or_replay(experiment: str, measure: Callable[[], pd.DataFrame], *, mode: str, machine: str,
                      parameters: dict | None = None, root: Path | None = None) -> Recorded:
    """Run `measure()` and record it (mode 'measure'), or read the recorded result back (mode 'replay').

    Mode 'auto' is resolved by the notebook runner before it reaches here; it is accepted and means
    measure when `machine` is this machine, else replay.
    """
    if mode == "auto":
        mode = "measure" if machine == machine_slug() else "replay"
    if mode == "measure":
        return record(experiment, measure(), parameters, machine=machine, root=root)
    if mode == "replay":
        return load(experiment, machine, root=root)
    raise ValueError(f"mode: expected 'auto', 'measure' or 'replay', got {mode!r}")
