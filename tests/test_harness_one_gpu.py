"""The harness's CUDA timing path and its defences at world size 1, where one GPU is enough (NCCL and gloo accept a
one-rank group). The CPU tests run the same path on gloo; the `gpu` tests need one CUDA GPU (an H200).

Fixtures: tests/fixtures/problems_one_rank/01_row_sums (row sums, then an all-reduce; world sizes 1 and 2; 1 GiB input
sets at `large`) with candidates in tests/fixtures/gpu_candidates/01_row_sums, and tests/fixtures/problems/01_sum
(world sizes 1, 2 and 4) with gpu_candidates/01_sum/side_stream.py.

Candidate → what the harness gives (on the GPU unless said), and what decides it:
- the reference as its own candidate → correct_level: the same work in both roles, timed in interleaved rounds; the
  speedup's 95% interval meets the 5% tie band (on the CPU, where times are µs of noise: correct).
- side_stream.py (01_sum): writes its output on a side stream never joined back → wrong_result, side_stream: a trial's
  output is snapshotted after a current-stream sync and compared after a device-wide one.
- late_stream.py: the same only after the checked trials, behind a 2 ms spin → correct_slower, the spin timed: the
  timer's device-wide synchronize waits for every stream of the process before a sample ends and before the output is
  fingerprinted (neutralised, not caught: by then the output is complete and right).
- late_thread.py: the answer copied in by a thread a second after the call returned → wrong_result, all_zero: a
  trial's output is read as soon as the call and the device are done (CPU too).
- device_cache.py: answers cached on the device by address, shape and sampled values → wrong_result, timed_output:
  at `large` the 4 input sets are reused, and each call's set is changed just before it (pkit.harness.fresh), so a
  cached answer is stale. On the CPU each timed call has a set of its own: the cache never hits, and it is correct.
- previous_output.py: returns its previous output buffer after the trials → wrong_result, timed_output: every timed
  call has inputs of its own (CPU too).
- reuses_buffer.py (benign): one output buffer overwritten every call → correct: what is checked is copied at once.
- slows_reference.py: keeps the GPU busy from a thread of its idle process, so the reference, timed between the
  candidate's windows on the same GPU, runs slower → correct_slower, timing_mismatch: once the candidate's processes
  are gone the reference is timed alone, and its median call beside them was over 1.1x that
  (pkit.harness.integrity.reference_slowed).
"""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pkit.hardware import GPUS
from pkit.harness import runner, worker
from pkit.harness.problem import load_module
from pkit.harness.records import CORRECT, TIE_BAND
from pkit.timing import rotations_past_l2
from test_harness import FIXTURES, by_solution, run_cli

pytestmark = pytest.mark.usefixtures("shared_zygote")

ONE_RANK = FIXTURES / "problems_one_rank"
ROW_SUMS = "01_row_sums"
CANDIDATES = FIXTURES / "gpu_candidates"
ANY_DEVICE = ("late_thread.py", "device_cache.py", "previous_output.py", "reuses_buffer.py")
"""Candidates of 01_row_sums that run (and misbehave) on the CPU as well; the others call CUDA."""
REFERENCE = f"{ROW_SUMS}/problem.py:reference"
GPU_ITERS = 40
"""Timed calls per window in the GPU run: 10 per input set at `large`, where 4 sets fit the 4 GiB budget."""
TRIALS = 2
"""The checked trials; late_stream.py and previous_output.py misbehave from their third call on."""


def one_rank_eval(out: Path, solutions: Path, device: str, *extra) -> dict:
    """Records by solution of `pkit eval --world-size 1` over 01_row_sums, its reference as a candidate too."""
    assert run_cli("eval", "--problems-root", ONE_RANK, "--problems", ROW_SUMS, "--solutions", solutions,
                   "--reference-as-candidate", "--world-size", 1, "--device", device, "--trials", TRIALS,
                   "--timeout", 120, *extra, "--out", out) == 0
    recs = by_solution(out)
    for r in recs.values():
        assert (r["world_size"], r["device"]) == (1, device), r
        assert len(r["per_rank"]) == 1, r
    return recs


# --- CPU: the one-rank path on gloo -------------------------------------------------------------------------------

def test_one_gpu_is_enough_at_world_size_one(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert runner.pick_device("cuda", 1) == "cuda" and runner.pick_device("auto", 1) == "cuda"
    assert runner.pick_device("auto", 2) == "cpu"
    with pytest.raises(ValueError, match="needs 2 GPUs, found 1"):
        runner.pick_device("cuda", 2)


def test_the_large_sets_outgrow_the_budget_so_timed_calls_reuse_them(monkeypatch):
    """The premise of device_cache.py's GPU verdict: at `large` its cache can hit, because calls share sets."""
    sizes = load_module(ONE_RANK / ROW_SUMS / "problem.py", "row_sums_sizes").SIZES["large"]
    set_bytes = sizes["rows"] * sizes["cols"] * 4
    monkeypatch.setattr(worker, "l2_rotations",
                        lambda nbytes, device: rotations_past_l2(nbytes, int(GPUS["H200"].l2_mib) << 20))
    sets = worker.timed_set_count(set_bytes, build_s=0.01, device=torch.device("cuda"), iters=GPU_ITERS)
    assert sets == worker.FRESH_BYTES["cuda"] // set_bytes == 4 < GPU_ITERS


def test_the_sum_fixture_runs_at_world_size_one_on_gloo(tmp_path):
    out = tmp_path / "sum.jsonl"
    (tmp_path / "none").mkdir()
    assert run_cli("eval", "--problems-root", FIXTURES / "problems", "--problems", "01_sum", "--solutions",
                   tmp_path / "none", "--reference-as-candidate", "--world-size", 1, "--device", "cpu",
                   "--trials", TRIALS, "--out", out) == 0
    (r,) = by_solution(out).values()
    assert r["status"] in CORRECT and (r["world_size"], len(r["per_rank"])) == (1, 1), r


@pytest.fixture(scope="module")
def on_gloo(tmp_path_factory) -> dict:
    """Records of the reference and the ANY_DEVICE candidates at world size 1 on the CPU (quick timing)."""
    root = tmp_path_factory.mktemp("one_rank_cpu")
    (root / "solutions" / ROW_SUMS).mkdir(parents=True)
    for name in ANY_DEVICE:
        (root / "solutions" / ROW_SUMS / name).write_text((CANDIDATES / ROW_SUMS / name).read_text())
    return one_rank_eval(root / "cpu.jsonl", root / "solutions", "cpu")


ON_GLOO = {  # solution → (statuses allowed, flags that must be present)
    REFERENCE: (CORRECT, set()),
    f"{ROW_SUMS}/late_thread.py": (("wrong_result",), {"all_zero"}),
    f"{ROW_SUMS}/device_cache.py": (CORRECT, set()),
    f"{ROW_SUMS}/previous_output.py": (("wrong_result",), {"timed_output"}),
    f"{ROW_SUMS}/reuses_buffer.py": (CORRECT, set()),
}


def test_every_one_rank_candidate_got_a_record_on_gloo(on_gloo):
    assert set(on_gloo) == set(ON_GLOO)


@pytest.mark.parametrize("solution", sorted(ON_GLOO))
def test_one_rank_verdicts_on_gloo(on_gloo, solution):
    r = on_gloo[solution]
    statuses, flags = ON_GLOO[solution]
    assert r["status"] in statuses and flags <= set(r["flags"]), (solution, r["status"], r["flags"], r["error"])
    if r["status"] in CORRECT:  # the only flag allowed: a loaded CPU can fail an honest pair's timing checks
        assert set(r["flags"]) <= {"timing_mismatch"} and r["rotations"] == runner.QUICK_TIMING["iters"], r
    else:
        assert r["speedup"] is None and r["sol_time_ms"] is None


def test_late_writes_fail_the_first_trial_and_a_stale_output_its_timed_calls(on_gloo):
    assert on_gloo[f"{ROW_SUMS}/late_thread.py"]["trials_passed"] == 0
    assert on_gloo[f"{ROW_SUMS}/previous_output.py"]["trials_passed"] == TRIALS  # caught in its timed calls


# --- GPU: one CUDA GPU, NCCL with one rank ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def on_one_gpu(tmp_path_factory) -> dict:
    """Records of the reference and every 01_row_sums candidate at world size 1 on GPU 0, `large`, full timing."""
    out = tmp_path_factory.mktemp("one_rank_gpu") / "gpu.jsonl"
    return one_rank_eval(out, CANDIDATES, "cuda", "--size", "large", "--perf", "--warmup", 5, "--iters", GPU_ITERS)


@pytest.mark.gpu
def test_every_candidate_got_a_record_on_one_gpu(on_one_gpu):
    names = {p.name for p in (CANDIDATES / ROW_SUMS).glob("*.py")}
    assert set(on_one_gpu) == {REFERENCE, *(f"{ROW_SUMS}/{n}" for n in names)}


@pytest.mark.gpu
def test_the_reference_against_itself_is_level_on_one_gpu(on_one_gpu):
    r = on_one_gpu[REFERENCE]
    assert r["status"] == "correct_level" and r["flags"] == [], (r["status"], r["flags"], r["error"])
    low, high = r["speedup_low"], r["speedup_high"]
    assert low <= 1 + TIE_BAND and high >= 1 / (1 + TIE_BAND), (low, high)
    assert 0.8 < low <= r["speedup"] <= high < 1.25, (low, r["speedup"], high)  # an interval that says something
    assert runner.MIN_ROUNDS <= r["timing_rounds"] <= runner.MAX_ROUNDS and r["rotations"] == 4, r
    assert r["sol_time_ms"] > r["roofline_time_ms"], r  # HBM-bound: 1 GiB read per call


@pytest.mark.gpu
def test_work_left_on_a_side_stream_after_the_trials_is_timed(on_one_gpu):
    r = on_one_gpu[f"{ROW_SUMS}/late_stream.py"]
    assert r["status"] == "correct_slower" and r["flags"] == [], (r["status"], r["flags"], r["error"])
    # its 2 ms spin runs after the call returned; the reference reads 1 GiB in about 0.3 ms
    assert r["sol_time_ms"] > 1.0 and r["sol_time_ms"] > 3 * r["ref_time_ms"], (r["sol_time_ms"], r["ref_time_ms"])


@pytest.mark.gpu
def test_writes_landing_after_the_call_returned_are_not_seen_on_one_gpu(on_one_gpu):
    r = on_one_gpu[f"{ROW_SUMS}/late_thread.py"]
    assert r["status"] == "wrong_result" and "all_zero" in r["flags"], (r["status"], r["flags"], r["error"])
    assert r["trials_passed"] == 0


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["device_cache.py", "previous_output.py"])
def test_answers_kept_on_the_device_are_stale_for_fresh_inputs(on_one_gpu, name):
    r = on_one_gpu[f"{ROW_SUMS}/{name}"]
    assert r["status"] == "wrong_result" and "timed_output" in r["flags"], (name, r["status"], r["flags"], r["error"])
    assert r["trials_passed"] == TRIALS and r["speedup"] is None  # right on the trials, caught in the timed calls


@pytest.mark.gpu
def test_an_output_buffer_reused_every_call_is_correct_on_one_gpu(on_one_gpu):
    r = on_one_gpu[f"{ROW_SUMS}/reuses_buffer.py"]
    assert r["status"] in CORRECT and r["flags"] == [], (r["status"], r["flags"], r["error"])


@pytest.mark.gpu
def test_gpu_work_left_running_between_calls_does_not_slow_the_reference(on_one_gpu):
    r = on_one_gpu[f"{ROW_SUMS}/slows_reference.py"]
    assert r["status"] == "correct_slower" and r["flags"] == ["timing_mismatch"], (
        r["status"], r["flags"], r["speedup"], r["ref_time_ms"], r["sol_time_ms"], r["error"])
    assert "alone after they were gone" in r["error"] and r["speedup"] is None, r["error"]
    assert "parent: reference timed alone" in r["phase_s"], r["phase_s"]


@pytest.mark.gpu
def test_side_stream_result_is_caught_on_one_gpu(tmp_path):
    out = tmp_path / "side.jsonl"
    assert run_cli("eval", "--problems-root", FIXTURES / "problems", "--problems", "01_sum", "--solutions",
                   CANDIDATES / "01_sum" / "side_stream.py", "--world-size", 1, "--device", "cuda", "--size", "tiny",
                   "--trials", TRIALS, "--timeout", 120, "--out", out) == 0
    (r,) = by_solution(out).values()
    assert (r["world_size"], r["device"], len(r["per_rank"])) == (1, "cuda", 1), r
    assert r["status"] == "wrong_result" and "side_stream" in r["flags"], (r["status"], r["flags"], r["error"])
    assert "side stream" in r["error"], r["error"]
