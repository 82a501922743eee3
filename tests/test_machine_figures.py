"""figures/<machine>/ holds what a measuring run on that machine drew: `pkit figures --mode replay --machine M`
rewrites the same bytes there from results/<machine>/, nothing else there and nothing in figures/ itself."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("nbformat", reason="the notebook tests need nbformat (make install brings it)")

pytestmark = pytest.mark.heavy

ROOT = Path(__file__).resolve().parents[1]
MACHINE_FIGURES = sorted(p for p in (ROOT / "figures").iterdir() if p.is_dir())


@pytest.mark.parametrize("folder", MACHINE_FIGURES, ids=[p.name for p in MACHINE_FIGURES])
def test_another_machines_figures_replay_byte_for_byte_into_their_own_folder(folder, tmp_path):
    """Every notebook replayed for the machine (those that show no machine's results are skipped) rewrites its
    folder's files byte for byte, and writes no figure besides them, in its folder or in figures/ itself."""
    out = subprocess.run([sys.executable, "-m", "pkit.cli", "figures", "--mode", "replay", "--machine", folder.name],
                         cwd=ROOT, capture_output=True, text=True, timeout=900,
                         env={**os.environ, "PKIT_FIGURES": str(tmp_path)})
    assert out.returncode == 0, out.stderr[-3000:]
    made = sorted(p.name for p in (tmp_path / folder.name).iterdir())
    assert made == sorted(p.name for p in folder.iterdir()) and not [p for p in tmp_path.iterdir() if p.is_file()]
    for name in made:
        assert (tmp_path / folder.name / name).read_bytes() == (folder / name).read_bytes(), f"{folder.name}/{name}"
    assert f"from {folder.name}" in out.stderr, out.stderr  # the progress lines name the machine the figures show
