"""figures/<machine>/ holds what a measuring run on that machine drew: `pkit figures --mode replay --machine M`
rewrites the same bytes there from results/<machine>/, nothing else there and nothing in figures/ itself.

The machines' runs go through `pkit figures` in this process and share one replay kernel (its log in a temporary
folder), as one run shares it among its notebooks: the kernel is brought back to what a new one holds before each
notebook (pkit.notebook_kernel.ReplayKernel). tests/test_notebooks.py runs the command as a process of its own."""
from contextlib import nullcontext
from pathlib import Path

import pytest

pytest.importorskip("nbformat", reason="the notebook tests need nbformat (make install brings it)")

from pkit import notebooks
from pkit.cli import main

pytestmark = pytest.mark.heavy

ROOT = Path(__file__).resolve().parents[1]
MACHINE_FIGURES = sorted(p for p in (ROOT / "figures").iterdir() if p.is_dir())


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    """One replay kernel for the module's runs, started as `pkit figures` starts its own."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(notebooks, "BUILD_DIR", tmp_path_factory.mktemp("kernel"))
        with notebooks._replay_kernel() as shared:
            mp.undo()
            yield shared


@pytest.mark.parametrize("folder", MACHINE_FIGURES, ids=[p.name for p in MACHINE_FIGURES])
def test_another_machines_figures_replay_byte_for_byte_into_their_own_folder(folder, tmp_path, kernel, monkeypatch,
                                                                            capsys):
    """Every notebook replayed for the machine (those that show no machine's results are skipped) rewrites its
    folder's files byte for byte, and writes no figure besides them, in its folder or in figures/ itself."""
    monkeypatch.setenv("PKIT_FIGURES", str(tmp_path))
    monkeypatch.setattr(notebooks, "_replay_kernel", lambda: nullcontext(kernel))
    code = main(["figures", "--mode", "replay", "--machine", folder.name])
    err = capsys.readouterr().err
    assert code == 0, err[-3000:]
    made = sorted(p.name for p in (tmp_path / folder.name).iterdir())
    assert made == sorted(p.name for p in folder.iterdir()) and not [p for p in tmp_path.iterdir() if p.is_file()]
    for name in made:
        assert (tmp_path / folder.name / name).read_bytes() == (folder / name).read_bytes(), f"{folder.name}/{name}"
    assert f"from {folder.name}" in err, err  # the progress lines name the machine the figures show
