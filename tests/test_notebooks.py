"""`pkit figures --mode replay` runs every notebook from recorded results and rewrites identical figures."""
import os
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from pkit import notebooks

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


def test_replay_regenerates_committed_figures_byte_for_byte(tmp_path):
    out = subprocess.run([sys.executable, "-m", "pkit.cli", "figures", "--mode", "replay"], cwd=ROOT,
                         capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PKIT_FIGURES": str(tmp_path)})
    assert out.returncode == 0, out.stderr[-3000:]
    made = sorted(p.name for p in tmp_path.iterdir())
    assert made, "no figures written"
    for name in made:
        committed = ROOT / "figures" / name
        assert committed.exists(), f"{name} is not committed in figures/"
        assert (tmp_path / name).read_bytes() == committed.read_bytes(), f"{name} differs from figures/{name}"
    for path in NOTEBOOKS:
        assert (ROOT / "build" / "notebooks" / path.name).exists()


def test_failing_notebook_is_named_with_its_cell(tmp_path, monkeypatch):
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                           "language": "python"}})
    params = nbformat.v4.new_code_cell('mode = "auto"\nmachine = "x"')
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell("1 / 0")]
    folder = tmp_path / "notebooks"
    folder.mkdir()
    nbformat.write(nb, folder / "99_broken.ipynb")
    monkeypatch.setattr(notebooks, "NOTEBOOK_DIR", folder)
    monkeypatch.setattr(notebooks, "BUILD_DIR", tmp_path / "build")
    with pytest.raises(notebooks.NotebookFailed, match=r"99_broken.ipynb failed in cell \d.*ZeroDivisionError"):
        notebooks.run_all(mode="replay")


def test_runner_argument_errors():
    with pytest.raises(ValueError, match="only: no notebook matches"):
        notebooks.discover(["does_not_exist"])
    with pytest.raises(ValueError, match="mode: expected"):
        notebooks.resolve_mode("fast", 0)
    assert notebooks.resolve_mode("auto", 2) == "replay"  # no GPUs here
    assert notebooks.resolve_mode("auto", 0) == "replay"
