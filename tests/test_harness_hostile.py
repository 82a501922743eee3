"""Hostile candidates against the evaluation harness (pkit.harness): CPU, gloo, world size 2, tiny sizes.

Each candidate tries to fake its verdict or its time, or to outlive its run; the harness must see through it.
Fixtures: tests/fixtures/hostile/01_sum (problem 01_sum of tests/fixtures/problems) and hostile_escape (evaluated in
one run, the escape's two candidates first), hostile_loud, the hanging candidate of tests/fixtures/candidates, and
two problems of their own in hostile_problems with candidates in hostile_problems_candidates.

Classes (candidate → what the harness must give):
 1. patch_checker.py: patches pkit's compare and torch.isclose/allclose/equal at import → wrong_result.
 2. tensor_subclass.py: a Tensor subclass whose comparisons all claim equality → wrong_result, flag tensor_subclass.
 3. frame_peek.py / frame_overwrite.py: read (or zero) the reference output in the caller frames → wrong_result;
    overwrite_expected.py: zeroes every tensor file in the harness's temp folders (saved reference outputs, say)
    and returns zeros → wrong_result.
 4. fake_result.py: writes result files claiming success into the harness's folders and forged messages to its
    inherited Unix sockets, then exits 0 → not correct_*.
 5. memoize.py: answers repeated input values from a cache → correct_slower (timed calls get fresh values).
 6. skip_when_timed.py: right on the checked trials, stale afterwards → wrong_result, flag timed_output.
    precompute_sets.py: patches the worker to compute every timed set's answer while the sets are built, then
    answers the timed calls from memory → wrong_result, flag timed_output (each call's inputs are changed just
    before it with a seed revealed then, pkit.harness.fresh; before that change this candidate was correct_faster).
 7. slow_the_reference.py: a thread burns the GIL while `reference` runs in its process → correct, speedup < 3.
 8. patch_clock.py: time's clocks run 1000x slow during its calls → correct_slower (clocks bound before import).
 9. patch_timer.py: slows every clock the harness modules hold → not correct_faster; when correct, timing_mismatch.
    forge_messages.py: 20 ms calls, but sends forged fast timings down its inherited Unix sockets → not
    correct_faster; when correct, timing_mismatch or an honest time (>= 15 ms).
    Fakes without sleeps: patch_timer_quiet.py (patch_timer's clocks around an all-reduce and a loop of pure
    Python work) and fix_when_saved.py (returns garbage at once, and patches the save functions
    so that an output is fixed just before the harness saves it for a check) → when correct, timing_mismatch or
    speedup < 3.
10. a_escape.py: a double-forked, detached process that hunts later workers of the run (b_victim.py's, then every
    candidate of class 1-9 and 13 after it) → b_victim.py correct, and every escaped process gone when the run
    returns.
11. SIGTERM / SIGINT / SIGHUP to `pkit eval` (a hanging candidate): it exits within 15 s, every process it started
    is gone and its temp folders are removed.
12. loud.py: 200 MB on stdout at import; loud_per_call.py: 1 MiB on stdout and 1 MiB on stderr per call. Under
    --output-mib 2 → correct, flagged loud_output with at least what they printed past the cap counted as dropped,
    no rank's log on disk ever over 2 MiB, and the evaluating process's peak memory grown by under 100 MB.
13. Benign oddities (leaves_thread.py, calls_reference.py, prints_a_lot.py, stalls_once.py) → correct;
    stalls_once.py stalls 0.5 s outside its calls in its first timed window (a loaded machine), so the reference
    and it are timed again side by side and that pair is believed.
14. Inputs that are lists and in-place contracts (META["mutates_inputs"]): 01_list_sum/mutates_list.py →
    wrong_result, flag mutated_input; 02_clip_inplace/no_inplace.py and scales_wrong.py → wrong_result, flag
    inplace_result; the references and good.py → correct.
15. No harness process (worker, zygote, ...) below this test process survives a run, nor its temp folders.
16. hostile_reuse at the `medium` size under a 16 MiB fresh budget (--fresh-mib), where its 4 MiB input sets are
    reused: remember_by_address.py answers a reused set from memory → wrong_result, flag timed_output (each call's
    inputs were changed just before it; seen when one of the 3 kept calls is a reuse; else correct_slower with
    timing_mismatch, as before); intercept_change.py also intercepts the change in its process (the documented
    remaining gap) and reduces only the changed elements (right answers) → never correct_faster: correct_slower with
    timing_mismatch (calls on reused sets sped up), or, when that mismatch has both timed again, not correct (its
    answers, remembered by address, are stale for the second window's sets, or its ranks' partial reductions fall
    out of step and the collective aborts), or correct_level where its gain is lost in the latency of two small
    all-reduces (both ranks on one core) or shows on the reused sets only, not on their first uses.
17. An --out that is no file to write records to: /dev/zero (once read whole to resume it, until the kernel killed
    the process for memory), /dev/null, a link to /dev/zero where a records file is expected, a FIFO no one reads,
    a folder → `pkit eval` (its own process, its address space capped at 4 GiB) refuses it in one line, exit code 2,
    within seconds, starting no worker and making no temp folder; a path swapped for a FIFO after the arguments
    were checked is refused when opened, never waited on (records.read_lines, resume.sole_writer).

The in-process runs use a private TMPDIR, so candidates that search temp folders touch only their own run's. Those
after the hostile run (12, 14, 16) fork their workers from the test process's zygote (conftest's `shared_zygote`),
started again after the hostile run has counted what it leaves, instead of starting one each.
"""
from __future__ import annotations

import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from problem_ranks import forked_program

from pkit.harness.cli import main
from pkit.harness.records import CORRECT, read_jsonl

pytestmark = pytest.mark.heavy

FIXTURES = Path(__file__).parent / "fixtures"
PROBLEMS = FIXTURES / "problems"
HARNESS = b"pkit.harness"  # in the command line of workers (python -m pkit.harness.worker) and forked helpers
ESCAPEE = "pkit-escapee"  # the comm name a_escape.py gives its escaped processes


@contextmanager
def private_tmp(folder: Path):
    """TMPDIR (for workers) and tempfile's folder (for this process) set to `folder` within the block."""
    saved_env, saved_dir = os.environ.get("TMPDIR"), tempfile.tempdir
    folder.mkdir(parents=True, exist_ok=True)
    os.environ["TMPDIR"] = tempfile.tempdir = str(folder)
    try:
        yield folder
    finally:
        tempfile.tempdir = saved_dir
        if saved_env is None:
            os.environ.pop("TMPDIR", None)
        else:
            os.environ["TMPDIR"] = saved_env


def evaluate(out: Path, solutions: Path, *extra: str, problems_root: Path = PROBLEMS) -> dict:
    """Run `pkit eval` in this process, temp files in a private folder beside `out`; records by solution path."""
    argv = ["eval", "--problems-root", str(problems_root), "--solutions", str(solutions), "--trials", "2",
            "--timeout", "60", *extra, "--out", str(out)]
    with private_tmp(out.parent / "tmp"):
        assert main(argv) == 0
    return {r["solution"]: r for r in read_jsonl(out)}


def pkit_temp_left(out: Path) -> list[str]:
    """Entries named pkit* left in the private TMPDIR of the run that wrote `out`."""
    return sorted(p.name for p in (out.parent / "tmp").glob("pkit*"))


# --- /proc helpers ----------------------------------------------------------------------------------------------

def processes() -> dict[int, tuple[int, str, bytes]]:
    """pid → (parent pid, state, command line) of every process visible in /proc."""
    table = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
            cmdline = Path(entry.path, "cmdline").read_bytes()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        table[int(entry.name)] = (int(fields[1]), fields[0], cmdline)
    return table


def below(root: int, table: dict) -> set[int]:
    """Every process whose chain of parents reaches `root`."""
    found = set()
    for pid in table:
        p, seen = pid, 0
        while p in table and seen < 256:
            p, seen = table[p][0], seen + 1
            if p == root:
                found.add(pid)
                break
    return found


def workers_below(root: int, leaves_only: bool = False) -> set[int]:
    """Living harness processes (command line names a pkit.harness module) below `root`; with `leaves_only`,
    those without such a process below them (the ranks, not a zygote that forks them)."""
    table = processes()
    found = {p for p in below(root, table) if HARNESS in table[p][2] and table[p][1] not in "ZX"}
    if leaves_only:
        found -= {table[p][0] for p in found}
    return found


def alive_after(pids, wait_s: float = 5.0) -> set[int]:
    """The pids still present after up to `wait_s` (our own zombie children, e.g. adopted orphans, are reaped)."""
    pids, deadline = set(pids), time.monotonic() + wait_s
    while True:
        for pid in pids:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
        pids = {p for p in pids if Path(f"/proc/{p}").exists()}
        if not pids or time.monotonic() > deadline:
            return pids
        time.sleep(0.1)


def kill_if(pids, match) -> None:
    """SIGKILL the pids still running whose /proc entry satisfies `match(pid)` (cleanup after a failed test)."""
    for pid in pids:
        try:
            if match(pid):
                os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def is_escapee(pid: int) -> bool:
    return Path(f"/proc/{pid}/comm").read_text().strip() == ESCAPEE


def is_worker(pid: int) -> bool:
    return HARNESS in Path(f"/proc/{pid}/cmdline").read_bytes()


# --- 1-10, 13, 15: one run over tests/fixtures/hostile/01_sum and hostile_escape/01_sum ------------------------

ESCAPE = ("a_escape.py", "b_victim.py")  # first in the run (by name): the escapee would hunt every later worker


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory, fewest_rounds_within, process_zygote):
    """One `pkit eval` of the candidates of tests/fixtures/hostile and hostile_escape together (copied into one
    folder), each timed in the fewest rounds, with a zygote of its own: (records by file name, harness processes below
    this one right after the run, pkit temp entries left, escaped pids, those still present 5 s after the run). The
    zygote that earlier modules of this test process shared is stopped first: no harness process is below this one
    when the run starts."""
    process_zygote.close()
    folder = tmp_path_factory.mktemp("hostile")
    solutions = folder / "solutions"
    for source in (FIXTURES / "hostile", FIXTURES / "hostile_escape"):
        shutil.copytree(source, solutions, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    os.environ["PKIT_TEST_ESCAPE_PIDFILE"] = str(folder / "escapee.pid")
    try:
        with fewest_rounds_within():
            recs = evaluate(folder / "hostile.jsonl", solutions)
    finally:
        os.environ.pop("PKIT_TEST_ESCAPE_PIDFILE", None)
    survivors = workers_below(os.getpid())
    pids = {int(p.read_text()) for p in folder.glob("escapee.pid.*")}
    left = alive_after(pids)
    kill_if(left, is_escapee)  # they would hunt the workers of later tests for a minute
    kill_if(survivors, is_worker)
    return ({Path(k).name: r for k, r in recs.items()}, survivors, pkit_temp_left(folder / "hostile.jsonl"), pids,
            left)


@pytest.fixture(scope="module")
def hostile(hostile_run):
    """(records by file name of tests/fixtures/hostile's candidates, harness processes below this one right after
    the run, pkit temp entries left)."""
    recs, survivors, temp_left = hostile_run[:3]
    return {name: r for name, r in recs.items() if name not in ESCAPE}, survivors, temp_left


WRONG = {  # candidate → flags its wrong_result must carry
    "patch_checker.py": set(),
    "tensor_subclass.py": {"tensor_subclass"},
    "frame_peek.py": set(),
    "frame_overwrite.py": set(),
    "overwrite_expected.py": set(),
    "skip_when_timed.py": {"timed_output"},
    "precompute_sets.py": {"timed_output"},
}
BENIGN = ("leaves_thread.py", "calls_reference.py", "prints_a_lot.py", "stalls_once.py")
QUIET = ("patch_timer_quiet.py", "fix_when_saved.py")  # fakes without sleeps; fix_when_saved fixes outputs at save time


def test_every_hostile_candidate_got_a_record(hostile):
    assert set(hostile[0]) == {*WRONG, *BENIGN, *QUIET, "fake_result.py", "memoize.py", "slow_the_reference.py",
                               "patch_clock.py", "patch_timer.py", "forge_messages.py"}


@pytest.mark.parametrize("name", sorted(WRONG))
def test_faked_verdicts_are_wrong_results(hostile, name):
    r = hostile[0][name]
    assert r["status"] == "wrong_result", (name, r["status"], r["flags"], r["error"])
    assert WRONG[name] <= set(r["flags"]), (name, r["flags"])
    assert r["speedup"] is None and r["sol_time_ms"] is None


def test_a_result_written_by_the_candidate_is_not_believed(hostile):
    r = hostile[0]["fake_result.py"]
    assert not r["status"].startswith("correct"), (r["status"], r["speedup"], r["sol_time_ms"])
    assert r["speedup"] is None


def test_memoizing_on_input_values_gains_nothing(hostile):
    r = hostile[0]["memoize.py"]
    assert r["status"] == "correct_slower", (r["status"], r["flags"], r["error"], r["speedup"])
    assert r["sol_time_ms"] >= 15, r["sol_time_ms"]  # every fresh call sleeps 20 ms


def test_slowing_the_reference_from_the_candidate_process_fails(hostile):
    r = hostile[0]["slow_the_reference.py"]
    assert r["status"] in CORRECT, (r["status"], r["error"])
    # the thread, were it to reach the reference, would add ~5 ms to its ~1 ms calls (≥ 5×); under a loaded CI
    # machine honest runs have read up to 3.2×, so the bound sits between the two
    assert r["speedup"] < 4.5, (r["speedup"], r["ref_time_ms"], r["sol_time_ms"])


def test_patched_clocks_do_not_reach_the_timer(hostile):
    r = hostile[0]["patch_clock.py"]
    assert r["status"] == "correct_slower", (r["status"], r["flags"], r["error"], r["speedup"])
    assert r["sol_time_ms"] >= 15, r["sol_time_ms"]  # every call sleeps 20 ms


def test_patched_timer_clocks_are_caught_by_the_wall_time(hostile):
    r = hostile[0]["patch_timer.py"]
    assert r["status"] != "correct_faster", (r["speedup"], r["sol_time_ms"], r["flags"])
    if r["status"] in CORRECT:
        assert "timing_mismatch" in r["flags"], r["flags"]


def test_forged_timing_messages_are_not_believed(hostile):
    r = hostile[0]["forge_messages.py"]
    assert r["status"] != "correct_faster", (r["speedup"], r["sol_time_ms"], r["flags"])
    if r["status"] in CORRECT:
        assert "timing_mismatch" in r["flags"] or r["sol_time_ms"] >= 15, (r["flags"], r["sol_time_ms"])


@pytest.mark.parametrize("name", QUIET)
def test_fakes_small_in_absolute_terms_gain_nothing(hostile, name):
    r = hostile[0][name]
    allowed = CORRECT if name == "patch_timer_quiet.py" else (*CORRECT, "wrong_result")  # the former answers right
    assert r["status"] in allowed, (name, r["status"], r["error"])
    if r["status"] in CORRECT:
        assert "timing_mismatch" in r["flags"] or r["speedup"] < 3, (name, r["speedup"], r["flags"])
        assert r["status"] == "correct_slower" or r["speedup"] < 3, (name, r["speedup"], r["flags"])


@pytest.mark.parametrize("name", BENIGN)
def test_benign_oddities_are_correct(hostile, name):
    r = hostile[0][name]
    assert r["status"] in CORRECT, (name, r["status"], r["flags"], r["error"])
    assert r["flags"] == [] and r["speedup"] > 0


def test_a_stall_in_one_timed_window_has_both_timed_again(hostile):
    r = hostile[0]["stalls_once.py"]
    assert "parent: both timed again after a mismatch" in r["phase_s"], r["phase_s"]
    assert r["sol_time_ms"] < 100, r["sol_time_ms"]  # the second window's times: no stall in them


def test_no_worker_outlives_the_run(hostile):
    assert hostile[1] == set(), "harness processes still running below the test process after main() returned"


def test_no_temp_folder_outlives_the_run(hostile):
    assert hostile[2] == [], hostile[2]


# --- 10. a detached process that hunts the next candidate's workers (in the run above) ------------------------

@pytest.fixture(scope="module")
def escape(hostile_run):
    """(records by file name of hostile_escape's candidates, escaped pids, those still present 5 s after the run,
    workers left below us)."""
    recs, survivors, _, pids, left = hostile_run
    return {name: r for name, r in recs.items() if name in ESCAPE}, pids, left, survivors


def test_an_escaped_process_is_killed_with_its_run(escape):
    recs, pids, left, survivors = escape
    assert pids, "a_escape.py wrote no pid file (is PKIT_TEST_ESCAPE_PIDFILE passed to the workers?)"
    victim = recs["b_victim.py"]
    assert victim["status"] in CORRECT, (victim["status"], victim["error"])
    assert left == set(), f"escaped processes {sorted(left)} outlived the run"
    assert survivors == set()


# --- 12. loud output -----------------------------------------------------------------------------------------------

def rss_kib(field: str) -> int:
    """VmRSS (now) or VmHWM (peak) of this process in KiB; the peak falls back to getrusage's ru_maxrss."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


LOUD_CAP_MIB = 2
"""--output-mib of the loud run: small, so that the per-call printer passes it many times over."""


@pytest.fixture(scope="module")
def loud(tmp_path_factory, shared_zygote, fewest_rounds_within):
    """(records by file name, the largest log file seen in the run's temp folders, peak RSS growth in MB); each
    candidate timed in the fewest rounds (conftest's `fewest_rounds`, for this run alone): what counts here is what
    they print, not their speed."""
    from pkit.harness import runner  # noqa: F401 - what `pkit eval` imports (torch), in before the baseline is taken

    out = tmp_path_factory.mktemp("loud") / "loud.jsonl"
    largest, done = [0], threading.Event()

    def watch():  # the logs live in the run's private temp folders, made and removed as it goes
        while not done.is_set():
            for folder, _, files in os.walk(out.parent / "tmp"):
                for name in files:
                    try:
                        if name.endswith(".log"):
                            largest[0] = max(largest[0], os.stat(os.path.join(folder, name)).st_size)
                    except OSError:
                        pass
            time.sleep(0.02)

    try:  # reset the peak, so an earlier, higher peak of this process cannot hide the growth
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass
    before = rss_kib("VmRSS")
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        with fewest_rounds_within():
            recs = evaluate(out, FIXTURES / "hostile_loud", "--output-mib", str(LOUD_CAP_MIB))
    finally:
        done.set()
        watcher.join()
    grown_mb = (rss_kib("VmHWM") - before) / 1024
    return {Path(k).name: r for k, r in recs.items()}, largest[0], grown_mb


def test_loud_output_is_not_held_in_memory(loud):
    assert loud[2] < 100, f"peak RSS of the evaluating process grew by {loud[2]:.0f} MB for 200 MB of output"


@pytest.mark.parametrize("name, printed_per_rank", [
    ("loud.py", 20 * ((10 << 20) + 1)),  # at import
    ("loud_per_call.py", (2 + 3 * 10) * (2 << 20)),  # at least 2 trials and 3 windows of 10 timed calls
])
def test_loud_output_is_capped_on_disk_and_flagged(loud, name, printed_per_rank):
    r = loud[0][name]
    assert r["status"] in CORRECT, (r["status"], r["error"])
    assert "loud_output" in r["flags"], r["flags"]
    assert r["output_dropped_bytes"] >= 2 * (printed_per_rank - (LOUD_CAP_MIB << 20)), r["output_dropped_bytes"]
    assert 0 < loud[1] <= LOUD_CAP_MIB << 20, f"a log of {loud[1]} bytes on disk under --output-mib {LOUD_CAP_MIB}"


def test_a_quiet_candidate_drops_no_output(hostile):
    r = hostile[0]["prints_a_lot.py"]
    assert r["output_dropped_bytes"] == 0 and "loud_output" not in r["flags"], (r["output_dropped_bytes"], r["flags"])


# --- 14. list inputs and in-place contracts --------------------------------------------------------------------

@pytest.fixture(scope="module")
def contracts(tmp_path_factory, fewest_rounds_within, shared_zygote):
    """Records by solution; the statuses and flags of trials and timed outputs are what count here, so each candidate
    is timed in the fewest rounds (conftest's `fewest_rounds`, for this run alone)."""
    out = tmp_path_factory.mktemp("contracts") / "contracts.jsonl"
    with fewest_rounds_within():
        return evaluate(out, FIXTURES / "hostile_problems_candidates", "--reference-as-candidate",
                        problems_root=FIXTURES / "hostile_problems")


@pytest.mark.parametrize("solution", ["01_list_sum/problem.py:reference", "01_list_sum/good.py",
                                      "02_clip_inplace/problem.py:reference", "02_clip_inplace/good.py"])
def test_contract_keepers_are_correct(contracts, solution):
    r = contracts[solution]
    assert r["status"] in CORRECT, (solution, r["status"], r["flags"], r["error"])
    assert r["flags"] == [], r["flags"]


@pytest.mark.parametrize("solution, flag", [("01_list_sum/mutates_list.py", "mutated_input"),
                                            ("02_clip_inplace/no_inplace.py", "inplace_result"),
                                            ("02_clip_inplace/scales_wrong.py", "inplace_result")])
def test_contract_breakers_are_wrong(contracts, solution, flag):
    r = contracts[solution]
    assert r["status"] == "wrong_result", (solution, r["status"], r["flags"], r["error"])
    assert flag in r["flags"], (solution, r["flags"])


# --- 11. signals to `pkit eval` ------------------------------------------------------------------------------------

STABLE_S = 1.0
"""Seconds the four ranks (the reference's and the hanging candidate's) must stay the same before the signal."""
SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def hanging_eval(folder: Path):
    """`pkit eval` of the hanging candidate as `python -m pkit.harness.cli eval` runs it, in a session of its own,
    forked from a server that imported torch once (tests/problem_ranks.py): its own zygote, reference and candidate
    as any run's; TMPDIR `folder`/tmp, output in `folder`/eval.log."""
    (folder / "tmp").mkdir()
    argv = ["eval", "--problems-root", str(PROBLEMS), "--solutions", str(FIXTURES / "candidates" / "01_sum" / "hang.py"),
            "--trials", "1", "--timeout", "300", "--out", str(folder / "signal.jsonl")]
    return forked_program("pkit.harness.cli", argv, dict(os.environ, TMPDIR=str(folder / "tmp")),
                          Path(__file__).parents[1], folder / "eval.log")


def hanging_ranks_up(runs: dict, folders: dict):
    """Each key of `runs` (a process each), as soon as that run's hanging candidate's ranks are there beside the
    reference's: four harness processes, STABLE_S alike (the runs watched together)."""
    deadline, since = time.monotonic() + 60, dict.fromkeys(runs, time.monotonic())
    ranks: dict = {key: set() for key in runs}
    while ranks:
        for key in list(ranks):
            assert runs[key].exitcode is None, (folders[key] / "eval.log").read_text()[-2000:]
            now_ranks = workers_below(runs[key].pid, leaves_only=True)
            if now_ranks != ranks[key]:
                ranks[key], since[key] = now_ranks, time.monotonic()
            elif len(now_ranks) >= 4 and time.monotonic() - since[key] >= STABLE_S:
                del ranks[key]
                yield key
        assert not ranks or time.monotonic() < deadline, "no four stable harness workers within 60 s"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def signalled(tmp_path_factory):
    """Per signal: (whether `pkit eval` had exited 15 s after it, the processes it started still there 5 s later,
    the pkit temp folders left in its TMPDIR). A `hanging_eval` per signal, the three started at once so that their
    waits overlap; each gets its signal once its hanging candidate's ranks are up."""
    folders = {s: tmp_path_factory.mktemp(s.name) for s in SIGNALS}
    runs = {s: hanging_eval(folder) for s, folder in folders.items()}
    seen: dict = {s: set() for s in SIGNALS}
    try:
        sent = {}
        for s in hanging_ranks_up(runs, folders):
            seen[s] = below(runs[s].pid, processes())
            assert any(p.name.startswith("pkit") for p in (folders[s] / "tmp").iterdir()), \
                "no pkit temp folder in TMPDIR to remove"
            os.kill(runs[s].pid, s)
            sent[s] = time.monotonic()
        for s, proc in runs.items():
            proc.join(timeout=max(0.0, sent[s] + 15 - time.monotonic()))
        return {s: (proc.exitcode is not None, alive_after(seen[s]),
                    sorted(p.name for p in (folders[s] / "tmp").iterdir() if p.name.startswith("pkit")))
                for s, proc in runs.items()}
    finally:
        for s, proc in runs.items():
            if proc.exitcode is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.join()
            kill_if(alive_after(seen[s], 0), is_worker)
            shutil.rmtree(folders[s] / "tmp", ignore_errors=True)


@pytest.mark.parametrize("signum", SIGNALS, ids=lambda s: s.name)
def test_a_signal_to_pkit_eval_kills_its_workers_and_removes_its_temp_folders(signalled, signum):
    exited, left, leftovers = signalled[signum]
    assert exited, f"pkit eval still running 15 s after {signum.name}"
    assert left == set(), f"processes {sorted(left)} outlived pkit eval after {signum.name}"
    assert leftovers == [], f"temp folders left in TMPDIR after {signum.name}: {leftovers}"


# --- 16. answers remembered across reused input sets -----------------------------------------------------------

REUSE_ITERS = 12
"""Timed calls a window: past the 4 input sets the fresh budget holds, so 8 of each window's 12 calls reuse a set."""


def test_answers_remembered_for_reused_input_sets_are_not_called_faster(tmp_path, fewest_rounds, shared_zygote):
    recs = evaluate(tmp_path / "reuse.jsonl", FIXTURES / "hostile_reuse", "--problems", "01_sum", "--size", "medium",
                    "--fresh-mib", "16", "--force", "--trials", "1", "--perf", "--warmup", "2", "--iters",
                    str(REUSE_ITERS), "--timeout", "240")
    stale = recs["01_sum/remember_by_address.py"]
    assert stale["status"] == "wrong_result" and "timed_output" in stale["flags"] or (
        stale["status"] == "correct_slower" and "timing_mismatch" in stale["flags"]), (stale["status"], stale["error"])
    r = recs["01_sum/intercept_change.py"]
    assert r["status"] != "correct_faster", (r["status"], r["flags"], r["speedup"])
    if "timing_mismatch" in r["flags"]:  # caught by the reuse check
        assert r["rotations"] < REUSE_ITERS, "the sets were not reused: this test needs sets larger than the budget"
        assert "reused input sets" in r["error"]
    # else not correct: the first window's mismatch had both timed again, and its answers, remembered by address, were
    # stale for the second window's sets (wrong_result), or its ranks' partial reductions fell out of step there and
    # the collective aborted (runtime_error); or level: its two small all-reduces per reuse gained nothing on a core
    # shared by both ranks, or its gain showed on reused sets only (speedup.gain_on_reused_sets)


# --- 17. an --out that is no file -------------------------------------------------------------------------------

OUT_LIMIT_BYTES = 4 << 30
"""Address space of the `pkit eval` that is given a device as --out: reading /dev/zero whole fails here, not the
machine."""


def _default_signals():
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, signal.SIG_DFL)


def _capped_memory():
    _default_signals()
    resource.setrlimit(resource.RLIMIT_AS, (OUT_LIMIT_BYTES, OUT_LIMIT_BYTES))


def _no_file(tmp_path: Path, kind: str) -> tuple[str, str]:
    """(the --out path of `kind`, what the refusal calls it)."""
    if kind == "link to /dev/zero":
        (tmp_path / "runs").mkdir()
        (tmp_path / "runs" / "eval.jsonl").symlink_to("/dev/zero")
        return str(tmp_path / "runs" / "eval.jsonl"), "a character device"
    if kind == "FIFO":
        os.mkfifo(tmp_path / "eval.jsonl")
        return str(tmp_path / "eval.jsonl"), "a FIFO"
    if kind == "folder":
        (tmp_path / "runs").mkdir()
        return str(tmp_path / "runs"), "a folder"
    return kind, "a character device"


@pytest.mark.parametrize("kind", ["/dev/zero", "/dev/null", "link to /dev/zero", "FIFO", "folder"])
def test_an_out_that_is_no_file_is_refused_in_one_line_before_any_work(tmp_path, kind):
    out, what = _no_file(tmp_path, kind)
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    cmd = [sys.executable, "-m", "pkit.harness.cli", "eval", "--problems-root", str(PROBLEMS), "--solutions",
           str(FIXTURES / "hostile" / "01_sum"), "--trials", "1", "--timeout", "30", "--out", out]
    began = time.monotonic()
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60,
                              env=dict(os.environ, TMPDIR=str(tmpdir)), preexec_fn=_capped_memory,
                              cwd=Path(__file__).parents[1])
    except subprocess.TimeoutExpired:
        pytest.fail(f"pkit eval --out {out} ({kind}) still running after 60 s")
    took = time.monotonic() - began
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.stderr.startswith(f"pkit eval: error: --out: expected a regular file or a new file, got {out}, "
                                  f"{what}"), done.stderr
    assert done.stdout == "" and sorted(p.name for p in tmpdir.iterdir()) == [], (done.stdout, list(tmpdir.iterdir()))
    assert took < 30, f"refusing --out {out} took {took:.0f} s"


def test_an_out_swapped_for_a_fifo_after_the_check_is_refused_not_waited_on(tmp_path):
    """The arguments are checked first; the file is opened later (to lock it, to read its records). A FIFO put there
    in between is refused when opened: nothing waits for its other end (a thread opens that end after 10 s, so a
    wait shows as a failure, not a hang)."""
    from pkit.harness.records import read_lines
    from pkit.harness.resume import OutRecords, sole_writer

    fifo = tmp_path / "eval.jsonl"
    os.mkfifo(fifo)

    def other_end():  # ends a wait on the FIFO, so that a regression fails the test instead of hanging it
        time.sleep(10)
        for flags in (os.O_RDONLY | os.O_NONBLOCK, os.O_WRONLY | os.O_NONBLOCK):
            try:
                os.close(os.open(fifo, flags))
            except OSError:
                pass

    threading.Thread(target=other_end, daemon=True).start()
    began = time.monotonic()
    for attempt in (lambda: sole_writer(fifo).__enter__(), lambda: OutRecords.read(fifo), lambda: read_lines(fifo)):
        with pytest.raises(ValueError, match="FIFO"):
            attempt()
    assert time.monotonic() - began < 5, "opening a FIFO as --out waited for its other end"
