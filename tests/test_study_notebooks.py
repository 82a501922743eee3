"""Notebooks 05 (overlap) and 06 (roofline gap), whose GPU results are not recorded yet, run end to end on CPU
against synthetic recorded results (tests/synthetic_results.py: written by the real recording commands with the GPU
work replaced) under a temporary results root, in one kernel as `pkit figures` replays them; their figures go to a
temporary folder, their executed copies to another. What the first recording on 2×H200 will replay, minus the
numbers."""
import ast
import json
import re
import shutil

import numpy as np
import pandas as pd
import pytest

nbformat = pytest.importorskip("nbformat", reason="the notebook tests need nbformat (make install brings it)")
import synthetic_results

from pkit import notebooks, results
from pkit.experiments import overlap
from pkit.experiments.overlap import interference
from pkit.experiments.overlap import emulated as overlap_emulated

pytestmark = pytest.mark.heavy

# What 05's model reads from machines other than the one replayed: the one-GPU calibration and 2×H200's links,
# copied from the repository's real records (notebook 05's `calibration` and `links` parameters).
CALIBRATION = {"h200x1": ("overlap_gemm", "interference_copies", "interference_partition"),
               "h200x2-nv18": ("collectives_pkit_nccl", "mechanisms_sm_sweep", "mechanisms_size_sweep")}


def copy_calibration(results_root) -> None:
    for machine, experiments in CALIBRATION.items():
        (results_root / machine).mkdir(parents=True, exist_ok=True)
        for experiment in experiments:
            for suffix in (".csv", ".json"):
                shutil.copy(notebooks.REPO_ROOT / "results" / machine / f"{experiment}{suffix}", results_root / machine)


def record_overlap(mp, rng, tmp):
    copy_calibration(tmp / "results")
    synthetic_results.record_overlap(mp, rng)


def record_roofline_gap(mp, rng, tmp):
    copy_calibration(tmp / "results")
    synthetic_results.record_roofline_gap(mp, rng, tmp)


RECORDERS = {"05_overlap": record_overlap, "06_roofline_gap": record_roofline_gap}


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    """One kernel for the module's notebooks, as `pkit figures` replays them: brought back before each to what a new
    kernel holds (pkit.notebook_kernel.ReplayKernel); its log in a temporary folder."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(notebooks, "BUILD_DIR", tmp_path_factory.mktemp("kernel"))
        with notebooks._replay_kernel() as shared:
            mp.undo()
            yield shared


@pytest.fixture
def roots(tmp_path, monkeypatch):
    """Results, figures and executed notebooks under tmp_path: nothing of the repository's is read or written."""
    folders = {name: tmp_path / name for name in ("results", "figures", "build")}
    monkeypatch.setenv("PKIT_RESULTS", str(folders["results"]))
    monkeypatch.setenv("PKIT_FIGURES", str(folders["figures"]))
    monkeypatch.setattr(notebooks, "BUILD_DIR", folders["build"])
    return folders


def saved_figures(nb) -> set[str]:
    """The names the notebook passes to figures.save."""
    return {name for cell in nb.cells if cell.cell_type == "code"
            for name in re.findall(r'figures\.save\([^,]+,\s*"([^"]+)"\)', cell.source)}


@pytest.mark.parametrize("stem", sorted(RECORDERS))
def test_notebook_runs_on_synthetic_recorded_results(stem, roots, kernel, tmp_path, monkeypatch):
    path = notebooks.NOTEBOOK_DIR / f"{stem}.ipynb"
    study = notebooks.study_of(path)
    required = [p.experiment for p in study.parts if not p.optional]
    before = notebooks.skip_reason(path, "replay", synthetic_results.MACHINE)
    assert before.startswith("no recorded ") if required else before == ""  # 05's parts are each shown where recorded
    with monkeypatch.context() as mp:  # the stand-ins live only while recording
        RECORDERS[stem](mp, np.random.default_rng(), tmp_path)
    recorded = {p.stem for p in roots["results"].glob("*/*.json")}
    # the one-GPU emulation's parts come from a command of their own; 05 says where they are not recorded
    assert set(study.experiments) - set(overlap_emulated.EXPERIMENTS) <= recorded
    assert notebooks.skip_reason(path, "replay", synthetic_results.MACHINE) == ""

    run = notebooks.run_notebook(path, "replay", synthetic_results.MACHINE, kernel=kernel)  # NotebookFailed: the cell
    executed = nbformat.read(run.output, as_version=4)
    code = [c for c in executed.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code), "a cell did not run"
    assert not [o for c in code for o in c.outputs if o.output_type == "error"]
    expected = saved_figures(executed) - set(overlap_emulated.EXPERIMENTS)  # drawn only where recorded (above)
    assert expected and all(name.startswith(stem[3:].split("_")[0]) for name in expected)
    made = {p.name for p in roots["figures"].iterdir()}
    assert made == {f"{name}{suffix}" for name in expected for suffix in (".png", ".svg")}
    assert all((roots["figures"] / name).stat().st_size > 0 for name in made)


def test_overlap_notebook_replays_what_the_command_line_records(roots, monkeypatch):
    """05's study lists every study the command line records, and the notebook's defaults record the same
    parameters, so a study recorded by `python -m pkit.experiments.overlap ... --record` replays in the notebook."""
    path = notebooks.NOTEBOOK_DIR / "05_overlap.ipynb"
    assert sorted(notebooks.study_of(path).experiments) == sorted(
        [f"overlap_{s}" for s in overlap.MEASUREMENTS] + [f"interference_{p}" for p in interference.PARTS]
        + list(overlap_emulated.EXPERIMENTS))
    cell = next(c for c in nbformat.read(path, as_version=4).cells if "parameters" in c.metadata.get("tags", []))
    defaults = {t.id: ast.literal_eval(node.value) for node in ast.parse(cell.source).body
                for t in node.targets}
    gpus = defaults["gpus"] or (0, 1)  # None: every GPU of the measuring machine (two stand-ins here)
    with monkeypatch.context() as mp:
        synthetic_results.record_overlap(mp, np.random.default_rng(), gpus, defaults["reps"])
    prov = json.loads((roots["results"] / synthetic_results.MACHINE / "overlap_ag_gemm.json").read_text())
    assert prov["parameters"] == overlap.parameters(gpus, defaults["reps"])
    # the synthetic GEMM gate has the columns of the newest record the committed code wrote on a GPU
    committed = notebooks.REPO_ROOT / "results"
    newest = max((results.load("overlap_gemm", p.parent.name, root=committed)
                  for p in committed.glob("*/overlap_gemm.csv")), key=lambda r: r.provenance["utc_time"])
    real = newest.frame
    synthetic = results.load("overlap_gemm", synthetic_results.MACHINE).frame
    assert list(synthetic.columns) == list(real.columns)
    pd.testing.assert_series_equal(synthetic.dtypes, real.dtypes)
