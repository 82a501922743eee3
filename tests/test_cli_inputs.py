"""Bad inputs of `pkit eval` and `pkit problems`: each is one line on stderr naming the option, exit code 2, before
any worker starts; runs that would select nothing say so; what a newcomer trips over says so in one line.

Each case runs `pkit.harness.cli.main(argv)` in a temporary working directory holding a folder `runs/`, a file
`README.md` and an empty folder `empty_root/`; `evaluate` and `baselines` are replaced by functions that fail
the test, so a case that got as far as starting workers fails.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pkit.harness import cli
from pkit.harness.cli import main

pytestmark = pytest.mark.usefixtures("shared_zygote")

FIXTURE_PROBLEMS = Path(__file__).parent / "fixtures" / "problems"
FIXTURE_SAMPLES = Path(__file__).parent / "fixtures" / "samples"
OUT = ("--out", "runs/x.jsonl")
FIXTURES = ("--problems-root", str(FIXTURE_PROBLEMS))

BAD_INPUTS = [  # (argv, the start of the one line after "pkit <command>: error: ")
    (["eval", "--out", "runs"], "--out: expected a file to write, got runs, a folder"),
    (["eval", "--out", "README.md/x.jsonl"], "--out: expected a path under folders, got README.md/x.jsonl"),
    (["eval", *FIXTURES], "--out: expected a JSONL file to write, got none"),
    (["eval", "--atol", "-1", *OUT], "--atol: expected a number >= 0, got -1"),
    (["eval", "--rtol", "-1", *OUT], "--rtol: expected a number >= 0, got -1"),
    (["eval", "--rtol", "nan", *OUT], "--rtol: expected a number >= 0, got nan"),
    (["eval", "--timeout", "0", *OUT], "--timeout: expected seconds > 0, got 0"),
    (["eval", "--trials", "0", *OUT], "--trials: expected an integer >= 1, got 0"),
    (["eval", "--world-size", "0", *OUT], "--world-size: expected an integer >= 1, got 0"),
    (["eval", "--world-size", "3", *OUT], "--world-size: expected a world size the selected problems run at (2, 4, 8)"),
    (["eval", "--dtype", "float128", *OUT], "--dtype: expected a dtype of the selected problems (bfloat16"),
    (["eval", "--ceilings", "Z9000", *OUT], "--ceilings: expected a GPU of pkit.hardware.GPUS (A100, H100, H200"),
    (["eval", "--problems", "nope", *OUT], "--problems: expected a problem's folder name, META name or number"),
    (["eval", "--problems-root", "empty_root", *OUT], "--problems-root: expected a folder of <NN>_<name>/problem.py"),
    (["eval", "--problems-root", "no_such_folder", *OUT], "--problems-root: expected a folder of "
                                                          "<NN>_<name>/problem.py, got no_such_folder (no such folder)"),
    (["eval", "--size", "huge", *FIXTURES, *OUT], "--size: expected a size of every selected problem (tiny, medium, large)"),
    (["eval", "--size", "large", *FIXTURES, *OUT], "--size: expected tiny on a machine without GPUs"),
    (["eval", "--baselines", "--size", "large", "--problems", "1"], "--baselines: expected a machine with GPUs"),
    (["eval", "--solutions", "empty/", "--reference-as-candidate", *OUT], "--solutions: expected a folder of "
                                                                          "candidates or one .py file, got empty"),
    (["eval", "--solutions", "runs", *FIXTURES, *OUT], "--solutions: expected candidates of 01_sum, 02_gather_scale"),
    (["problems", "--world-size", "0"], "--world-size: expected an integer >= 1, got 0"),
    (["problems", "--sizes", "huge"], "--sizes: expected sizes of the selected problems (tiny, large), got huge"),
    (["problems", "--problems-root", "empty_root"], "--problems-root: expected a folder of <NN>_<name>/problem.py"),
    (["problems", "--ceilings", "Z9000"], "--ceilings: expected a GPU of pkit.hardware.GPUS"),
    (["problems", "--dtype", "float128"], "--dtype: expected a dtype of the selected problems"),
    (["problems", "--problems", "99"], "--problems: expected a problem's folder name, META name or number, got '99'"),
]


def _never(*args, **kwargs):
    raise AssertionError("workers started for a bad input")


@pytest.fixture
def newcomer(tmp_path, monkeypatch):
    """A working directory as a newcomer's: runs/, README.md, an empty folder; no GPU; results in tmp_path."""
    (tmp_path / "runs").mkdir()
    (tmp_path / "README.md").write_text("# readme\n")
    (tmp_path / "empty_root").mkdir()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PKIT_RESULTS", str(tmp_path / "results"))
    monkeypatch.setattr(cli, "gpu_count", lambda: 0)
    monkeypatch.setattr("pkit.harness.runner.evaluate", _never)
    monkeypatch.setattr("pkit.harness.baseline.evaluate", _never)
    return tmp_path


@pytest.mark.parametrize("argv, line", BAD_INPUTS, ids=[" ".join(a) for a, _ in BAD_INPUTS])
def test_a_bad_input_is_one_line_naming_the_option(argv, line, newcomer, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"pkit {argv[0]}: error: {line}"), err
    assert not (newcomer / "runs" / "x.jsonl").exists() and not (newcomer / "results").exists()


def test_baselines_without_gpus_refuse_and_write_nothing(newcomer, capsys):
    assert main(["eval", "--baselines", *FIXTURES, "--size", "tiny"]) == 2
    assert "pass --force" in capsys.readouterr().err
    assert not (newcomer / "results").exists()


def test_forced_baselines_without_gpus_are_printed_not_recorded_in_the_repository(tmp_path, monkeypatch, capsys):
    """On a machine whose slug is 'cpu', the repository's results/ (here a stand-in) gets nothing, even forced."""
    from pkit import results

    monkeypatch.delenv("PKIT_RESULTS", raising=False)
    monkeypatch.setattr(results, "REPO_ROOT", tmp_path)
    monkeypatch.setattr(results, "machine_slug", lambda: "cpu")
    monkeypatch.setattr(cli, "gpu_count", lambda: 0)
    assert main(["eval", "--baselines", "--force", *FIXTURES, "--problems", "01_sum", "--size", "tiny", "--device",
                 "cpu", "--trials", "1", "--warmup", "1", "--iters", "3", "--timeout", "120"]) == 0
    out = capsys.readouterr().out
    assert "01_sum" in out and "not recorded" in out
    assert not (tmp_path / "results").exists()


def test_a_dry_run_names_what_would_run_and_which_problems_have_no_candidates(newcomer, capsys):
    folder = newcomer / "mine"
    shutil.copytree(FIXTURE_SAMPLES / "good-model", folder / "good-model")
    shutil.rmtree(folder / "good-model" / "02_gather_scale", ignore_errors=True)
    assert main(["eval", *FIXTURES, "--solutions", str(folder), "--problems", "01_sum", "02_gather_scale",
                 "--dry-run", *OUT]) == 0
    captured = capsys.readouterr()
    assert "01_sum (size tiny): good-model/01_sum/" in captured.out
    assert captured.out.splitlines()[-1].startswith("dry run: ") and "nothing started" in captured.out
    assert captured.err == f"pkit eval: no candidates under {folder} for 02_gather_scale: they are not evaluated\n"


def test_a_problems_root_with_other_folders_is_walked_one_level(newcomer, capsys):
    """Folders that are not problems are counted in one line; none of their files is read as a candidate."""
    root = newcomer / "mixed"
    shutil.copytree(FIXTURE_PROBLEMS, root)
    for i in range(12):
        (root / f"junk{i}" / "deeper").mkdir(parents=True)
        (root / f"junk{i}" / "deeper" / "tool.py").write_text("x = 1\n")
    assert main(["eval", "--problems-root", str(root), "--dry-run", "--reference-as-candidate", *OUT]) == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("pkit eval: 12 folder(s) under ") and "(12 in all)" in err[0], err


def test_files_naming_no_problem_are_one_line(newcomer, capsys):
    folder = newcomer / "mine"
    shutil.copytree(FIXTURE_SAMPLES, folder)
    for i in range(9):
        (folder / f"helper{i}.py").write_text("x = 1\n")
    assert main(["eval", *FIXTURES, "--solutions", str(folder), "--dry-run", *OUT]) == 0
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("pkit eval: skipping helper0.py, helper1.py, helper2.py, ... (9 in all)"), line


def test_a_missing_solutions_folder_is_not_confused_with_an_empty_one(newcomer, capsys):
    """The doc's self-check: an empty folder made first, then only the references run."""
    (newcomer / "empty").mkdir()
    assert main(["eval", "--reference-as-candidate", "--solutions", "empty/", *FIXTURES, "--dry-run", *OUT]) == 0
    assert "01_sum (size tiny): 01_sum/problem.py:reference" in capsys.readouterr().out


@pytest.mark.parametrize("argv, line", [
    (["eval", "--atol", "abc"], "pkit eval: error: argument --atol: invalid float value: 'abc'"),
    (["list", "nope"], "pkit list: error: argument registry: invalid choice: 'nope'"),
    (["figures", "--mode", "fast"], "pkit figures: error: argument --mode: invalid choice: 'fast'"),
])
def test_what_argparse_refuses_is_one_line_too(argv, line, capsys):
    """Values argparse itself refuses (a type or a choice) print one line, not the usage block first."""
    from pkit.cli import main as pkit_main

    with pytest.raises(SystemExit) as stop:
        pkit_main(argv)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and err.count("\n") == 1 and err.startswith(line), err
