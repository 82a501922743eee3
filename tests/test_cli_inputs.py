"""Bad inputs of `pkit eval` and `pkit problems`: each is one line on stderr naming the option, exit code 2, before
any worker starts; runs that would select nothing say so; what a newcomer trips over says so in one line.

Each case runs `pkit.harness.cli.main(argv)` in a temporary working directory holding a folder `runs/`, a file
`README.md`, an empty folder `empty_root/`, a FIFO `fifo` and a shard file `shard.jsonl`; `evaluate` and `baselines`
are replaced by functions that fail the test, so a case that got as far as starting workers fails. The `pkit` command's
own checks (`pkit figures`, the help texts) follow.
"""
from __future__ import annotations

import json
import os
import resource
import shutil
import stat
from pathlib import Path

import pytest

from pkit.harness import cli, eval_command
from pkit.harness.cli import main

pytestmark = pytest.mark.usefixtures("shared_zygote")

FIXTURE_PROBLEMS = Path(__file__).parent / "fixtures" / "problems"
FIXTURE_SAMPLES = Path(__file__).parent / "fixtures" / "samples"
OUT = ("--out", "runs/x.jsonl")
FIXTURES = ("--problems-root", str(FIXTURE_PROBLEMS))

BAD_INPUTS = [  # (argv, the start of the one line after "pkit <command>: error: ")
    (["eval", "--out", "runs"], "--out: expected a regular file or a new file, got runs, a folder"),
    (["eval", "--out", "/dev/zero"], "--out: expected a regular file or a new file, got /dev/zero, a character device"),
    (["eval", "--out", "/dev/null"], "--out: expected a regular file or a new file, got /dev/null, a character device"),
    (["eval", "--out", "fifo"], "--out: expected a regular file or a new file, got fifo, a FIFO"),
    (["eval", "--out", "/proc/no_such_folder/x.jsonl"], "--out: expected a path this user can write, got "
                                                        "/proc/no_such_folder/x.jsonl"),
    (["eval", "--out", "README.md/x.jsonl"], "--out: expected a path under folders, got README.md/x.jsonl"),
    (["eval", "--out", f"runs/{'n' * 300}/x.jsonl"], f"--out: expected a path this user can write, got runs/{'n' * 300}"
                                                     "/x.jsonl (a name of 300 bytes, where runs takes at most "),
    (["eval", "--output-mib", "-1", *OUT], "--output-mib: expected MiB >= 0, got -1"),
    (["eval", "--fresh-mib", "inf", *OUT], "--fresh-mib: expected MiB > 0, got inf"),
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
    (["eval", "--solutions", "/dev/zero", *FIXTURES, *OUT], "--solutions: expected a folder of candidates or one .py "
                                                            "file, got /dev/zero, a character device"),
    (["eval", "--problems-root", "README.md", *OUT], "--problems-root: expected a folder of <NN>_<name>/problem.py, "
                                                     "got README.md (a regular file)"),
    (["eval", "--pkb-root", "fifo", "--solutions", "runs", *OUT], "--pkb-root: expected a ParallelKernelBench checkout "
                                                                  "(a folder holding reference/), got fifo (a FIFO)"),
    (["problems", "--world-size", "0"], "--world-size: expected an integer >= 1, got 0"),
    (["problems", "--sizes", "huge"], "--sizes: expected sizes of the selected problems (tiny, large), got huge"),
    (["problems", "--problems-root", "empty_root"], "--problems-root: expected a folder of <NN>_<name>/problem.py"),
    (["problems", "--ceilings", "Z9000"], "--ceilings: expected a GPU of pkit.hardware.GPUS"),
    (["problems", "--dtype", "float128"], "--dtype: expected a dtype of the selected problems"),
    (["problems", "--problems", "99"], "--problems: expected a problem's folder name, META name or number, got '99'"),
    (["eval", "merge", "runs/x.jsonl", "/dev/zero"], "SHARD: expected JSONL files written by pkit eval --out, got "
                                                     "/dev/zero (a character device)"),
    (["eval", "merge", "runs/x.jsonl", "fifo"], "SHARD: expected JSONL files written by pkit eval --out, got fifo "
                                                "(a FIFO)"),
    (["eval", "merge", "runs/x.jsonl", "shard.jsonl", "runs"], "SHARD: expected JSONL files written by pkit eval "
                                                               "--out, got runs (a folder)"),
    (["eval", "merge", "/dev/null", "shard.jsonl"], "OUT: expected a regular file or a new file, got /dev/null"),
    (["eval", "merge", "fifo", "shard.jsonl"], "OUT: expected a regular file or a new file, got fifo, a FIFO"),
    (["eval", "merge", "/proc/no_such_folder/x.jsonl", "shard.jsonl"], "OUT: expected a path this user can write"),
]
RECORD = {"problem": "01_sum", "solution": "a.py", "model": None, "world_size": 2, "size": "tiny", "dtype": "float32",
          "device": "cpu", "seed": 0, "status": "timeout"}


def _never(*args, **kwargs):
    raise AssertionError("workers started for a bad input")


@pytest.fixture
def newcomer(tmp_path, monkeypatch):
    """A working directory as a newcomer's: runs/, README.md, an empty folder; no GPU; results in tmp_path."""
    (tmp_path / "runs").mkdir()
    (tmp_path / "README.md").write_text("# readme\n")
    (tmp_path / "empty_root").mkdir()
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "shard.jsonl").write_text(json.dumps(RECORD) + "\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PKIT_RESULTS", str(tmp_path / "results"))
    monkeypatch.setattr(eval_command, "gpu_count", lambda: 0)
    # baseline first: imported here for the first time, it binds runner's evaluate as it is (restored after the test)
    monkeypatch.setattr("pkit.harness.baseline.evaluate", _never)
    monkeypatch.setattr("pkit.harness.runner.evaluate", _never)
    return tmp_path


@pytest.mark.parametrize("argv, line", BAD_INPUTS, ids=[" ".join(a) for a, _ in BAD_INPUTS])
def test_a_bad_input_is_one_line_naming_the_option(argv, line, newcomer, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    command = " ".join(argv[:2]) if argv[:2] == ["eval", "merge"] else argv[0]
    assert err.startswith(f"pkit {command}: error: {line}"), err
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
    monkeypatch.setattr(eval_command, "gpu_count", lambda: 0)
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


def test_a_large_out_is_read_line_by_line(newcomer, capsys):
    """Resuming reads --out a line at a time: a 1 GiB file without a newline (sparse) is refused in one line after
    its first MiB, and this process's peak memory grows by far less than the file."""
    import torch  # noqa: F401 - imported by pkit eval before it reads --out, in before the baseline is taken

    big = newcomer / "runs" / "big.jsonl"
    with open(big, "wb") as f:
        f.truncate(1 << 30)
    try:  # reset the peak, so an earlier, higher peak of this process cannot hide the growth
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass
    before = _rss_kib("VmRSS")
    assert main(["eval", *FIXTURES, "--reference-as-candidate", "--solutions", str(newcomer / "empty_root"),
                 "--dry-run", "--out", str(big)]) == 2
    grown_mb = (_rss_kib("VmHWM") - before) / 1024
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "a line of at most 1 MiB" in err, err
    assert grown_mb < 100, f"peak RSS grew by {grown_mb:.0f} MB reading a 1 GiB --out"


def _rss_kib(field: str) -> int:
    """VmRSS (now) or VmHWM (peak) of this process in KiB; the peak falls back to getrusage's ru_maxrss."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_merge_writes_out_with_the_mode_of_a_new_out(newcomer, umask, capsys):
    """`pkit eval merge` makes OUT with the mode `pkit eval --out` gives a new file (0666 less the umask)."""
    from pkit.harness.resume import sole_writer

    saved = os.umask(umask)
    try:
        with sole_writer(newcomer / "runs" / "eval.jsonl"):
            pass
        assert main(["eval", "merge", "runs/merged.jsonl", "shard.jsonl"]) == 0
    finally:
        os.umask(saved)
    modes = {name: stat.S_IMODE((newcomer / "runs" / name).stat().st_mode) for name in ("eval.jsonl", "merged.jsonl")}
    new = 0o666 & ~umask
    assert modes == {"eval.jsonl": new, "merged.jsonl": new}, {k: oct(m) for k, m in modes.items()}


# --- the pkit command: pkit figures, help texts ------------------------------------------------------------------

@pytest.fixture
def no_notebook_runs(tmp_path, monkeypatch):
    """Figures and builds go to tmp_path; running a notebook fails the test; no GPU here."""
    from pkit import notebooks, studies

    monkeypatch.setenv("PKIT_FIGURES", str(tmp_path / "figures"))
    monkeypatch.setattr(notebooks, "BUILD_DIR", tmp_path / "build")
    monkeypatch.setattr(notebooks, "run_all", _never)
    monkeypatch.setattr(studies.Machine, "here", classmethod(lambda cls: studies.Machine("cpu", 0)))
    return tmp_path


@pytest.mark.parametrize("argv, line", [
    (["--only", "42"], "--only: expected notebook stems or prefixes (00_"),
    (["--machine", "nosuch"], "--machine: expected a machine with recorded results ("),
    (["--mode", "measure"], "--mode: expected a machine with GPUs for measure, got none here"),
])
def test_a_bad_figures_argument_is_one_line_before_any_notebook_runs(argv, line, no_notebook_runs, capsys):
    from pkit.cli import main as pkit_main

    assert pkit_main(["figures", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"pkit figures: error: {line}"), err
    assert not any(no_notebook_runs.iterdir()), sorted(no_notebook_runs.iterdir())


def test_every_command_has_a_description_and_the_top_help_says_each_once(capsys):
    from pkit.cli import build_parser

    parser = build_parser()
    (commands,) = [a for a in parser._actions if a.choices and "figures" in a.choices]
    parsers = dict(commands.choices)
    (merge,) = [a.choices["merge"] for a in parsers["eval"]._actions if a.choices and "merge" in a.choices]
    for name, sub in {**parsers, "eval merge": merge}.items():
        assert sub.description and len(sub.description) > 20, name
    with pytest.raises(SystemExit):
        parser.parse_args(["--help"])
    top = capsys.readouterr().out
    assert "studies: studies:" not in top and top.count("studies") == 1, top


def test_the_problems_table_fits_100_columns(newcomer, capsys):
    """`pkit problems` for a terminal: every line within `TABLE_WIDTH` (100) characters, the notes under it too,
    but a path longer than that, which stays whole on a line of its own (the results folder may lie deep)."""
    assert main(["problems"]) == 0
    lines = capsys.readouterr().out.splitlines()
    wide = [line for line in lines if len(line) > cli.TABLE_WIDTH and len(line.split()) > 1]
    assert cli.TABLE_WIDTH == 100 and not wide, wide
    assert any(line.startswith("left out to fit") for line in lines), lines[-3:]


def test_the_makefile_suggests_a_local_address_for_lab():
    makefile = (Path(__file__).parents[1] / "Makefile").read_text()
    assert "--ip=0.0.0.0" not in makefile and "--ip=127.0.0.1" in makefile
