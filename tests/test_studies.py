"""The studies registry is the one list of studies: every notebook has an entry, every entry a notebook and a
module, every recorded experiment a study; a machine measures the parts it has the GPUs for and says what the
others need."""
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from pkit import studies
from pkit.errors import PkitError

ROOT = Path(__file__).resolve().parents[1]
ONE, TWO, EIGHT = studies.Machine("h200x1", 1), studies.Machine("h200x2-nv18", 2, True), \
    studies.Machine("h200x8-nv18", 8, True)


def test_every_notebook_has_one_study_and_every_study_a_notebook_and_a_module():
    stems = sorted(p.stem for p in (ROOT / "notebooks").glob("*.ipynb"))
    assert sorted(s.notebook for s in studies.STUDIES.values() if s.notebook) == stems
    for study in studies.STUDIES.values():
        importlib.import_module(study.module)
        assert study.description and len(set(study.experiments)) == len(study.experiments), study.name


def test_every_recorded_experiment_belongs_to_a_study():
    known = set(studies.all_experiments())
    for folder in (ROOT / "results").iterdir():
        recorded = {p.stem for p in folder.glob("*.json")} & {p.stem for p in folder.glob("*.csv")}
        assert recorded <= known, f"{folder.name}: {sorted(recorded - known)} are in no study's parts"


@pytest.mark.parametrize("name", list(studies.STUDIES))
def test_a_machine_with_more_gpus_measures_at_least_as_much(name):
    study = studies.get(name)
    plans = [study.requires(m) for m in (studies.Machine("cpu", 0), ONE, TWO, EIGHT)]
    measured = [set(p.measures) for p in plans]
    assert all(a <= b for a, b in zip(measured, measured[1:]))
    assert not plans[0].can_measure and not plans[0].measures  # no GPU measures nothing
    if study.notebook_gpus:
        assert plans[-1].can_measure and not plans[-1].lacking, "an 8-GPU node measures every part"
    else:
        assert not any(p.can_measure for p in plans)


def test_one_gpu_measures_the_transfer_studies_and_names_what_needs_two():
    can = {name for name, s in studies.STUDIES.items() if s.requires(ONE).can_measure}
    assert can == {name for name, s in studies.STUDIES.items() if s.notebook_gpus == 1}  # what its notebook needs
    assert can >= {s.name for s in studies.STUDIES.values() if s.parts and max(p.gpus for p in s.parts) == 1}
    assert studies.get("mechanisms").requires(ONE).lacking == {
        "mechanisms_splits": "mechanisms_splits needs 2 GPUs with peer access; h200x1 has 1"}
    # two GPUs without peer access (e.g. PCIe without P2P) measure only what needs no peer
    no_p2p = studies.Machine("h200x2-pcie", 2, False)
    assert set(studies.get("mechanisms").requires(no_p2p).lacking) == {"mechanisms_splits"}


def test_asking_a_study_for_more_gpus_than_the_machine_has_names_the_study_and_what_it_needs():
    with pytest.raises(PkitError, match=r"^study 'collectives' needs 2 GPUs with peer access, one per rank \(NCCL\); "
                                        r"h200x1 has 1: replay it \(pkit figures --mode replay --only 04_collectives\)"):
        studies.require("collectives", ONE)
    with pytest.raises(PkitError, match="study 'mechanisms': mechanisms_splits needs 2 GPUs with peer access; "
                                        "h200x1 has 1"):
        studies.require_part("mechanisms_splits", ONE)
    with pytest.raises(PkitError, match="study 'explorers' measures nothing"):
        studies.require("explorers", TWO)
    assert studies.require("hierarchy", ONE).measures == studies.get("hierarchy").experiments
    studies.require_part("mechanisms_splits", TWO)  # no error where it can run
    with pytest.raises(ValueError, match="study: expected one of .*'quickstart'.*got 'quikstart'"):
        studies.get("quikstart")
    with pytest.raises(ValueError, match="experiment: expected a recorded experiment of a study"):
        studies.for_experiment("no_such_table")


def test_slugs_say_how_many_gpus_and_whether_they_reach_each_other():
    assert studies.Machine.from_slug("h200x8-nv18") == EIGHT
    assert studies.Machine.from_slug("h200x1") == ONE
    assert studies.Machine.from_slug("a100x2-pcie") == studies.Machine("a100x2-pcie", 2, False)
    assert studies.Machine.from_slug("cpu").gpus == studies.Machine.from_slug("h200x1").gpus - 1 == 0


def test_a_part_this_machine_cannot_measure_prints_one_line_and_returns_none(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("PKIT_RESULTS", str(tmp_path))
    assert studies.measure_or_replay("mechanisms_splits", lambda: 1 / 0, mode="measure", machine="cpu") is None
    assert capsys.readouterr().out == "mechanisms_splits needs 2 GPUs with peer access; cpu has 0: not measured here\n"
    assert studies.measure_or_replay("quickstart", lambda: 1 / 0, mode="replay", machine="h200x2-nv18") is None
    assert capsys.readouterr().out == "quickstart: not recorded for h200x2-nv18\n"


def test_pkit_list_studies_prints_every_study_with_what_it_needs_here():
    out = subprocess.run([sys.executable, "-m", "pkit.cli", "list", "studies"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    for study in studies.STUDIES.values():
        assert f"\nstudy: {study.name}\n  notebook:    {study.notebook or '-'}\n" in "\n" + out.stdout
    assert max(map(len, out.stdout.splitlines())) <= 112
    table = studies.list_studies(ONE).set_index("study")
    assert table.loc["mechanisms", "here"] == ("measures mechanisms_sm_sweep, mechanisms_size_sweep; not "
                                               "mechanisms_splits")
    assert table.loc["lesson", "here"] == "measures its checks, recording nothing; not overlap_timeline"


@pytest.mark.parametrize("module, args, line", [
    ("pkit.experiments.overlap", ["ag_gemm"], "study 'overlap': overlap_ag_gemm needs 2 GPUs with peer access"),
    ("pkit.experiments.ceilings", [], "study 'roofline_gap': ceilings needs 2 GPUs with peer access, one per rank"),
])
def test_record_commands_say_in_one_line_what_a_machine_without_gpus_lacks(module, args, line):
    out = subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         env={**__import__("os").environ, "CUDA_VISIBLE_DEVICES": ""})
    assert out.returncode == 1 and out.stderr.strip().count("\n") == 0, out.stderr
    assert out.stderr.startswith(f"python -m {module}: {line}")
