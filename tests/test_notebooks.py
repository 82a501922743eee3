"""`pkit figures --mode replay` runs every notebook from recorded results and rewrites identical figures; a notebook
whose recorded inputs are missing is skipped with the reason."""
import io
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

nbformat = pytest.importorskip("nbformat", reason="the notebook tests need nbformat (make install brings it)")

import pkit
from pkit import lesson, notebooks, results, studies
from pkit.cli import main

pytestmark = pytest.mark.heavy

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def test_notebooks_are_committed_without_outputs_and_have_parameters():
    assert [p.stem for p in NOTEBOOKS][:2] == ["00_quickstart", "01_compute_vs_network"]
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        code = [c for c in nb.cells if c.cell_type == "code"]
        assert all(not c.outputs and c.execution_count is None for c in code), f"{path.name} has outputs"
        tagged = [c for c in code if "parameters" in c.metadata.get("tags", [])]
        assert len(tagged) == 1 and "mode =" in tagged[0].source and "machine =" in tagged[0].source, path.name


@pytest.fixture(scope="module")
def replay(tmp_path_factory):
    """`pkit figures --mode replay` once for the module: (the finished process, the folder its figures went to,
    when it started)."""
    figures_dir = tmp_path_factory.mktemp("figures")
    started = time.time()
    out = subprocess.run([sys.executable, "-m", "pkit.cli", "figures", "--mode", "replay"], cwd=ROOT,
                         capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PKIT_FIGURES": str(figures_dir)})
    assert out.returncode == 0, out.stderr[-3000:]
    return out, figures_dir, started


def test_replay_regenerates_committed_figures_byte_for_byte(replay):
    _, figures_dir, _ = replay
    made = sorted(p.name for p in figures_dir.iterdir())
    assert made, "no figures written"
    for name in made:
        committed = ROOT / "figures" / name
        assert committed.exists(), f"{name} is not committed in figures/"
        assert (figures_dir / name).read_bytes() == committed.read_bytes(), f"{name} differs from figures/{name}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_each_notebook_replays_or_is_skipped_with_its_reason(path, replay):
    """A notebook whose recorded inputs (its metadata's `replays`) are missing is skipped with one line saying
    which and how to record them; every other one ran and left its executed copy."""
    out, _, started = replay
    reason = notebooks.skip_reason(path, "replay", notebooks.DEFAULT_MACHINE)
    if reason:
        line = next(line for line in out.stderr.splitlines() if f" {path.stem} ... " in line)
        assert "skipped: no recorded " in line and "(--verbose: how to record)" in line, line
        pytest.skip(f"{path.stem}: {reason}")
    executed = ROOT / "build" / "notebooks" / path.name
    assert executed.exists() and executed.stat().st_mtime >= started - 1, f"{path.name} did not run"


@pytest.mark.skipif(len(pkit.devices()) >= 1, reason="the lesson's checks run live where there is a GPU")
def test_lesson_replayed_without_gpus_says_what_each_check_needs(replay):
    """Notebook 08 replayed on a machine without GPUs: each exercise's check says it did not run and why, and the
    overlap timeline is the one recorded on 2×H200."""
    executed = nbformat.read(ROOT / "build" / "notebooks" / "08_lesson_multi_gpu_communication.ipynb", as_version=4)
    text = "\n".join(o.get("text", "") + str(o.get("data", {}).get("text/plain", ""))
                     for c in executed.cells if c.cell_type == "code" for o in c.outputs)
    assert text.count("; not run: this machine has") == len(lesson.STEPS)
    assert "recorded on h200x2-nv18" in text and "nothing recorded as 'overlap_timeline'" in text


def test_replay_prints_one_short_line_per_notebook_and_no_kernel_warnings(replay):
    """One progress line per notebook, each of at most 120 characters, and nothing of the kernels' own logs."""
    out, _, _ = replay
    lines = out.stderr.splitlines()
    assert len(lines) == len(NOTEBOOKS), out.stderr
    assert all(len(line) <= notebooks.LINE_WIDTH for line in lines), [line for line in lines if len(line) > 120]
    assert not [w for w in ("without encryption", "IPKernelApp", "MissingIDFieldWarning", "KeyboardInterrupt")
                if w in out.stderr + out.stdout]
    assert len(out.stdout.splitlines()) == 1 and len(out.stdout) <= notebooks.LINE_WIDTH + 1, out.stdout


def test_verbose_prints_each_skip_reason_in_full(tmp_path, monkeypatch, capsys):
    """--verbose: the line of a skipped notebook carries its whole reason (how to record what it lacks)."""
    skipped = [p for p in NOTEBOOKS if notebooks.skip_reason(p, "replay", notebooks.DEFAULT_MACHINE)]
    if not skipped:
        pytest.skip("every notebook's results are recorded")
    monkeypatch.setenv("PKIT_FIGURES", str(tmp_path))
    assert main(["figures", "--mode", "replay", "--verbose", "--only", skipped[0].stem]) == 0
    reason = notebooks.skip_reason(skipped[0], "replay", notebooks.DEFAULT_MACHINE)
    err = capsys.readouterr().err
    assert err == f"[1/1] {skipped[0].stem} ... skipped: {reason}\n", err


def test_notebook_with_unrecorded_replays_is_skipped_with_what_is_missing(tmp_path, monkeypatch):
    folder = tmp_path / "notebooks"
    folder.mkdir()
    monkeypatch.setattr(notebooks, "NOTEBOOK_DIR", folder)
    monkeypatch.setattr(notebooks, "BUILD_DIR", tmp_path / "build")
    monkeypatch.setenv("PKIT_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("PKIT_FIGURES", str(tmp_path / "figures"))
    register(monkeypatch, studies.Study("study", "two parts", "m", "98_study", (studies.Part("study_a", 1),
                                                                               studies.Part("study_b", 2))),
             studies.Study("tables", "built from records", "m", "99_tables", (studies.Part("table", 0),), gpus=0,
                           record="python -m make_table --record"))
    write_notebook(folder / "98_study.ipynb", ["print('ran')"])
    write_notebook(folder / "99_tables.ipynb", ["print('ran')"])
    results.record("study_a", pd.DataFrame({"x": [1]}), machine="m1x2")  # study_b is missing
    stream = io.StringIO()
    runs = notebooks.run_all(mode="replay", machine="m1x2", stream=stream, verbose=True)
    assert [r.skipped != "" for r in runs] == [True, True] and not (tmp_path / "build").exists()
    lines = stream.getvalue().splitlines()
    assert lines[0] == ("[1/2] 98_study ... skipped: no recorded study_b for machine 'm1x2'; run the notebook in "
                        "measure mode on a machine with 1 GPU: pkit figures --mode measure --only 98_study")
    assert lines[1] == ("[2/2] 99_tables ... skipped: no recorded table for machine 'm1x2'; record it with: "
                        "python -m make_table --record")
    assert [notebooks.describe_run(run, 70) for run in runs] == [  # without --verbose: within the width
        "skipped: no recorded study_b for m1x2 (--verbose: how to record)",
        "skipped: no recorded table for m1x2 (--verbose: how to record)"]
    # a notebook that measures nothing reads its tables in any mode; one that measures records its own
    assert notebooks.skip_reason(folder / "99_tables.ipynb", "measure", "m1x2") == lines[1].split("skipped: ")[1]
    assert notebooks.skip_reason(folder / "98_study.ipynb", "measure", "m1x2") == ""
    # replaying a one-GPU machine's results does not ask for parts that need two; a CPU machine has none to replay
    results.record("study_a", pd.DataFrame({"x": [1]}), machine="m1x1")
    assert notebooks.skip_reason(folder / "98_study.ipynb", "replay", "m1x1") == ""
    assert notebooks.skip_reason(folder / "98_study.ipynb", "replay", "cpu") == (
        "study 'study' needs 1 GPU; cpu has 0, so nothing of it was recorded there")
    results.record("study_b", pd.DataFrame({"x": [1]}), machine="m1x2")
    run = notebooks.run_notebook(folder / "98_study.ipynb", "replay", "m1x2")
    assert not run.skipped and run.output.exists() and run.machine == "m1x2"


def register(monkeypatch, *entries):
    """Put `entries` (pkit.studies.Study) in the registry for one test."""
    monkeypatch.setattr(studies, "STUDIES", {**studies.STUDIES, **{s.name: s for s in entries}})


def test_modes_follow_what_the_machine_has():
    """auto measures where the study's GPUs are; measure where they are not replays and says what they need."""
    one, two = studies.Machine("h200x1", 1), studies.Machine("h200x2-nv18", 2, True)
    mechanisms, collectives = studies.get("mechanisms"), studies.get("collectives")
    assert notebooks.resolve_mode("auto", mechanisms, one) == (
        "measure", "mechanisms_splits needs 2 GPUs with peer access; h200x1 has 1")
    assert notebooks.resolve_mode("auto", mechanisms, two) == ("measure", "")
    assert notebooks.resolve_mode("auto", collectives, one) == ("replay", "")
    assert notebooks.resolve_mode("measure", collectives, one) == (
        "replay", "study 'collectives' needs 2 GPUs with peer access, one per rank (NCCL) to measure")
    assert notebooks.resolve_mode("measure", studies.get("explorers"), two) == ("replay", "")
    assert notebooks.resolve_mode("replay", mechanisms, two) == ("replay", "")


def test_figures_of_another_machine_go_to_its_own_folder(tmp_path):
    assert studies.figures_folder(tmp_path, studies.FIGURES_MACHINE) == tmp_path
    assert studies.figures_folder(tmp_path, "h200x1") == tmp_path / "h200x1"


def write_notebook(path, cells):
    """A notebook at `path`: a parameters cell (mode, machine), then code `cells`."""
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                           "language": "python"}})
    params = nbformat.v4.new_code_cell('mode = "auto"\nmachine = "x"')
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, *map(nbformat.v4.new_code_cell, cells)]
    nbformat.write(nb, path)


def test_failing_notebook_is_named_with_its_cell(tmp_path, monkeypatch):
    folder = tmp_path / "notebooks"
    folder.mkdir()
    write_notebook(folder / "99_broken.ipynb", ["1 / 0"])
    monkeypatch.setattr(notebooks, "NOTEBOOK_DIR", folder)
    monkeypatch.setattr(notebooks, "BUILD_DIR", tmp_path / "build")
    with pytest.raises(notebooks.NotebookFailed, match=r"99_broken.ipynb failed in cell \d.*ZeroDivisionError"):
        notebooks.run_all(mode="replay")


def test_replayed_notebooks_share_one_kernel_and_each_starts_as_in_a_new_one(tmp_path, monkeypatch):
    """run_all replays its notebooks in one kernel, brought back before each to what a new kernel holds: no
    variables or figures, matplotlib's and pandas' settings, warning filters, working folder and environment as the
    kernel started, cells counted from 1."""
    folder = tmp_path / "notebooks"
    folder.mkdir()
    monkeypatch.setattr(notebooks, "NOTEBOOK_DIR", folder)
    monkeypatch.setattr(notebooks, "BUILD_DIR", tmp_path / "build")
    monkeypatch.setenv("PKIT_FIGURES", str(tmp_path / "figures"))
    imports = "import os, warnings, matplotlib, pandas as pd, matplotlib.pyplot as plt"
    write_notebook(folder / "01_changes.ipynb", [
        f"{imports}\nleftover = 1\nplt.figure()\nmatplotlib.rcParams['lines.linewidth'] = 9\n"
        "pd.set_option('display.max_rows', 3)\nwarnings.simplefilter('error')\nos.environ['PKIT_LEFTOVER'] = '1'\n"
        "os.chdir('/')\nprint(os.getpid())"])
    write_notebook(folder / "02_finds_it_fresh.ipynb", [
        f"{imports}\nassert 'leftover' not in dir() and plt.get_fignums() == []\n"
        "assert matplotlib.rcParams['lines.linewidth'] != 9 and pd.get_option('display.max_rows') != 3\n"
        "assert warnings.filters[0][0] != 'error' and 'PKIT_LEFTOVER' not in os.environ\n"
        f"assert os.getcwd() == {str(folder)!r} and os.environ['PKIT_FIGURES'] == {str(tmp_path / 'figures')!r}\n"
        "print(os.getpid())"])
    runs = notebooks.run_all(mode="replay", stream=io.StringIO())
    executed = [[c for c in nbformat.read(run.output, as_version=4).cells if c.cell_type == "code"] for run in runs]
    assert [[c.execution_count for c in cells] for cells in executed] == [[1, 2, 3]] * 2  # papermill adds one
    first, second = (cells[-1].outputs[0].text for cells in executed)
    assert first == second, "the two notebooks ran in different kernels"
    assert (tmp_path / "build" / "replay.kernel.log").exists()


def test_runner_argument_errors():
    with pytest.raises(ValueError, match="--only: expected notebook stems or prefixes"):
        notebooks.discover(["does_not_exist"])
    with pytest.raises(ValueError, match="mode: expected"):
        notebooks.resolve_mode("fast", 0)
    assert notebooks.resolve_mode("auto", 2, studies.Machine("cpu", 0)) == ("replay", "")
    assert notebooks.resolve_mode("auto", 0) == ("replay", "")


class _FlakyPapermill:
    """papermill whose kernel dies before answering the first `deaths` starts, then runs."""

    def __init__(self, deaths: int, message: str = "Kernel died before replying to kernel_info"):
        self.deaths, self.message, self.starts = deaths, message, 0

    def execute_notebook(self, source, output, **options):
        self.starts += 1
        if self.starts <= self.deaths:
            raise RuntimeError(self.message)


def test_a_kernel_that_dies_before_answering_is_started_again_once():
    once = _FlakyPapermill(1)
    notebooks._execute(once, "in.ipynb", "out.ipynb", attempts=notebooks.KERNEL_START_ATTEMPTS)
    assert once.starts == 2
    twice = _FlakyPapermill(2)
    with pytest.raises(RuntimeError, match="kernel_info"):
        notebooks._execute(twice, "in.ipynb", "out.ipynb", attempts=notebooks.KERNEL_START_ATTEMPTS)
    assert twice.starts == 2
    other = _FlakyPapermill(1, "something else")
    with pytest.raises(RuntimeError, match="something else"):
        notebooks._execute(other, "in.ipynb", "out.ipynb", attempts=notebooks.KERNEL_START_ATTEMPTS)
    assert other.starts == 1
