"""Tests of the evaluation harness (pkit.harness): CPU, gloo, world size 2, tiny sizes.

Fixture problems live in tests/fixtures/problems, correct samples in tests/fixtures/samples
(`<model>/<problem>/<k>.py`), deliberately broken candidates in tests/fixtures/candidates/01_sum.
The PKB adapter is tested on a small checkout of ParallelKernelBench's shape that the test builds.
"""
from __future__ import annotations

import json
import math
import os
import pickle
import textwrap
import time
from pathlib import Path, PurePosixPath

import numpy as np
import pandas as pd
import pytest
import torch

from pkit.harness import (candidate, checks, contain, failures, integrity, launch, problems, records, runner, solutions,
                          speedup)
from pkit.harness.cli import main

pytestmark = [pytest.mark.heavy, pytest.mark.usefixtures("shared_zygote")]

FIXTURES = Path(__file__).parent / "fixtures"
FIXTURE_PROBLEMS = FIXTURES / "problems"
HANG_TIMEOUT_S = 3  # s: hang.py never answers; every other broken candidate is done in under one


def run_cli(*argv: str) -> int:
    return main([str(a) for a in argv])


def by_solution(path: Path) -> dict:
    return {r["solution"]: r for r in records.read_jsonl(path)}


# --- layout parsing ------------------------------------------------------------------------------------------

ALIASES = {"01_allreduce": "01_allreduce", "allreduce": "01_allreduce", "1_allreduce": "1_allreduce"}


@pytest.mark.parametrize("rel, problem, model, sample, backend", [
    ("gpt-5/01_allreduce/3.py", "01_allreduce", "gpt-5", 3, None),
    ("zai-org/GLM-5.1/allreduce/12.py", "01_allreduce", "zai-org/GLM-5.1", 12, None),
    ("gpt-5/01_allreduce/fast.py", "01_allreduce", "gpt-5", None, None),
    ("01_allreduce/solutions/torch_alt.py", "01_allreduce", None, None, None),
    ("01_allreduce/mine.py", "01_allreduce", None, None, None),
    ("1_allreduce_cuda.py", "1_allreduce", None, None, "cuda"),
])
def test_solution_paths_give_problem_model_and_sample(rel, problem, model, sample, backend):
    c = solutions.parse(PurePosixPath(rel), ALIASES)
    assert (c.problem, c.model, c.sample, c.backend) == (problem, model, sample, backend)
    assert c.relpath == rel


@pytest.mark.parametrize("rel", ["01_allreduce/problem.py", "gpt-5/_helpers.py", "other/3.py",
                                 "01_allreduce/a/b/3.py", "01_allreduce/notes.txt"])
def test_paths_that_are_not_candidates(rel):
    assert solutions.parse(PurePosixPath(rel), ALIASES) is None


def test_discover_fixture_samples():
    aliases = {a: p.name for p in problems.discover(FIXTURE_PROBLEMS) for a in p.aliases}
    found, unmatched = solutions.discover(FIXTURES / "samples", aliases)
    assert [(c.problem, c.model, c.sample) for c in found] == [
        ("01_sum", "good-model", 0), ("01_sum", "good-model", 1), ("02_gather_scale", "org/model-b", 0)]
    assert unmatched == [] and all(c.path.is_absolute() for c in found)


# --- correctness checks (in process) --------------------------------------------------------------------------

def _check(ref, sol, inputs, sol_inputs=None):
    return checks.compare(ref, sol, ref_inputs=inputs, sol_inputs=sol_inputs or inputs,
                          pristine=checks.clone_tree(inputs))


def test_checks_pass_within_dtype_tolerance():
    x = torch.randn(8, 8)
    c = _check(x * 2, x * 2 + 1e-6, (x,))
    assert c.ok and c.flags == [] and c.max_abs_err < 1e-5
    bf = torch.randn(16).bfloat16()
    assert checks.tolerance(bf.dtype) == (2e-2, 2e-2) and _check(bf, bf.clone(), (bf,)).ok


def test_checks_report_first_bad_index_and_fraction():
    x = torch.randn(4, 4)
    bad = x.clone()
    bad[2:, :] += 1
    c = _check(x, bad, (torch.ones(1),))
    assert not c.ok and c.first_bad_index == [2, 0] and c.mismatch_fraction == 0.5
    assert "8 of 16 elements" in c.note and c.max_abs_err == pytest.approx(1.0)


@pytest.mark.parametrize("make_sol, flag", [
    (lambda x, ref: x, "aliases_input"),
    (lambda x, ref: x.clone(), "equals_input"),
    (lambda x, ref: torch.zeros_like(ref), "all_zero"),
    (lambda x, ref: ref.double(), "wrong_dtype"),
    (lambda x, ref: ref[:2], "wrong_shape"),
    (lambda x, ref: (ref,), "wrong_structure"),
    (lambda x, ref: torch.full_like(ref, float("nan")), "non_finite"),
])
def test_checks_flag_tricks(make_sol, flag):
    x = torch.randn(6)
    ref = x * 3
    c = _check(ref, make_sol(x, ref), (x,))
    assert not c.ok and flag in c.flags


def test_checks_flag_mutated_input_even_when_values_are_right():
    x = torch.randn(5)
    ref = x * 2
    mine = x.clone()
    mine.mul_(2)
    c = checks.compare(ref, mine, ref_inputs=(x,), sol_inputs=(mine,), pristine=(x.clone(),))
    assert not c.ok and "mutated_input" in c.flags and "modified" in c.note


def test_checks_compare_tuples_and_plain_values():
    x = torch.randn(3)
    assert _check((x, 2.0, "a"), (x.clone(), 2.0 + 1e-12, "a"), (torch.ones(1),)).ok
    c = _check((x, 2), (x.clone(), 3), (torch.ones(1),))
    assert not c.ok and "got 3, expected 2" in c.note


@pytest.mark.parametrize("make", [
    lambda: torch.randn(64).to(torch.float8_e4m3fn),
    lambda: torch.randn(64).to(torch.float8_e5m2),
    lambda: torch.randn(8, 8, dtype=torch.complex64),
    lambda: torch.randn(8, 16)[:, ::2],                      # non-contiguous
    lambda: torch.randn(6, 6).to_sparse(),                    # sparse COO
    lambda: torch.randint(0, 9, (32,), dtype=torch.int64),
])
def test_checks_handle_every_dtype_and_layout_pkb_uses(make):
    ref = make()
    assert _check(ref, ref.clone(), (torch.ones(1),)).ok
    wrong = ref.to_dense() if ref.layout != torch.strided else ref.clone()
    if ref.layout != torch.strided:
        c = _check(ref, wrong, (torch.ones(1),))
        assert not c.ok and "wrong_layout" in c.flags
        return
    flat = wrong.view(-1) if wrong.is_contiguous() else wrong.reshape(-1)
    if wrong.dtype.is_complex:
        wrong = wrong + (1 + 1j)
    elif wrong.dtype.is_floating_point:
        wrong = (wrong.float() + 4).to(ref.dtype)
    else:
        wrong = wrong + 1
    c = _check(ref, wrong, (torch.ones(1),))
    assert not c.ok and c.mismatch_fraction == 1.0 and flat.numel() > 0


def test_checks_reject_tensor_subclasses_whatever_they_claim():
    class Agreeable(torch.Tensor):
        def __eq__(self, other):
            return True

    ref = torch.ones(4)
    c = _check(ref, torch.zeros(4).as_subclass(Agreeable), (torch.ones(1),))
    assert not c.ok and "tensor_subclass" in c.flags


def test_checks_see_mutation_of_non_tensor_inputs():
    x = torch.ones(3)
    before = ([x, x.clone()], {"k": 2}, 1.5)
    after = ([x, x.clone(), x.clone()], {"k": 2}, 1.5)
    c = checks.compare(x, x.clone(), pristine=before, ref_inputs=before, sol_inputs=after)
    assert not c.ok and "mutated_input" in c.flags
    after = ([x, x.clone()], {"k": 3}, 1.5)
    c = checks.compare(x, x.clone(), pristine=before, ref_inputs=before, sol_inputs=after)
    assert not c.ok and "mutated_input" in c.flags and "input[1]['k']" in c.note


def test_checks_hold_inplace_inputs_to_the_reference_update():
    g = torch.randn(5)
    ref_after, sol_same, sol_off = (g * 0.5,), (g * 0.5,), (g * 0.4,)
    norm = torch.tensor(2.0)
    ok = checks.compare(norm, norm.clone(), pristine=(g,), ref_inputs=ref_after, sol_inputs=sol_same,
                        inplace={"input[0]"})
    assert ok.ok, ok.note
    bad = checks.compare(norm, norm.clone(), pristine=(g,), ref_inputs=ref_after, sol_inputs=sol_off,
                         inplace={"input[0]"})
    assert not bad.ok and bad.flags == ["inplace_result"]
    untouched = checks.compare(norm, norm.clone(), pristine=(g,), ref_inputs=ref_after, sol_inputs=(g.clone(),),
                               inplace={"input[0]"})
    assert not untouched.ok and "inplace_result" in untouched.flags


def test_snapshots_refuse_oversized_and_foreign_files(tmp_path):
    from pkit.harness import snapshot

    path = str(tmp_path / "x.pt")
    snapshot.save(path, torch.zeros(1000))
    with pytest.raises(snapshot.SnapshotError, match="over the cap"):
        snapshot.load(path, max_bytes=100)
    with open(path, "wb") as f:
        pickle.dump({"kind": "tensor", "data": [1, 2]}, f)
    with pytest.raises(snapshot.SnapshotError, match="tensor data"):
        snapshot.load(path)
    (tmp_path / "evil.pt").write_bytes(b"cos\nsystem\n(S'echo pwned'\ntR.")
    with pytest.raises(snapshot.SnapshotError, match="not a readable snapshot"):
        snapshot.load(str(tmp_path / "evil.pt"))


def test_records_validate_fields_and_status():
    r = records.new_record(problem="p", status="timeout", flags=["side_stream", "side_stream"])
    assert list(r) == list(records.FIELDS) and r["flags"] == ["side_stream"]
    with pytest.raises(ValueError, match="status"):
        records.new_record(status="fine")
    with pytest.raises(ValueError, match="unknown record fields"):
        records.new_record(status="timeout", colour="red")


def _rank(rank, order, error=None, peer=False, t=0.0, code=1):
    report = None if error is None else {"kind": error, "phase": "candidate", "type": "E", "message": "m",
                                         "traceback": "", "peer_failure": peer, "time": t}
    return launch.RankState(rank, 100 + rank, "candidate, trial 0", report, code, order)


def test_root_cause_prefers_own_errors_then_crashes_over_echoes():
    echo, crash = _rank(0, 0, "runtime_error", peer=True, t=1.0), _rank(1, 1, code=-6)
    assert failures.root_cause([echo, crash]) is crash
    own = _rank(1, 1, "runtime_error", t=2.0)
    assert failures.root_cause([echo, own]) is own
    assert failures.root_cause([_rank(0, 0, "runtime_error", t=1.0), _rank(1, 1, "compile_error", t=3.0)]).rank == 1
    assert failures.root_cause([_rank(0, None, code=-9), _rank(1, None, code=-9)]) is None


# --- end to end: fresh worker processes, gloo, world size 2 ---------------------------------------------------

def test_fixture_references_and_samples_pass(tmp_path, fewest_rounds):
    out = tmp_path / "good.jsonl"
    assert run_cli("eval", "--problems-root", FIXTURE_PROBLEMS, "--solutions", FIXTURES / "samples",
                   "--reference-as-candidate", "--trials", 2, "--perf", "--warmup", 2, "--iters", 5, "--out", out) == 0
    recs = by_solution(out)
    assert set(recs) == {"01_sum/problem.py:reference", "02_gather_scale/problem.py:reference",
                         "good-model/01_sum/0.py", "good-model/01_sum/1.py", "org/model-b/02_gather_scale/0.py"}
    for r in recs.values():
        assert r["status"] in records.CORRECT, r
        assert r["world_size"] == 2 and r["device"] == "cpu" and r["size"] == "tiny" and r["trials"] == 2
        assert r["timing"] == "full" and r["rotations"] == 5 and r["ref_time_min_ms"] <= r["ref_time_ms"]
        assert r["speedup"] > 0 and r["sol_time_ms"] > 0 and r["roofline_time_ms"] > 0
        assert r["roofline_fraction"] == pytest.approx(r["roofline_time_ms"] / r["sol_time_ms"])
        assert len(r["per_rank"]) == 2 and all(p["ok"] for p in r["per_rank"]) and r["flags"] == []
        assert len(r["provenance"]["solution_sha256"]) == 64 and "pkit_commit" in r["provenance"]
    sample = recs["org/model-b/02_gather_scale/0.py"]
    assert (sample["model"], sample["sample"], sample["category"]) == ("org/model-b", 0, "fused")


BROKEN = {  # candidate file → (status, flags that must be present)
    "wrong_values.py": ("wrong_result", set()),
    "wrong_dtype.py": ("wrong_result", {"wrong_dtype"}),
    "zeros.py": ("wrong_result", {"all_zero"}),
    "returns_input.py": ("wrong_result", {"aliases_input", "equals_input"}),
    "partial_write.py": ("wrong_result", set()),
    "mutates_input.py": ("wrong_result", {"mutated_input"}),
    "raises.py": ("runtime_error", set()),
    "crash.py": ("runtime_error", set()),
    "hang.py": ("timeout", set()),
    "syntax_error.py": ("compile_error", set()),
    "compile_error.py": ("compile_error", set()),
}


def test_broken_candidates_get_their_status_and_the_run_goes_on(tmp_path):
    out = tmp_path / "broken.jsonl"
    assert run_cli("eval", "--problems-root", FIXTURE_PROBLEMS, "--solutions", FIXTURES / "candidates",
                   "--trials", 2, "--timeout", HANG_TIMEOUT_S, "--out", out) == 0
    recs = {Path(k).name: r for k, r in by_solution(out).items()}
    assert set(recs) == set(BROKEN)
    for name, (status, flags) in BROKEN.items():
        r = recs[name]
        assert r["status"] == status, (name, r["status"], r["error"])
        assert flags <= set(r["flags"]), (name, r["flags"])
        assert (r["error"] is None) == (status.startswith("correct")), name
        assert len(r["error"]) <= records.EXCERPT_CHARS
        assert r["speedup"] is None and r["sol_time_ms"] is None
    partial = recs["partial_write.py"]["per_rank"]
    assert [p["first_bad_index"] for p in partial] == [[32], [32]]
    assert all(p["mismatch_fraction"] == 0.5 and not p["ok"] for p in partial)
    assert "SyntaxError" in recs["syntax_error.py"]["error"]
    assert "blockIdxx" in recs["compile_error.py"]["error"]
    assert "ValueError: candidate gave up" in recs["raises.py"]["error"]
    assert "SIGABRT" in recs["crash.py"]["error"] and "rank 1" in recs["crash.py"]["error"]
    assert "rank 0 in phase" in recs["hang.py"]["error"]
    assert recs["wrong_values.py"]["max_abs_err"] == pytest.approx(1.0)


def test_a_hang_is_killed_with_every_process_it_started(tmp_path):
    problem = problems.discover(FIXTURE_PROBLEMS)[0]
    spec = {"source": problem.source, "world_size": 2, "device": "cpu", "size": "tiny", "dtype": "float32",
            "pg_timeout_s": 60, "role": "candidate",
            "candidate": {"path": str(FIXTURES / "candidates" / "01_sum" / "hang.py"), "function": "solution"}}
    workers = launch.WorkerSet(spec, tmp_path)
    start = time.monotonic()
    workers.gather("ready", start + 60)
    workers.send({"op": "trials", "seeds": [0]})
    with pytest.raises(launch.RunTimeout):
        workers.gather("trial", time.monotonic() + 1)
    ranks = workers.close()
    assert time.monotonic() - start < 60
    assert [r.phase for r in ranks] == ["candidate, trial 0", "candidate, trial 0"]
    for r in ranks:
        assert r.returncode == -9 and r.error is None
        with pytest.raises(ProcessLookupError):
            os.kill(r.pid, 0)


def test_one_candidate_file_is_evaluated(tmp_path, shared_zygote, fewest_rounds):
    out = tmp_path / "one.jsonl"
    sample = FIXTURES / "samples" / "good-model" / "01_sum" / "1.py"
    assert run_cli("eval", "--problems-root", FIXTURE_PROBLEMS, "--solutions", sample, "--trials", 1, "--out", out) == 0
    (record,) = records.read_jsonl(out)
    assert record["problem"] == "01_sum" and record["status"].startswith("correct")
    zygote = shared_zygote.proc.pid  # the module's evaluations fork from one zygote, left running between them
    loose = tmp_path / "mine.py"
    loose.write_text(sample.read_text())
    assert run_cli("eval", "--problems-root", FIXTURE_PROBLEMS, "--solutions", loose, "--out", out) == 2
    assert run_cli("eval", "--problems-root", FIXTURE_PROBLEMS, "--solutions", loose, "--problems", "01_sum",
                   "--trials", 1, "--out", tmp_path / "loose.jsonl") == 0
    assert records.read_jsonl(tmp_path / "loose.jsonl")[0]["solution"] == "mine.py"
    assert shared_zygote.alive() and shared_zygote.proc.pid == zygote
    workers = lambda: [p for p, parent in contain.parent_links().items() if parent == zygote]  # noqa: E731
    deadline = time.monotonic() + 2  # they were killed with their runs (the zygote reaps each as it ends)
    while workers() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not workers()


def test_console_line_names_the_reason_of_a_failure():
    record = records.new_record(problem="p", solution="s.py", status="wrong_result", error="rank 0: out differs\nmore")
    assert runner.progress_line(1, 2, record) == "[1/2] p s.py: wrong_result — rank 0: out differs"
    log = "\n".join(f"k.cu({i}): error: number {i}" for i in range(20))
    failed = records.new_record(problem="p", solution="s.py", status="compile_error",
                                error=f"rank 0, phase load_candidate: CompileError: compiling 'k.cu' failed:\n{log}\n"
                                      "Traceback (most recent call last):\n  File x")
    lines = runner.progress_line(1, 2, failed).splitlines()
    assert lines[0] == ("[1/2] p s.py: compile_error — rank 0, phase load_candidate: CompileError: compiling 'k.cu' "
                        "failed:")
    assert lines[1:] == [f"    k.cu({i}): error: number {i}" for i in range(runner.COMPILER_LINES - 1)]


def test_problems_cli_lists_cost_and_roofline(capsys):
    assert run_cli("problems", "--problems-root", FIXTURE_PROBLEMS, "--format", "json") == 0
    rows = json.loads(capsys.readouterr().out)
    assert {(r["problem"], r["size"]) for r in rows} == {
        ("01_sum", "tiny"), ("01_sum", "medium"), ("01_sum", "large"), ("02_gather_scale", "tiny"),
        ("02_gather_scale", "large")}
    big = next(r for r in rows if r["problem"] == "01_sum" and r["size"] == "large")
    assert big["category"] == "collectives" and big["link_bytes"] == 4 * (1 << 24)
    assert big["bound"] == "link" and big["roofline_time_ms"] > 0


def test_cli_errors_name_the_bad_argument(tmp_path, capsys):
    assert run_cli("eval", "--problems-root", FIXTURE_PROBLEMS, "--trials", 0, "--out", tmp_path / "x") == 2
    assert "trials" in capsys.readouterr().err
    assert run_cli("eval", "--problems-root", FIXTURE_PROBLEMS, "--problems", "nope", "--out", tmp_path / "x") == 2
    assert "nope" in capsys.readouterr().err
    assert run_cli("eval", "--problems-root", FIXTURE_PROBLEMS) == 2
    assert "--out" in capsys.readouterr().err


# --- ParallelKernelBench checkout adapter -----------------------------------------------------------------------

PKB_FILES = {
    "run_local.py": '"""Stand-in for PKB\'s launcher; the adapter does not use it."""\n',
    "reference/1_allreduce.py": """
        import torch
        import torch.distributed as dist


        @torch.no_grad()
        def solution(tensor):
            out = tensor.clone()
            dist.all_reduce(out, op=dist.ReduceOp.SUM)
            return out
        """,
    "reference/2_allgather.py": """
        import torch
        import torch.distributed as dist


        @torch.no_grad()
        def solution(tensor):
            parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
            dist.all_gather(parts, tensor)
            return torch.cat(parts)
        """,
    "utils/input_output_tensors.py": """
        import torch


        def create_input_tensor(rank, world_size, problem_id, base_shape, dtype, trial=0, device=None):
            torch.manual_seed(1000 * problem_id + 17 * rank + 7919 * trial)
            dev = device if device is not None else torch.device("cuda", rank)
            return (torch.randn(base_shape, dtype=dtype, device=dev),)
        """,
    "solutions_cuda/1_allreduce_cuda.py": """
        import torch
        import torch.distributed as dist


        def solution(tensor):
            parts = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
            dist.all_gather(parts, tensor)
            return torch.stack(parts).sum(0)
        """,
    "solutions_cuda/2_allgather_cuda.py": """
        import torch


        def solution(tensor):
            return torch.cat([tensor, tensor])
        """,
}


def make_pkb_checkout(root: Path) -> Path:
    for rel, text in PKB_FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text).lstrip())
    return root


def test_pkb_checkout_is_evaluated_unchanged(tmp_path, fewest_rounds):
    root = make_pkb_checkout(tmp_path / "ParallelKernelBench")
    out = tmp_path / "pkb.jsonl"
    assert run_cli("eval", "--pkb-root", root, "--solutions", root / "solutions_cuda", "--size", "8x16",
                   "--trials", 2, "--model", "glm", "--out", out) == 0
    recs = by_solution(out)
    good, bad = recs["1_allreduce_cuda.py"], recs["2_allgather_cuda.py"]
    assert good["status"] in records.CORRECT and good["problem"] == "1_allreduce"
    assert (good["backend"], good["model"], good["category"], good["size"]) == ("cuda", "glm", "pkb", "8x16")
    assert good["dtype"] == "bfloat16" and good["roofline_time_ms"] is None
    assert bad["status"] == "wrong_result" and "atol=0.01 rtol=0.01" in bad["error"]


def test_pkb_checkout_problem_listing_and_errors(tmp_path, capsys):
    root = make_pkb_checkout(tmp_path / "pkb")
    assert run_cli("problems", "--pkb-root", root, "--format", "csv") == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(",")[0] for line in lines[1:]] == ["1_allreduce", "2_allgather"]
    assert run_cli("eval", "--pkb-root", tmp_path, "--solutions", root, "--out", tmp_path / "x") == 2
    assert "not a ParallelKernelBench checkout" in capsys.readouterr().err
    assert run_cli("eval", "--pkb-root", root, "--size", "big", "--solutions", root / "solutions_cuda",
                   "--out", tmp_path / "x") == 2
    assert "MxN" in capsys.readouterr().err


# --- the repository's problems ----------------------------------------------------------------------------------

def test_every_repo_problem_reference_runs_and_passes_as_candidate(tmp_path, fewest_rounds):
    """Every shipped reference through the whole harness as its own candidate: its trial, then the interleaved
    timing rounds at three calls a window (what this checks is that the timed calls run and match, not their
    speed)."""
    if not list(problems.default_root().glob("*/problem.py")):
        pytest.skip("no problems/*/problem.py yet")
    out = tmp_path / "refs.jsonl"
    assert run_cli("eval", "--solutions", tmp_path, "--reference-as-candidate", "--trials", 1, "--perf",
                   "--warmup", 1, "--iters", 3, "--timeout", 120, "--out", out) == 0
    recs = records.read_jsonl(out)
    expected = [p.name for p in problems.discover() if runner.unsupported(p, runner.EvalOptions()) is None]
    assert sorted(r["problem"] for r in recs) == sorted(expected)
    failed = {r["problem"]: (r["status"], r["error"]) for r in recs if not r["status"].startswith("correct")}
    assert not failed


def test_baselines_and_pkb_references_are_recorded_from_a_sweep_split_into_runs(tmp_path, monkeypatch, fewest_rounds,
                                                                               capsys):
    from pkit.harness.baseline import main as record_main

    monkeypatch.setenv("PKIT_RESULTS", str(tmp_path / "results"))
    parts = []
    for name in ("02_gather_scale", "01_sum"):
        part = tmp_path / f"{name}.jsonl"
        assert run_cli("eval", "--problems-root", FIXTURE_PROBLEMS, "--reference-as-candidate", "--problems", name,
                       "--size", "tiny", "--device", "cpu", "--trials", 1, "--perf", "--warmup", 1, "--iters", 4,
                       "--out", part) == 0
        parts.append(part)
    assert record_main(["pkit", *map(str, parts), "--machine", "m"]) == 0
    table = pd.read_csv(tmp_path / "results" / "m" / "baselines.csv")
    assert list(table["problem"]) == ["01_sum", "02_gather_scale"]
    assert table["status"].str.startswith("correct").all() and (table["ref_time_ms_median"] > 0).all()
    prov = json.loads((tmp_path / "results" / "m" / "baselines.json").read_text())
    runs = prov["parameters"]["runs"]  # two runs in one second at one commit share their stamp
    assert 1 <= len(runs) <= 2 and all(r["pkit_commit"] and r["utc_time"] for r in runs), runs
    assert prov["gpu_count"] == 0 and "recorded_by" in prov
    quick = tmp_path / "quick.jsonl"
    assert run_cli("eval", "--problems-root", FIXTURE_PROBLEMS, "--reference-as-candidate", "--problems", "01_sum",
                   "--size", "tiny", "--device", "cpu", "--trials", 1, "--out", quick) == 0
    capsys.readouterr()
    for bad, line in ((quick, "jsonl_paths: expected records of references run as candidates with full timing"),
                      (quick.parent, f"RECORDS: expected JSONL files written by pkit eval --out, got {quick.parent}"),
                      (Path("/dev/zero"), "RECORDS: expected JSONL files written by pkit eval --out, got /dev/zero")):
        with pytest.raises(SystemExit) as refused:  # one line, exit code 2, nothing recorded (nor read, for a device)
            record_main(["pkit", str(bad), "--machine", "m"])
        err = capsys.readouterr().err
        assert refused.value.code == 2 and err.count("\n") == 1, err
        assert err.startswith(f"python -m pkit.harness.baseline: error: {line}"), err


def _timing(call_ms: list[float], sets: int, build_s: float = 1.0, gap_ms: float = 0.1):
    """A one-rank Timing whose window is its calls plus `gap_ms` around each, after `build_s` of building."""
    from pkit.harness.reference import Timing

    window = sum(call_ms) / 1e3 + len(call_ms) * gap_ms / 1e3
    return Timing([list(call_ms)], [window], list(range(sets)), set(), [[c + gap_ms for c in call_ms[1:]]],
                  [], [build_s])


def test_reference_as_its_own_candidate_is_level_and_sleepers_are_slower_or_faster(tmp_path):
    # the reference sleeps 10 ms a call, fast.py 1 ms, slow.py 30 ms: far beyond CPU noise, on either side, so five
    # calls a window (--perf --iters 5, half the quick timing's ten) tell them apart as surely; the rounds run until
    # MIN_ROUNDS of them pass the timing checks (on a loaded machine a round can fail them, and the fewest rounds
    # alone would then leave too few for an interval)
    out = tmp_path / "timing.jsonl"
    assert run_cli("eval", "--problems-root", FIXTURES / "timing_problems", "--solutions",
                   FIXTURES / "timing_candidates", "--reference-as-candidate", "--trials", 1, "--perf", "--warmup", 1,
                   "--iters", 5, "--out", out) == 0
    recs = {Path(k).name: r for k, r in by_solution(out).items()}
    band = 1 + records.TIE_BAND
    for r in recs.values():
        assert r["speedup_low"] <= r["speedup"] <= r["speedup_high"], r
        assert runner.MIN_ROUNDS <= r["timing_rounds"] <= runner.MAX_ROUNDS and r["flags"] == [], r
    own = recs["problem.py:reference"]
    assert own["status"] == "correct_level", (own["speedup_low"], own["speedup_high"])
    assert own["speedup_low"] <= band and own["speedup_high"] >= 1 / band
    assert recs["fast.py"]["status"] == "correct_faster" and recs["fast.py"]["speedup_low"] > band, recs["fast.py"]
    assert recs["slow.py"]["status"] == "correct_slower" and recs["slow.py"]["speedup_high"] < 1 / band, recs["slow.py"]


def test_speed_status_and_interval():
    assert records.speed_status(1.1, 1.3) == "correct_faster"
    assert records.speed_status(1.04, 1.3) == "correct_level"  # meets the band
    assert records.speed_status(0.5, 0.94) == "correct_slower"
    assert records.speed_status(0.5, 0.96) == "correct_level"
    low, high = runner.speedup_interval([[1.0, 1.1, 0.9], [1.2, 1.1], [0.9, 1.0]] * 2, [[1.0, 1.1, 0.9]] * 6)
    assert low < 1 < high
    low, high = runner.speedup_interval([[3.0, 3.1, 2.9], [3.3, 3.2, 3.4]] * 3, [[1.0, 1.1, 0.9], [1.05, 1.0, 1.1]] * 3)
    assert 2.5 < low <= high < 3.6
    assert runner.speedup_interval([[2.0, 2.2]] * 5, [[1.0, 1.1]] * 5) == (0.0, math.inf)  # too few rounds


def test_speedup_interval_is_over_rounds_not_calls():
    """The rounds are the samples: many calls in each round do not narrow the interval when the rounds disagree
    (drift); it runs from the k-th smallest to the k-th largest round ratio, and covers the true ratio of rounds
    drawn around it about as often as it claims."""
    rounds = [1.3, 0.8, 1.1, 0.9, 1.2, 0.95, 1.05, 0.85, 1.0]  # the reference's time per round; the candidate 1.0
    few = runner.speedup_interval([[ms] * 3 for ms in rounds], [[1.0] * 3] * len(rounds))
    many = runner.speedup_interval([[ms] * 300 for ms in rounds], [[1.0] * 300] * len(rounds))
    k = speedup.order_rank(len(rounds))
    assert few == many == (sorted(rounds)[k - 1], sorted(rounds)[-k]), (few, many, k)
    rng = np.random.default_rng(5)
    held = 0
    for _ in range(400):  # rounds whose log ratio is heavy-tailed around 1.0 (t with 2 degrees of freedom)
        logs = 0.1 * rng.standard_t(2, 9)
        low, high = runner.speedup_interval([[math.exp(v)] for v in logs], [[1.0]] * 9)
        held += low <= 1.0 <= high
    assert 0.93 <= held / 400 <= 0.995, held


def _settle(ratio: float, noise: float, rounds: int) -> list:
    """`rounds` interleaved rounds whose reference takes `ratio` times the candidate's 1 ms, round k's ratio moved by
    `noise` times a fixed zig-zag."""
    zigzag = [1, -1, 0.5, -0.5, 0.8, -0.8, 0.2, -0.2, 1, -1, 0.5, -0.5, 0.3, -0.3]
    return [(_timing([ratio * (1 + noise * zigzag[k])] * 10, sets=10), _timing([1.0] * 10, sets=10))
            for k in range(rounds)]


def test_rounds_settle_early_on_a_clear_verdict_and_not_on_an_open_one():
    assert not candidate.settled(_settle(2.0, 0.05, candidate.MIN_ROUNDS - 1))  # never before MIN_ROUNDS
    assert candidate.settled(_settle(2.0, 0.05, candidate.MIN_ROUNDS))  # clearly faster: stop at once
    assert candidate.settled(_settle(0.5, 0.05, candidate.MIN_ROUNDS))  # clearly slower
    assert candidate.settled(_settle(1.0, 0.002, candidate.MIN_ROUNDS))  # level, and tightly so
    assert not candidate.settled(_settle(1.0, 0.1, candidate.MIN_ROUNDS))  # level or not: more rounds
    assert not candidate.settled(_settle(1.06, 0.1, candidate.MIN_ROUNDS + 2))  # near the band's edge: still open


def test_a_clearly_faster_candidate_stops_after_the_fewest_rounds_and_identical_code_reads_level():
    """`time_rounds` on a stand-in reference and candidate: a candidate twice as fast stops after the warm round and
    MIN_ROUNDS; the reference against itself (the same times, with the noise of a few percent each round) goes on
    until its interval lies inside the tie band or the rounds run out, and reads level."""
    rng = np.random.default_rng(3)

    def run_with(candidate_ms: float):
        run = candidate.CandidateRun.__new__(candidate.CandidateRun)
        run.rounds, run.plans, run.retime_s, run.compared = [], [], None, None

        def timed_round(k, iters, deadline):
            return (_timing(list(rng.normal(1.0, 0.03, iters)), sets=iters),
                    _timing(list(rng.normal(candidate_ms, 0.03 * candidate_ms, iters)), sets=iters))

        run.timed_round = timed_round
        run.options = runner.EvalOptions()
        run.time_rounds(10, math.inf, candidate.MAX_ROUNDS)
        return run.rounds

    fast = run_with(0.5)
    assert len(fast) == candidate.WARM_ROUNDS + candidate.MIN_ROUNDS
    assert speedup.timing_fields(fast[candidate.WARM_ROUNDS:])["status"] == "correct_faster"
    same = run_with(1.0)
    assert candidate.MIN_ROUNDS <= len(same) - candidate.WARM_ROUNDS <= candidate.MAX_ROUNDS
    assert speedup.timing_fields(same[candidate.WARM_ROUNDS:])["status"] == "correct_level"


def test_a_wrong_timed_output_ends_the_rounds_at_once():
    """`time_rounds` on a stand-in whose timed calls answer right in the warm round and wrong (by their fingerprint)
    from the next on: no round runs after the first wrong one, and `check_timed` names that round's calls."""
    import torch

    from pkit.harness.checks import fingerprint, fingerprint_check

    right = torch.randn(256, generator=torch.Generator().manual_seed(7))
    summary, wrong = fingerprint_check(right), fingerprint(right + 1.0)
    run = candidate.CandidateRun.__new__(candidate.CandidateRun)
    run.rounds, run.plans, run.retime_s, run.compared = [], [], None, None

    def timed_round(k, iters, deadline):
        ref, sol = _timing([1.0] * iters, sets=iters), _timing([1.0] * iters, sets=iters)
        ref.checks = [[summary] * iters]
        sol.checks = [[{"want": wrong if k >= 1 and i == 3 else fingerprint(right)} for i in range(iters)]]
        return ref, sol

    run.timed_round = timed_round
    run.options = runner.EvalOptions()
    run.time_rounds(10, math.inf, candidate.MAX_ROUNDS)
    assert len(run.rounds) == 2  # the warm round, then the first wrong one: the fewest rounds would be 1 + 6
    assert run.fingerprint_mismatches(0) == [] and run.check_timed() == run.fingerprint_mismatches(1)
    assert len(run.check_timed()) == 1 and run.check_timed()[0].startswith("round 2, rank 0, timed call 3: ")


def test_a_time_below_the_roofline_is_flagged_not_credited():
    fields = {"status": "correct_faster", "sol_time_ms": 0.5, "speedup": 4.0, "speedup_low": 3.0,
              "speedup_high": 5.0, "flags": set(), "error": None}
    wall = runner.roofline_wall(dict(fields), 1.0, "link", "cuda", "H200")
    assert wall["status"] == "correct_slower" and "beyond_roofline" in wall["flags"] and wall["speedup"] is None
    assert "link bound" in wall["error"] and "1 ms" in wall["error"]
    assert runner.roofline_wall(dict(fields), 1.0, "link", "cpu", "H200")["status"] == "correct_faster"  # gloo
    assert runner.roofline_wall(dict(fields), 0.4, "link", "cuda", "H200")["status"] == "correct_faster"  # above it
    assert runner.roofline_wall(dict(fields), None, None, "cuda", "H200")["status"] == "correct_faster"  # no model
    record = records.new_record(problem="p", **{k: v for k, v in wall.items()})
    assert record["flags"] == ["beyond_roofline"] and "beyond_roofline" in records.FLAGS


def test_timing_mismatch_believes_honest_noise_and_catches_remembered_answers_and_early_work():
    rng = torch.Generator().manual_seed(7)
    honest = lambda ms: [ms * (1 + 0.05 * float(v)) for v in torch.rand(100, generator=rng)]  # noqa: E731
    ref = _timing(honest(1.0), sets=6, build_s=3.7)
    assert runner.timing_mismatch(ref, _timing(honest(1.2), sets=6, build_s=4.9)) is None  # slower build: noise
    assert runner.timing_mismatch(ref, _timing(honest(0.6), sets=6, build_s=3.5)) is None  # truly faster
    remembered = [1.0] * 6 + [0.01] * 94
    why = runner.timing_mismatch(ref, _timing(remembered, sets=6, build_s=3.7))
    assert why and "reused input sets" in why
    early = runner.timing_mismatch(ref, _timing([0.01] * 100, sets=6, build_s=3.7 * 1.5 + 1.0))
    assert early and "building" in early
    assert runner.reuse_ratio(_timing(honest(1.0), sets=100)) is None


def _rounds(*reference_ms: float) -> list:
    """Interleaved rounds whose reference calls take `reference_ms[k]` in round k, beside a candidate at 1 ms."""
    return [(_timing([ms] * 10, sets=10), _timing([1.0] * 10, sets=10)) for ms in reference_ms]


def test_a_reference_slowed_beside_the_candidate_is_named_and_its_noise_is_not():
    alone = [_timing([1.0] * 10, sets=10)]
    why = integrity.reference_slowed(_rounds(1.5, 1.3, 1.4), alone)
    assert "median call took 1.4 ms" in why and "1.4x its 1 ms alone" in why and "left running" in why
    assert integrity.reference_slowed(_rounds(1.5, 1.05, 1.4), alone) is not None  # one round as fast as alone
    assert integrity.reference_slowed(_rounds(1.5, 1.05, 1.0), alone) is None  # the median call is as fast
    assert integrity.reference_slowed(_rounds(0.8), alone) is None  # faster beside the candidate
    limit = integrity.ALONE_RATIO * 1.0 + integrity.ALONE_SLACK_MS
    assert integrity.reference_slowed(_rounds(limit), alone) is None  # the boundary is allowed
    assert integrity.reference_slowed(_rounds(limit + 1e-3), alone) is not None
    latency = [_timing([0.03] * 10, sets=10)]  # a tiny size: 30 µs calls, 10% of which is jitter
    assert integrity.reference_slowed([(_timing([0.045] * 10, sets=10), latency[0])], latency) is None
    # several windows alone: the slowest is compared, and the reason says so
    strayed = [_timing([1.0] * 10, sets=10), _timing([1.35] * 10, sets=10)]
    assert integrity.reference_slowed(_rounds(1.5, 1.3, 1.4), strayed) is None
    why = integrity.reference_slowed(_rounds(1.5, 1.3, 1.4), [_timing([1.0] * 10, sets=10)] * 3)
    assert "1.4x its 1 ms in the slowest of 3 windows alone" in why, why


class _Reference:
    """A started reference whose windows timed alone are `alone` in turn (the last one again after the list ends);
    None: timing it again fails the test."""

    def __init__(self, alone):
        self.alone, self.sets, self.windows = alone, 1, 0

    def window(self, plan):
        assert self.alone is not None and len(plan.fresh) == runner.QUICK_TIMING["iters"] and not plan.kept
        self.windows += 1
        return self.alone[min(self.windows, len(self.alone)) - 1] if isinstance(self.alone, list) else self.alone


class _Run:
    """A candidate's run that passed its trials and timed outputs, with interleaved `rounds`."""

    def __init__(self, rounds: list, alone=None):
        self.rounds, self.reference, self.options, self.retime_s = rounds, _Reference(alone), runner.EvalOptions(), None
        self.tolerance, self.phases = {}, {}

    def check_timed(self) -> list:
        return []


def test_on_the_gpu_a_reference_slower_than_alone_is_a_timing_mismatch():
    fields = candidate.judged_fields(_Run(_rounds(9.0, *(2.0, 2.1, 2.2) * 2), _timing([1.0] * 10, sets=10)),  # 9: warm
                                     {"flags": set(), "phase_s": {}}, "cuda")
    assert fields["status"] == "correct_slower" and fields["flags"] == {"timing_mismatch"}, fields
    assert fields["speedup"] is None and fields["ref_time_ms"] == pytest.approx(2.1)
    assert fields["error"].startswith("timing_mismatch: the reference's median call took 2.1 ms"), fields["error"]
    assert fields["error"].endswith("not called faster")
    assert "parent: reference timed alone" in fields["phase_s"]
    believed = candidate.judged_fields(_Run(_rounds(9.0, *(2.0, 2.1, 2.2) * 2), _timing([2.05] * 10, sets=10)),
                                       {"flags": set(), "phase_s": {}}, "cuda")
    assert believed["status"] == "correct_faster" and believed["flags"] == set() and believed["error"] is None


def test_a_reference_window_alone_that_strays_fast_is_timed_again():
    """A noisy op: its first window alone happened to run fast, the second ran as the rounds did: believed, after
    two windows; a reference slowed beside the candidate is faster alone in every window, and named so after
    ALONE_WINDOWS of them."""
    strayed = _Run(_rounds(9.0, *(2.0, 2.1, 2.2) * 2), [_timing([1.0] * 10, sets=10), _timing([2.0] * 10, sets=10)])
    fields = candidate.judged_fields(strayed, {"flags": set(), "phase_s": {}}, "cuda")
    assert fields["status"] == "correct_faster" and fields["error"] is None and strayed.reference.windows == 2
    slowed = _Run(_rounds(9.0, *(2.0, 2.1, 2.2) * 2), _timing([1.0] * 10, sets=10))
    fields = candidate.judged_fields(slowed, {"flags": set(), "phase_s": {}}, "cuda")
    assert fields["flags"] == {"timing_mismatch"} and slowed.reference.windows == integrity.ALONE_WINDOWS
    assert f"slowest of {integrity.ALONE_WINDOWS} windows alone" in fields["error"], fields["error"]


def test_on_the_cpu_the_reference_is_not_timed_alone():
    fields = candidate.judged_fields(_Run(_rounds(9.0, *(2.0, 2.1, 2.2) * 2)), {"flags": set(), "phase_s": {}}, "cpu")
    assert fields["status"] == "correct_faster" and fields["speedup"] == pytest.approx(2.1), fields
    assert "parent: reference timed alone" not in fields["phase_s"]


# --- GPU: baselines -------------------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.multigpu
def test_baselines_record_reference_times_on_two_gpus(tmp_path, monkeypatch):
    from pkit import harness

    monkeypatch.setenv("PKIT_RESULTS", str(tmp_path))
    frame = harness.baselines(size="tiny", world_size=2, problems_root=FIXTURE_PROBLEMS, trials=1, warmup=2,
                              iters=5, machine="test-machine", device="cuda")
    assert list(frame["problem"]) == ["01_sum", "02_gather_scale"]
    assert (frame["ref_time_ms_median"] > 0).all() and (frame["device"] == "cuda").all()
    assert (tmp_path / "test-machine" / "baselines.csv").exists()
    assert (tmp_path / "test-machine" / "baselines.json").exists()


@pytest.mark.gpu
@pytest.mark.multigpu
def test_side_stream_result_is_caught_on_gpus(tmp_path):
    out = tmp_path / "gpu.jsonl"
    assert run_cli("eval", "--problems-root", FIXTURE_PROBLEMS, "--solutions", FIXTURES / "gpu_candidates",
                   "--reference-as-candidate", "--problems", "01_sum", "--size", "tiny", "--device", "cuda",
                   "--trials", 2, "--perf", "--warmup", 3, "--iters", 10, "--timeout", 120, "--out", out) == 0
    recs = by_solution(out)
    ref = recs["01_sum/problem.py:reference"]
    assert ref["status"].startswith("correct") and ref["device"] == "cuda" and ref["rotations"] > 1
    side = recs["01_sum/side_stream.py"]
    assert side["status"] == "wrong_result" and "side_stream" in side["flags"], side
