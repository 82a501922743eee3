"""Run the notebooks in `notebooks/` through papermill: measure what this machine can, replay the rest.

Each notebook has a cell tagged `parameters` with at least `mode` and `machine`. What it measures and needs comes
from its study's entry in `pkit.studies.STUDIES` (the recorded experiments, the GPUs each needs): in mode 'auto'
a notebook measures when this machine has the GPUs its study needs and replays otherwise; asked to measure where
it cannot, it replays and says what measuring needs. A notebook that would read recorded results while one of
its study's experiments is not recorded for the machine (and that machine could have recorded it) is skipped
with one line naming what is missing and how to record it (`skip_reason`), instead of failing. Figures of a
machine other than `pkit.studies.FIGURES_MACHINE` go to `figures/<machine>/`. Executed copies go to
`build/notebooks/`, outside git, beside the logs of the kernels that ran them (the kernels' own warnings stay
out of the progress lines; a failure names the log): the notebooks that replay share one kernel
(`pkit.notebook_kernel.ReplayKernel`, `replay.kernel.log`), one that measures has its own (`<name>.kernel.log`).

Example:
    >>> from pkit.notebooks import run_all
    >>> run_all(mode="replay", only=["00_quickstart"])              # doctest: +SKIP
"""
from __future__ import annotations

import json
import os
import sys
import textwrap
import time
import warnings
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from . import studies
from .errors import PkitError
from .notebook_kernel import ReplayKernel, kernel_manager
from .results import REPO_ROOT

NOTEBOOK_DIR = REPO_ROOT / "notebooks"
BUILD_DIR = REPO_ROOT / "build" / "notebooks"
DEFAULT_MACHINE = studies.FIGURES_MACHINE  # the machine whose recorded results replay uses by default
MODES = ("auto", "measure", "replay")
LINE_WIDTH = 120  # characters per progress line of `run_all`, but with verbose


class NotebookFailed(PkitError):
    """A notebook raised; the message names the notebook, the cell and the error."""


@dataclass
class NotebookRun:
    name: str
    mode: str
    seconds: float
    output: Path | None  # the executed copy; None when skipped
    skipped: str = ""  # why the notebook did not run (`skip_reason`); empty when it ran
    machine: str = ""  # whose results it measured or replayed
    note: str = ""  # what this machine could not measure, in one line; empty when nothing
    figures: tuple = ()  # the figures it saved, each (name, the machines whose results it shows: a tuple)


def discover(only: Sequence[str] | None = None) -> list[Path]:
    """Notebooks in run order; `only` selects by stem or prefix (e.g. '00' or '00_quickstart'); ValueError naming
    --only for a name that matches none."""
    found = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
    if not only:
        return found
    chosen = [p for p in found if any(p.stem == o or p.stem.startswith(o) for o in only)]
    unknown = [o for o in only if not any(p.stem == o or p.stem.startswith(o) for p in found)]
    if unknown:
        names = f"{found[0].stem} to {found[-1].stem} in {NOTEBOOK_DIR}" if found else f"none in {NOTEBOOK_DIR}"
        raise ValueError(f"--only: expected notebook stems or prefixes ({names}), got {' '.join(unknown)}")
    return chosen


def check_arguments(mode: str, only: Sequence[str] | None, machine: str | None) -> None:
    """ValueError naming the option, before any notebook runs: an `only` name that matches no notebook, a
    `machine` with no recorded results, or 'measure' asked of a machine without GPUs."""
    from .results import results_root

    discover(only)
    recorded = sorted(p.name for p in results_root().iterdir() if p.is_dir()) if results_root().is_dir() else []
    if machine is not None and machine not in recorded:
        raise ValueError(f"--machine: expected a machine with recorded results ({', '.join(recorded) or 'none'} "
                         f"under {results_root()}), got {machine!r}")
    if mode == "measure" and not studies.Machine.here().gpus:
        raise ValueError("--mode: expected a machine with GPUs for measure, got none here; replay the recorded "
                         "results with --mode replay (or auto)")


def study_of(path: Path) -> studies.Study:
    """The registry entry of the notebook at `path`; a notebook no study names measures nothing."""
    return studies.for_notebook(path.stem) or studies.Study(path.stem, "", "", path.stem, gpus=0)


def skip_reason(path: Path, mode: str, machine: str, width: int | None = None) -> str:
    """Why the notebook at `path` cannot run in `mode` ('measure' or 'replay', as resolved) for `machine`, in
    one line; '' when it can. A notebook reads recorded results when it replays, and always when its study
    measures nothing; then every experiment of its study that `machine` could have measured (it has the GPUs
    the experiment needs), but those marked optional, must be recorded for `machine`
    (`pkit.results.is_recorded`). The line names the missing
    experiments and the machine, and says how to record them: the study's `record` command, and for a study that
    measures, the run in measure mode on a machine with its GPUs. With `width`, the same reason in at most `width`
    characters where it can be (`brief_reason`).

    Example:
        >>> print(skip_reason(NOTEBOOK_DIR / "06_roofline_gap.ipynb", "replay", "h200x9-nv18"))  # doctest: +ELLIPSIS
        no recorded ceilings, baselines, pkit_solutions for machine 'h200x9-nv18'; record them with: python -m ...
        >>> print(skip_reason(NOTEBOOK_DIR / "06_roofline_gap.ipynb", "replay", "h200x9-nv18", width=80))
        no recorded ceilings and 2 more for h200x9-nv18 (--verbose: how to record)
        >>> skip_reason(NOTEBOOK_DIR / "02_interconnect_hierarchy.ipynb", "measure", "h200x9-nv18")  # it records them
        ''
        >>> print(skip_reason(NOTEBOOK_DIR / "01_compute_vs_network.ipynb", "replay", "h200x9"))  # doctest: +ELLIPSIS
        no recorded quickstart for machine 'h200x9', the results it shows; record them with their studies: ...
    """
    from .results import is_recorded

    study = study_of(path)
    gpus = study.notebook_gpus
    if mode == "measure" and gpus:
        return ""
    if machine != DEFAULT_MACHINE and not study.experiments and not study.reads:
        return f"shows no machine's recorded results, so nothing of {machine}: its figures are the committed set's"
    target = studies.Machine.from_slug(machine)
    plan = study.requires(target)
    if gpus and not plan.can_measure:
        reason = (f"study {study.name!r} needs {plan.needs}; {machine} has {target.gpus}, so nothing of it was "
                  "recorded there")
        return reason if width is None else textwrap.shorten(reason, width, placeholder=" … (--verbose)")
    if not gpus and study.reads and not any(is_recorded(e, machine) for e in study.reads):
        return unread_reason(study, machine, width)
    missing = [p.experiment for p in study.parts if not p.optional and not is_recorded(p.experiment, machine)
               and (not p.gpus or not p.lacking(target) or not gpus)]
    if not missing:
        return ""
    if width is not None:
        return brief_reason(missing, machine, width)
    them = "them" if len(missing) > 1 else "it"
    how = [f"record {them} with: {study.record}"] if study.record else []
    if gpus:
        how.append(f"{'or ' if how else ''}run the notebook in measure mode on a machine with {gpus} "
                   f"GPU{'s' if gpus > 1 else ''}: pkit figures --mode measure --only {path.stem}")
    return f"no recorded {', '.join(missing)} for machine {machine!r}; " + ("; ".join(how) or f"record {them} first")


def unread_reason(study: studies.Study, machine: str, width: int | None = None) -> str:
    """Why a study that measures nothing cannot replay for `machine`: none of the other studies' results it shows
    (`Study.reads`) is recorded there (one of them is enough: it shows what there is). With `width`, in at most
    `width` characters where it can be (`brief_reason`)."""
    if width is not None:
        return brief_reason(list(study.reads), machine, width)
    recorders = dict.fromkeys(studies.for_experiment(e)[0].name for e in study.reads)
    return (f"no recorded {', '.join(study.reads)} for machine {machine!r}, the results it shows; record them with "
            f"their studies: {', '.join(recorders)}")


def brief_reason(missing: Sequence[str], machine: str, width: int) -> str:
    """'No recorded <experiments> for <machine>' in at most `width` characters where it can be: as many of the
    `missing` experiments as fit, then how many more, and where the full reason is (`pkit figures --verbose`).

    Example:
        >>> brief_reason(["ceilings", "pkit_solutions"], "h200x2-nv18", 90)
        'no recorded ceilings, pkit_solutions for h200x2-nv18 (--verbose: how to record)'
        >>> brief_reason(["ceilings", "pkit_solutions"], "h200x2-nv18", 78)
        'no recorded ceilings and 1 more for h200x2-nv18 (--verbose: how to record)'
    """
    def line(n: int) -> str:
        more = f" and {len(missing) - n} more" if n < len(missing) else ""
        return f"no recorded {', '.join(missing[:n])}{more} for {machine} (--verbose: how to record)"

    return next((line(n) for n in range(len(missing), 0, -1) if len(line(n)) <= width), line(1))


def strip_outputs(path: str | Path) -> bool:
    """Remove every code cell's outputs and execution count from the notebook at `path`, in place, as
    notebooks are kept in git, and give every cell an id where one lacks it (nbformat warns about cells without
    one); returns whether anything changed.

    Example:
        >>> import nbformat, tempfile, pathlib
        >>> nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1 + 1", execution_count=1,
        ...     outputs=[nbformat.v4.new_output("execute_result", {"text/plain": "2"}, execution_count=1)])])
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "study.ipynb"; nbformat.write(nb, path)
        >>> strip_outputs(path), strip_outputs(path), nbformat.read(path, as_version=4).cells[0].outputs
        (True, False, [])
    """
    import nbformat
    from nbformat.warnings import MissingIDFieldWarning

    changed = any("id" not in cell for cell in json.loads(Path(path).read_text())["cells"])
    with warnings.catch_warnings():  # reading gives the missing ids, and writing keeps them
        warnings.simplefilter("ignore", MissingIDFieldWarning)
        nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code" and (cell.outputs or cell.execution_count is not None):
            cell.outputs, cell.execution_count, changed = [], None, True
    if changed:
        nbformat.write(nb, path)
    return changed


def resolve_mode(mode: str, study: studies.Study | int, machine: studies.Machine | None = None) -> tuple[str, str]:
    """(the mode a notebook runs in, a note): 'auto' → 'measure' when `machine` (default: this one) has the GPUs
    `study` needs to measure (a Study, or that many GPUs), else 'replay'; 'measure' where it cannot → 'replay',
    the note saying what measuring needs."""
    if mode not in MODES:
        raise ValueError(f"mode: expected one of {MODES}, got {mode!r}")
    if isinstance(study, int):
        study = studies.Study("notebook", "", "", "notebook", (studies.Part("notebook", study),) if study else (),
                              gpus=study)
    if mode == "replay" or not study.notebook_gpus:
        return "replay", ""
    plan = study.requires(machine or studies.Machine.here())
    if plan.can_measure:
        return "measure", plan.line()
    return "replay", plan.line() if mode == "measure" else ""


@contextmanager
def _environment(**values: str):
    """Set environment variables for the kernels started inside, restoring them after."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_notebook(path: Path, mode: str, machine: str | None = None, parameters: dict | None = None,
                 kernel: ReplayKernel | None = None) -> NotebookRun:
    """Execute one notebook, or skip it when `skip_reason` gives a reason (the run's `skipped`); raise
    NotebookFailed naming the cell that failed and the kernel's log. Its figures go to
    `pkit.studies.figures_folder` for the machine whose results it shows; the executed copy to `BUILD_DIR`. A
    notebook that replays runs in `kernel` when one is given (its log is that kernel's); else, and always when
    it measures, in a kernel of its own, whose log is `BUILD_DIR/<name>.kernel.log`."""
    import papermill as pm

    from .figures import LOG_VARIABLE, figures_root
    from .results import machine_slug

    resolved, note = resolve_mode(mode, study_of(path))
    machine = machine_slug() if resolved == "measure" else (machine or DEFAULT_MACHINE)
    reason = skip_reason(path, resolved, machine)
    if reason:
        return NotebookRun(path.stem, resolved, 0.0, None, reason, machine, note)
    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    output = BUILD_DIR / path.name
    saved = BUILD_DIR / f"{path.stem}.figures.jsonl"
    saved.write_text("")
    environment = {"PYTHONPATH": _pythonpath(), "PKIT_FIGURES": str(studies.figures_folder(figures_root(), machine)),
                   LOG_VARIABLE: str(saved)}
    shared = kernel if resolved == "replay" else None
    log_path = Path(shared.log.name) if shared else BUILD_DIR / f"{path.stem}.kernel.log"
    start = time.perf_counter()
    with ExitStack() as stack:
        if shared:
            shared.prepare({**os.environ, **environment})
            stack.callback(shared.release)
            kernel_args = {"km": shared.manager}
        else:
            stack.enter_context(_environment(**environment))
            kernel_args = {"kernel_manager_class": kernel_manager(stack.enter_context(open(log_path, "w")))}
        try:
            # papermill writes the executed copy as each cell starts and ends: worth it for a measurement's progress,
            # not for a replay of seconds, whose copy is written once at its end (or at the cell that failed)
            _execute(pm, str(path), str(output), attempts=1 if shared else KERNEL_START_ATTEMPTS,
                     parameters={"mode": resolved, "machine": machine, **(parameters or {})}, kernel_name="python3",
                     progress_bar=False, cwd=str(path.parent), log_output=False,
                     request_save_on_cell_execute=resolved == "measure", **kernel_args)
        except pm.PapermillExecutionError as e:
            raise NotebookFailed(f"notebook {path.name} failed in cell {e.cell_index} (execution count "
                                 f"{e.exec_count}): {e.ename}: {e.evalue}\n  executed copy with the traceback: "
                                 f"{output}\n  the kernel's log: {log_path}") from None
    drawn = tuple((line["figure"], tuple(line["drawn_from"])) for line in
                  map(json.loads, saved.read_text().splitlines()))
    return NotebookRun(path.stem, resolved, time.perf_counter() - start, output, "", machine, note, drawn)


KERNEL_START_ATTEMPTS = 2
"""Starts of a notebook's own kernel: one that dies before answering its first request (a transient seen when
several processes start kernels at once) is started again, once."""


def _execute(pm, source: str, output: str, attempts: int, **options) -> None:
    """papermill's execute_notebook, started again when its kernel died before it answered (RuntimeError from the
    kernel client), up to `attempts` times in all; a failure in a cell is never retried."""
    for attempt in range(1, attempts + 1):
        try:
            pm.execute_notebook(source, output, **options)
            return
        except RuntimeError as e:
            if attempt == attempts or "before replying to kernel_info" not in str(e):
                raise


def _pythonpath() -> str:
    """PYTHONPATH for a notebook's kernel: this checkout first, so that the kernel imports the pkit it runs."""
    return os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))


def describe_run(run: NotebookRun, width: int | None = None) -> str:
    """A run as its progress line ends: what it did, then which machine's recorded results each figure it saved
    shows (`figure_sources`): 'measured on h200x1: 2 figures from h200x1, 93.1 s' (+ what needs more GPUs),
    'replayed: 3 figures from h200x1, 1 figure from no recorded results, 4.0 s', 'replayed h200x2-nv18 (no figure),
    1.0 s', or 'skipped: ' and the reason; with `width`, in at most `width` characters (a skip's reason as
    `skip_reason` shortens it, a note cut short), the full text being for `pkit figures --verbose`.

    Example:
        >>> describe_run(NotebookRun("03", "measure", 61.04, None, machine="h200x1",
        ...                          note="mechanisms_splits needs 2 GPUs with peer access",
        ...                          figures=(("mechanisms_sms", ("h200x1",)), ("mechanisms_sizes", ("h200x1",)))))
        'measured on h200x1: 2 figures from h200x1, 61.0 s; mechanisms_splits needs 2 GPUs with peer access'
        >>> describe_run(NotebookRun("03", "measure", 61.04, None, machine="h200x1",
        ...                          note="mechanisms_splits needs 2 GPUs with peer access; h200x1 has 1"), 72)
        'measured on h200x1 (no figure), 61.0 s; mechanisms_splits … (--verbose)'
    """
    if run.skipped:
        line = f"skipped: {run.skipped}"
    else:
        done = f"measured on {run.machine}" if run.mode == "measure" else "replayed"
        sources = figure_sources(run.figures)
        done = f"{done}: {sources}" if sources else f"{done}{'' if run.mode == 'measure' else ' ' + run.machine} " \
                                                      "(no figure)"
        line = f"{done}, {run.seconds:.1f} s" + (f"; {run.note}" if run.note else "")
    if width is None or len(line) <= width:
        return line
    if run.skipped:
        return "skipped: " + skip_reason(NOTEBOOK_DIR / f"{run.name}.ipynb", run.mode, run.machine,
                                         width - len("skipped: "))
    return textwrap.shorten(line, width, placeholder=" … (--verbose)")


def figure_sources(figures: Sequence[tuple[str, tuple[str, ...]]]) -> str:
    """How many of `figures` (each its name and the machines whose recorded results it shows, as
    `pkit.figures.drawn_from` reads them from its title) show each machine's results, those that show none last.

    Example:
        >>> figure_sources([("a", ("h200x1",)), ("b", ()), ("c", ("h200x1",)), ("d", ("cpu", "h200x1"))])
        '1 figure from cpu + h200x1, 2 figures from h200x1, 1 figure from no recorded results'
    """
    counts: dict[str, int] = {}
    for _, machines in sorted(figures, key=lambda f: (not f[1], f[1])):
        where = " + ".join(machines) or "no recorded results"
        counts[where] = counts.get(where, 0) + 1
    words = [f"{n} figure{'s' if n > 1 else ''} from {where}" for where, n in counts.items()]
    return ", ".join(words)


def run_all(mode: str = "auto", only: Sequence[str] | None = None, machine: str | None = None,
            stream=None, verbose: bool = False, width: int = LINE_WIDTH) -> list[NotebookRun]:
    """Run every selected notebook in order, printing one progress line per notebook (`describe_run`) to `stream`
    (default: sys.stderr at the call), each of at most `width` characters unless `verbose` (then with every reason
    and note in full). The notebooks that replay share one kernel (`ReplayKernel`, its log
    `BUILD_DIR/replay.kernel.log`), started when the first of them runs."""
    stream = stream or sys.stderr
    paths = discover(only)
    runs = []
    with ExitStack() as stack:
        kernel = None
        for i, path in enumerate(paths, 1):
            start = f"[{i}/{len(paths)}] {path.stem} ..."
            print(start, end="", file=stream, flush=True)
            if kernel is None and _replays(path, mode, machine):
                kernel = stack.enter_context(_replay_kernel())
            run = run_notebook(path, mode, machine, kernel=kernel)
            print(f" {describe_run(run, None if verbose else width - len(start) - 1)}", file=stream, flush=True)
            runs.append(run)
    return runs


def _replays(path: Path, mode: str, machine: str | None) -> bool:
    """Whether the notebook at `path` runs (is not skipped) in replay mode."""
    resolved, _ = resolve_mode(mode, study_of(path))
    return resolved == "replay" and not skip_reason(path, resolved, machine or DEFAULT_MACHINE)


@contextmanager
def _replay_kernel():
    """A ReplayKernel started in NOTEBOOK_DIR with this checkout on its PYTHONPATH, its log in BUILD_DIR."""
    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    with open(BUILD_DIR / "replay.kernel.log", "w") as log, ExitStack() as stack:
        with _environment(PYTHONPATH=_pythonpath()):  # the kernel's environment at its start
            kernel = stack.enter_context(ReplayKernel(log, cwd=NOTEBOOK_DIR))
        yield kernel
