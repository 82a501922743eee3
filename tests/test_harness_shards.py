"""`pkit eval` at scale: --shard partitions the candidates, `pkit eval merge` joins shard files, an --out is
resumed after a kill, and --ray runs the shards as Ray tasks; CPU, gloo, world size 2, fixture problems.

One serial run of the fixture problems (their references, three correct samples and five broken candidates, one
trial each, under quick timing) is the yardstick: every split, resumed or Ray run of the same command must give each
(problem, candidate) the same verdict, exactly once. A correct candidate's faster/level/slower is timing noise
between two runs, so correct statuses compare as 'correct'.
"""
from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path, PurePosixPath
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from problem_ranks import forked_program

from pkit.harness import shards
from pkit.harness.cli import main
from pkit.harness.records import CORRECT, KEY_FIELDS, read_lines, record_key
from pkit.harness.solutions import Candidate

pytestmark = [pytest.mark.heavy, pytest.mark.usefixtures("shared_zygote")]

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures"
BROKEN = ("wrong_values.py", "zeros.py", "raises.py", "syntax_error.py", "compile_error.py")
SBATCH = ROOT / "scripts" / "eval_array.sbatch"


@pytest.fixture(scope="module")
def solutions(tmp_path_factory) -> Path:
    """The fixture samples plus five broken candidates of 01_sum under `broken/01_sum/`."""
    folder = tmp_path_factory.mktemp("solutions")
    shutil.copytree(FIXTURES / "samples", folder, dirs_exist_ok=True)
    (folder / "broken" / "01_sum").mkdir(parents=True)
    for name in BROKEN:
        shutil.copy(FIXTURES / "candidates" / "01_sum" / name, folder / "broken" / "01_sum" / name)
    return folder


@pytest.fixture(scope="module")
def args(solutions, module_fewest_rounds) -> list[str]:
    """The `pkit eval` arguments every run of this file shares (all but --out and the way it is split); the runs in
    this process time each candidate in the fewest rounds of a few calls (`module_fewest_rounds`), those it starts
    (Ray's tasks, the array's) under quick timing's cap: a correct verdict compares as 'correct' whatever its speed,
    and each record keeps the settings it was given, so the runs resume and merge each other's files alike."""
    return ["--problems-root", str(FIXTURES / "problems"), "--solutions", str(solutions),
            "--reference-as-candidate", "--trials", "1", "--timeout", "60", "--device", "cpu"]


@pytest.fixture(scope="module")
def serial(args, tmp_path_factory) -> Path:
    """One unsplit run: the yardstick."""
    out = tmp_path_factory.mktemp("serial") / "serial.jsonl"
    assert main(["eval", *args, "--out", str(out)]) == 0
    return out


def verdicts(path: Path) -> dict:
    """Status by (problem, solution) of a records file, correct ones as 'correct'; fails on a key seen twice."""
    lines, partial = read_lines(path)
    keys = [record_key(r) for _, r in lines]
    assert partial == 0 and len(keys) == len(set(keys)), f"{path}: a record twice or a line cut short"
    return {(r["problem"], r["solution"]): "correct" if r["status"] in CORRECT else r["status"] for _, r in lines}


def test_the_yardstick_has_every_kind_of_status(serial):
    seen = verdicts(serial)
    assert len(seen) == 10
    assert set(seen.values()) == {"correct", "wrong_result", "runtime_error", "compile_error"}


# --- shards ------------------------------------------------------------------------------------------------------

def pairs_of(names: list[tuple[str, str]], root: str) -> list:
    """(problem, candidate) pairs for (problem name, relative path) items, the candidates' files under `root`."""
    return [(SimpleNamespace(name=problem), Candidate(Path(root) / rel, rel, problem)) for problem, rel in names]


NAMES = st.lists(st.tuples(st.sampled_from(["01_sum", "02_gather", "03_scan", "04_sort"]),
                           st.from_regex(r"[a-z]{1,3}(/[a-z0-9]{1,3}){0,2}\.py", fullmatch=True)),
                 unique=True, max_size=40)


@settings(max_examples=200, deadline=None)
@given(names=NAMES, count=st.integers(1, 9), order=st.randoms(use_true_random=False))
def test_shards_partition_the_pairs_alike_on_every_machine(names, count, order):
    """The N shards hold every pair once, differ in size by at most one, split at most N - 1 problems, and do not
    depend on the order the pairs were found in nor on where the files lie."""
    pairs = pairs_of(names, "/home/a/solutions")
    parts = shards.split(pairs, count)
    ids = [[shards.identity(p) for p in part] for part in parts]
    flat = [i for part in ids for i in part]
    assert len(parts) == count and sorted(flat) == sorted(map(shards.identity, pairs)) and len(set(flat)) == len(flat)
    assert max(map(len, parts)) - min(map(len, parts)) <= 1
    assert sum(len({i[0] for i in part}) for part in ids) <= len({n for n, _ in names}) + count - 1
    shuffled = pairs_of(names, "/scratch/b")
    order.shuffle(shuffled)
    assert [[shards.identity(p) for p in part] for part in shards.split(shuffled, count)] == ids
    assert [shards.identity(p) for p in shards.select(shuffled, shards.Shard(count - 1, count))] == ids[-1]


@pytest.mark.parametrize("extra, line", [
    (["--shard", "4/4"], "--shard: expected K/N with N >= 1 and 0 <= K < N"),
    (["--shard", "0/0"], "--shard: expected K/N with N >= 1 and 0 <= K < N"),
    (["--shard=-1/4"], "--shard: expected K/N"),
    (["--shard", "2"], "--shard: expected K/N"),
    (["--shard", "a/b"], "--shard: expected K/N"),
    (["--shards", "2"], "--shards: only with --ray"),
    (["--shard", "0/2", "--ray", "local"], "--ray: expected a run of candidates, got --shard too"),
    (["--ray", "local", "--shards", "0"], "--shards: expected an integer >= 1, got 0"),
])
def test_bad_sharding_is_one_line(extra, line, args, tmp_path, capsys):
    out = tmp_path / "x.jsonl"
    assert main(["eval", *args, *extra, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"pkit eval: error: {line}"), err
    assert not out.exists()


def test_ray_missing_is_one_line_saying_what_to_install(args, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    assert main(["eval", *args, "--ray", "local", "--out", str(tmp_path / "x.jsonl")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'pkit[ray]'" in err, err


def test_a_shard_past_the_candidates_writes_an_empty_file(args, tmp_path):
    """An array larger than the run (shard 0 of 12 for 10 candidates) succeeds with nothing to evaluate."""
    out = tmp_path / "s0.jsonl"
    assert main(["eval", *args, "--shard", "0/12", "--out", str(out)]) == 0
    assert out.read_text() == ""


# --- the sbatch example: two of its array tasks as two processes, the other two shards here, then merge ----------

def array_range(script: Path) -> range:
    """The task ids of the script's `#SBATCH --array=A-B`."""
    first, last = re.search(r"^#SBATCH --array=(\d+)-(\d+)\s*$", script.read_text(), re.M).groups()
    return range(int(first), int(last) + 1)


def test_the_sbatch_example_as_array_tasks_merges_to_the_serial_verdicts(args, serial, tmp_path, capsys):
    """scripts/eval_array.sbatch run by bash for array tasks 0 and 3 at once, as Slurm would with the ids and the
    count of its --array line; shards 1 and 2 meanwhile by the command the script runs (`pkit eval --shard K/N
    --out OUT_DIR/shard-K.jsonl`) in this process; `pkit eval merge` of the four shard files gives the serial
    run's verdicts."""
    ids = array_range(SBATCH)
    assert list(ids) == [0, 1, 2, 3]
    by_script = (0, 3)
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}", OUT_DIR=str(tmp_path / "s"),
               SLURM_ARRAY_JOB_ID="77", SLURM_ARRAY_TASK_COUNT=str(len(ids)))
    tasks = [subprocess.Popen(["bash", str(SBATCH), *args], cwd=tmp_path, env=dict(env, SLURM_ARRAY_TASK_ID=str(k)),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for k in by_script]
    files = [tmp_path / "s" / f"shard-{k}.jsonl" for k in ids]
    for k in ids:
        if k not in by_script:
            assert main(["eval", *args, "--shard", f"{k}/{len(ids)}", "--out", str(files[k])]) == 0
    logs = [task.communicate(timeout=600)[0] for task in tasks]
    assert [task.returncode for task in tasks] == [0] * len(by_script), logs
    capsys.readouterr()  # the in-process shards' output
    assert main(["eval", "merge", str(tmp_path / "merged.jsonl"), *map(str, files)]) == 0
    out = capsys.readouterr().out
    assert verdicts(tmp_path / "merged.jsonl") == verdicts(serial)
    for k, path in zip(ids, files):
        assert f"{path}: " in out and f"(shard {k}/4; host " in out
        assert {r["provenance"]["shard"] for _, r in read_lines(path)[0]} <= {f"{k}/4"}
    assert out.splitlines()[-1].startswith(f"10 records → {tmp_path / 'merged.jsonl'}: ")


# --- merge ----------------------------------------------------------------------------------------------------------

def write_records(path: Path, records: list[dict], tail: str = "") -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + tail)
    return path


def serial_records(serial: Path) -> list[dict]:
    return [r for _, r in read_lines(serial)[0]]


def merge_err(out: Path, *paths: Path, capsys) -> str:
    """The one line of a refused merge (which must leave `out` as it was)."""
    before = out.read_bytes() if out.exists() else None
    assert main(["eval", "merge", str(out), *map(str, paths)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("pkit eval merge: error: "), err
    assert (out.read_bytes() if out.exists() else None) == before
    return err


@pytest.mark.parametrize("stamp, value, named", [
    ("harness_version", "0.0.9+0123456789ab", "harness_version: "),
    ("problem_sha256", "0" * 64, "problem_sha256 of 01_sum: "),
    ("solution_sha256", "f" * 64, "solution_sha256 of 01_sum "),
])
def test_merge_refuses_records_of_other_versions(stamp, value, named, serial, tmp_path, capsys):
    records = [r for r in serial_records(serial) if r["problem"] == "01_sum"]
    first = write_records(tmp_path / "a.jsonl", records[:2])
    other = dict(records[2], provenance=dict(records[2]["provenance"], **{stamp: value}))
    if stamp == "solution_sha256":  # the same candidate file changed between the shards
        other["solution"] = records[0]["solution"]
    second = write_records(tmp_path / "b.jsonl", [other])
    err = merge_err(tmp_path / "out.jsonl", first, second, capsys=capsys)
    assert named in err and f"{second}:1 has {value}" in err, err


def test_merge_refuses_other_settings_and_stamped_with_unstamped_records(serial, tmp_path, capsys):
    one, two = serial_records(serial)[:2]
    settings_of = dict(two["provenance"]["settings"], trials=5)
    first = write_records(tmp_path / "a.jsonl", [one])
    second = write_records(tmp_path / "b.jsonl", [dict(two, provenance=dict(two["provenance"],
                                                                             settings=settings_of))])
    err = merge_err(tmp_path / "out.jsonl", first, second, capsys=capsys)
    assert f"settings: {second}:1 has trials 5, {first}:1 has trials 1" in err, err
    old = {k: v for k, v in two["provenance"].items() if k not in ("harness_version", "settings", "problem_sha256")}
    unstamped = write_records(tmp_path / "old.jsonl", [dict(two, provenance=old)])
    assert "has unrecorded" in merge_err(tmp_path / "out.jsonl", first, unstamped, capsys=capsys)


def test_merge_keeps_one_of_agreeing_duplicates_and_refuses_disagreeing_ones(serial, tmp_path, capsys):
    records = serial_records(serial)
    first = write_records(tmp_path / "a.jsonl", records[:6])
    again = write_records(tmp_path / "b.jsonl", records[4:])
    out = tmp_path / "out.jsonl"
    assert main(["eval", "merge", str(out), str(first), str(again)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith(f"{again}: "))
    assert line.startswith(f"{again}: {len(records) - 6} records (no shard; host ") and line.endswith(
        "; 2 duplicates left out"), line
    assert [record_key(r) for _, r in read_lines(out)[0]] == [record_key(r) for r in records]
    wrong = dict(records[5], status="timeout" if records[5]["status"] != "timeout" else "wrong_result")
    disagree = write_records(tmp_path / "c.jsonl", [wrong])
    err = merge_err(out, first, disagree, capsys=capsys)
    assert f"{disagree}:1: {records[5]['problem']} {records[5]['solution']}" in err
    assert f"is {wrong['status']}, but {first}:6 says {records[5]['status']}" in err, err


def test_merge_leaves_out_a_line_cut_short_and_says_so(serial, tmp_path, capsys):
    records = serial_records(serial)
    cut = write_records(tmp_path / "a.jsonl", records[:3], tail=json.dumps(records[3])[:50])
    rest = write_records(tmp_path / "b.jsonl", records[4:])
    out = tmp_path / "out.jsonl"
    assert main(["eval", "merge", str(out), str(cut), str(rest)]) == 0
    assert "a last line cut short (50 bytes) left out" in capsys.readouterr().out
    assert len(read_lines(out)[0]) == len(records) - 1 and cut.read_text().endswith(json.dumps(records[3])[:50])


@pytest.mark.parametrize("make, line", [
    (lambda d: [d / "missing.jsonl"], "SHARD: expected JSONL files written by pkit eval --out, got"),
    (lambda d: [write_records(d / "notes.jsonl", [{"note": 1}])], "notes.jsonl:1: expected a record of pkit eval"),
    (lambda d: [d], "(a folder)"),
])
def test_merge_of_what_is_not_a_shard_file_is_one_line(make, line, tmp_path, capsys):
    assert line in merge_err(tmp_path / "out.jsonl", *make(tmp_path), capsys=capsys)


def test_merge_refuses_to_write_over_one_of_its_shards_or_a_folder(serial, tmp_path, capsys):
    shard = write_records(tmp_path / "a.jsonl", serial_records(serial)[:2])
    assert "OUT: expected a file other than the shards" in merge_err(shard, shard, capsys=capsys)
    assert main(["eval", "merge", str(tmp_path), str(shard)]) == 2
    assert capsys.readouterr().err == (f"pkit eval merge: error: OUT: expected a regular file or a new file, got "
                                       f"{tmp_path}, a folder (e.g. OUT {tmp_path / 'run.jsonl'})\n")


# --- resume ---------------------------------------------------------------------------------------------------------

def test_a_run_killed_mid_line_resumes_with_every_record_once(args, serial, tmp_path, capsys):
    """Four records, then a fifth cut in the middle (a kill while writing): the run again keeps the four as they
    were, drops the cut line and evaluates the other six."""
    kept = serial.read_text().splitlines(keepends=True)
    out = tmp_path / "killed.jsonl"
    out.write_text("".join(kept[:4]) + kept[4][:len(kept[4]) // 2])
    assert main(["eval", *args, "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "line cut short" in err and "6 to run" in err, err
    assert out.read_text().startswith("".join(kept[:4]))
    assert verdicts(out) == verdicts(serial)


def test_a_run_stopped_by_sigterm_resumes_with_every_record_once(args, serial, tmp_path):
    """`kill` of a running `pkit eval` after its second record: exit 143, the records so far kept; the same
    command again completes the file. The stopped one runs as `python -m pkit.cli eval` would, forked from a server
    that imported torch once (tests/problem_ranks.py)."""
    out, log = tmp_path / "stopped.jsonl", tmp_path / "stopped.log"
    argv = ["eval", *args, "--out", str(out)]
    run = forked_program("pkit.cli", argv, dict(os.environ), tmp_path, log)
    deadline = time.monotonic() + 300
    while run.exitcode is None and time.monotonic() < deadline and (
            not out.exists() or out.read_text().count("\n") < 2):
        time.sleep(0.05)
    os.kill(run.pid, signal.SIGTERM)
    run.join(timeout=120)
    err = log.read_text()
    assert run.exitcode == 128 + signal.SIGTERM, err
    done = len(read_lines(out)[0])
    assert 2 <= done < 10 and "run the same command again to resume" in err
    assert main(argv) == 0  # the same command, in this process
    assert verdicts(out) == verdicts(serial)


def test_a_resumed_run_skips_all_and_the_dry_run_says_what_is_left(args, serial, tmp_path, capsys):
    out = tmp_path / "again.jsonl"
    shutil.copy(serial, out)
    assert main(["eval", *args, "--out", str(out)]) == 0
    assert out.read_bytes() == serial.read_bytes()
    assert "(0 run now)" in capsys.readouterr().out
    out.write_text("".join(serial.read_text().splitlines(keepends=True)[:7]))
    assert main(["eval", *args, "--dry-run", "--out", str(out)]) == 0
    shown = capsys.readouterr().out
    assert shown.splitlines()[-1].startswith("dry run: 3 candidate(s)") and "nothing started" in shown


def test_resuming_with_other_settings_or_beside_another_writer_is_refused(args, serial, tmp_path, capsys):
    out = tmp_path / "other.jsonl"
    shutil.copy(serial, out)
    assert main(["eval", *args, "--trials", "2", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--out: cannot resume {out}: settings: {out}:1 has trials 1, this run has " \
                                   "trials 2" in err, err
    with open(out, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert main(["eval", *args, "--out", str(out)]) == 2
    assert "is being written by another pkit eval" in capsys.readouterr().err
    assert out.read_bytes() == serial.read_bytes()


def test_records_carry_their_key_and_stamps(serial):
    for _, r in read_lines(serial)[0]:
        assert all(r[name] is not None for name in KEY_FIELDS if name != "model")
        stamps = r["provenance"]
        assert re.fullmatch(r"0\.1\.0\+[0-9a-f]{12}", stamps["harness_version"])
        assert len(stamps["problem_sha256"]) == len(stamps["solution_sha256"]) == 64
        assert stamps["settings"]["trials"] == 1 and stamps["shard"] is None


# --- Ray ----------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'pkit[ray]')")
    ray.init(num_cpus=2, include_dashboard=False, logging_level="WARNING")
    yield ray
    ray.shutdown()


def test_ray_runs_the_same_shards_resumes_and_gives_the_serial_verdicts(local_ray, args, serial, tmp_path, capsys):
    """Two shards as Ray tasks (two CPUs: one task of two ranks at a time) into an --out holding three records
    and a line cut short: each key once, the serial verdicts, each record from the shard --shard would give it."""
    kept = serial.read_text().splitlines(keepends=True)
    out = tmp_path / "ray.jsonl"
    out.write_text("".join(kept[:3]) + kept[3][:40])
    assert main(["eval", *args, "--ray", "local", "--shards", "2", "--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "7 candidates in 2 shards as Ray tasks on local, each asking for {'num_cpus': 2, 'num_gpus': 0}" \
        in captured.err and "(7 run now)" in captured.out, captured.err
    assert verdicts(out) == verdicts(serial)
    assert local_ray.is_initialized()  # a cluster pkit did not start is left running
    owner = {}
    for k in range(2):
        for _, candidate in shards.select(_pairs(args), shards.Shard(k, 2)):
            owner[candidate.relpath] = f"{k}/2"
    ran = [r for _, r in read_lines(out)[0]][3:]
    assert len(ran) == 7 and all(r["provenance"]["shard"] == owner[r["solution"]] for r in ran)


def _pairs(args: list[str]) -> list:
    """The (problem, candidate) pairs `pkit eval ARGS` evaluates."""
    from pkit.cli import build_parser
    from pkit.harness.commands import EvalCommand
    from pkit.harness.eval_command import plan_eval

    namespace = build_parser().parse_args(["eval", *args, "--out", "unused.jsonl"])
    return plan_eval(EvalCommand.from_namespace(namespace)).pairs


def test_candidate_identity_ignores_where_the_files_lie():
    a = Candidate(Path("/x/good/01_sum/0.py"), str(PurePosixPath("good/01_sum/0.py")), "01_sum", "good", 0)
    b = Candidate(Path("/y/good/01_sum/0.py"), "good/01_sum/0.py", "01_sum", "good", 0)
    problem = SimpleNamespace(name="01_sum")
    assert shards.identity((problem, a)) == shards.identity((problem, b)) == ("01_sum", "good/01_sum/0.py", "good",
                                                                              "solution")
