"""Run the notebooks in `notebooks/` through papermill: measure on GPUs when present, else replay.

Each notebook has a cell tagged `parameters` with at least `mode` and `machine`, and may declare in its
metadata how many GPUs its measurements need (`{"pkit": {"gpus": 2}}`; 0 or absent: it measures nothing) and
the recorded experiments it reads back (`"replays": ["overlap_gemm", ...]`, optionally `"record": "<command>"`
saying how to record them). A notebook that would read recorded results (it replays, or it measures nothing)
while one of its `replays` is not recorded for the machine is skipped with one line naming what is missing and
how to record it (`skip_reason`), instead of failing. Executed copies go to `build/notebooks/`, outside git.

Example:
    >>> from pkit.notebooks import run_all
    >>> run_all(mode="replay", only=["00_quickstart"])              # doctest: +SKIP
"""
from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from .errors import PkitError
from .results import REPO_ROOT

NOTEBOOK_DIR = REPO_ROOT / "notebooks"
BUILD_DIR = REPO_ROOT / "build" / "notebooks"
DEFAULT_MACHINE = "h200x2-nv18"  # the machine whose recorded results replay uses by default
MODES = ("auto", "measure", "replay")


class NotebookFailed(PkitError):
    """A notebook raised; the message names the notebook, the cell and the error."""


@dataclass
class NotebookRun:
    name: str
    mode: str
    seconds: float
    output: Path | None  # the executed copy; None when skipped
    skipped: str = ""  # why the notebook did not run (`skip_reason`); empty when it ran


def discover(only: Sequence[str] | None = None) -> list[Path]:
    """Notebooks in run order; `only` selects by stem or prefix (e.g. '00' or '00_quickstart')."""
    found = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
    if not only:
        return found
    chosen = [p for p in found if any(p.stem == o or p.stem.startswith(o) for o in only)]
    unknown = [o for o in only if not any(p.stem == o or p.stem.startswith(o) for p in found)]
    if unknown:
        raise ValueError(f"only: no notebook matches {unknown}; notebooks: {[p.stem for p in found]}")
    return chosen


def pkit_metadata(path: Path) -> dict:
    """The notebook's `pkit` metadata (gpus, replays, record), {} when it has none."""
    import nbformat

    return dict(nbformat.read(path, as_version=4).metadata.get("pkit", {}))


def gpus_needed(path: Path) -> int:
    """How many GPUs the notebook's measurements need: its metadata `{"pkit": {"gpus": N}}`, 0 when absent."""
    return int(pkit_metadata(path).get("gpus", 0))


def skip_reason(path: Path, mode: str, machine: str) -> str:
    """Why the notebook at `path` cannot run in `mode` ('measure' or 'replay', as resolved) for `machine`, in
    one line; '' when it can. A notebook reads recorded results when it replays, and always when it measures
    nothing (`gpus` 0); then every experiment its metadata lists under `replays` must be recorded for `machine`
    (`pkit.results.is_recorded`, under `pkit.results.results_root()`). The line names the missing experiments
    and the machine, and says how to record them: the metadata's `record` command, and for a notebook that
    measures, the run in measure mode on a machine with its GPUs.

    Example:
        >>> import nbformat, tempfile, pathlib
        >>> nb = nbformat.v4.new_notebook(metadata={"pkit": {"gpus": 2, "replays": ["no_such_experiment"]}})
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "05_study.ipynb"; nbformat.write(nb, path)
        >>> print(skip_reason(path, "replay", "h200x2-nv18"))  # doctest: +NORMALIZE_WHITESPACE
        no recorded no_such_experiment for machine 'h200x2-nv18'; run the notebook in measure mode on a machine
        with 2 GPUs: pkit figures --mode measure --only 05_study
        >>> skip_reason(path, "measure", "h200x2-nv18")  # measuring records them
        ''
    """
    from .results import is_recorded

    meta = pkit_metadata(path)
    gpus = int(meta.get("gpus", 0))
    if mode == "measure" and gpus:
        return ""
    missing = [e for e in meta.get("replays", []) if not is_recorded(e, machine)]
    if not missing:
        return ""
    them = "them" if len(missing) > 1 else "it"
    how = [f"record {them} with: {meta['record']}"] if meta.get("record") else []
    if gpus:
        how.append(f"{'or ' if how else ''}run the notebook in measure mode on a machine with {gpus} "
                   f"GPU{'s' if gpus > 1 else ''}: pkit figures --mode measure --only {path.stem}")
    return f"no recorded {', '.join(missing)} for machine {machine!r}; " + ("; ".join(how) or f"record {them} first")


def strip_outputs(path: str | Path) -> bool:
    """Remove every code cell's outputs and execution count from the notebook at `path`, in place, as
    notebooks are kept in git; returns whether anything changed.

    Example:
        >>> import nbformat, tempfile, pathlib
        >>> nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1", execution_count=1,
        ...     outputs=[nbformat.v4.new_output("execute_result", {"text/plain": "2"}, execution_count=1)])])
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "study.ipynb"; nbformat.write(nb, path)
        >>> strip_outputs(path), strip_outputs(path), nbformat.read(path, as_version=4).cells[0].outputs
        (True, False, [])
    """
    import nbformat

    nb = nbformat.read(path, as_version=4)
    changed = False
    for cell in nb.cells:
        if cell.cell_type == "code" and (cell.outputs or cell.execution_count is not None):
            cell.outputs, cell.execution_count, changed = [], None, True
    if changed:
        nbformat.write(nb, path)
    return changed


def resolve_mode(mode: str, needed: int) -> str:
    """'auto' → 'measure' when this machine has the GPUs the notebook measures on, else 'replay'."""
    if mode not in MODES:
        raise ValueError(f"mode: expected one of {MODES}, got {mode!r}")
    if mode != "auto":
        return mode
    from .gpus import devices

    return "measure" if needed and len(devices()) >= needed else "replay"


def run_notebook(path: Path, mode: str, machine: str | None = None, parameters: dict | None = None) -> NotebookRun:
    """Execute one notebook, or skip it when `skip_reason` gives a reason (the run's `skipped`); raise
    NotebookFailed naming the cell that failed."""
    import papermill as pm

    from .results import machine_slug

    resolved = resolve_mode(mode, gpus_needed(path))
    machine = machine or (machine_slug() if resolved == "measure" else DEFAULT_MACHINE)
    reason = skip_reason(path, resolved, machine)
    if reason:
        return NotebookRun(path.stem, resolved, 0.0, None, reason)
    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    output = BUILD_DIR / path.name
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))
    start = time.perf_counter()
    try:
        pm.execute_notebook(str(path), str(output), parameters={"mode": resolved, "machine": machine,
                                                                **(parameters or {})},
                            kernel_name="python3", progress_bar=False, cwd=str(path.parent), log_output=False)
    except pm.PapermillExecutionError as e:
        raise NotebookFailed(f"notebook {path.name} failed in cell {e.cell_index} (execution count {e.exec_count}): "
                             f"{e.ename}: {e.evalue}\n  executed copy with the traceback: {output}") from None
    return NotebookRun(path.stem, resolved, time.perf_counter() - start, output)


def run_all(mode: str = "auto", only: Sequence[str] | None = None, machine: str | None = None,
            stream=sys.stderr) -> list[NotebookRun]:
    """Run every selected notebook in order, printing one progress line per notebook (for a skipped one:
    'skipped: ' and the reason)."""
    paths = discover(only)
    runs = []
    for i, path in enumerate(paths, 1):
        print(f"[{i}/{len(paths)}] {path.stem} ...", end="", file=stream, flush=True)
        run = run_notebook(path, mode, machine)
        print(f" skipped: {run.skipped}" if run.skipped else f" {run.mode}, {run.seconds:.1f} s", file=stream,
              flush=True)
        runs.append(run)
    return runs
