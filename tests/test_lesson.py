"""pkit.lesson: the diagnosis on hand-made wrong outputs (CPU), every learner kernel compiles for sm_90a, the
checks without GPUs, the `%%cuda` cells in IPython, the lesson notebook replays; live, the reference answers pass on every GPU of the machine and on
2, 3, 4 and 8 ranks sharing one GPU, and on two ranks the wrong kernels of tests/fixtures/lesson fail with the right
message and the notebook's exercises as given fail without a timeout."""
import json
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

import pkit
from pkit import lesson
from pkit.lesson import checks, runners
from pkit.lesson.magic import CudaCellError, cuda_cell

FIXTURES = Path(__file__).parent / "fixtures" / "lesson"
NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "08_lesson_multi_gpu_communication.ipynb"
WRONG = {  # fixture → (step, what its verdict must say)
    "addressing_next_slot.cu": ("addressing", "the peer index is off by one"),
    "copy_grid_short.cu": ("copy", "is the grid covering n?"),
    "flag_racy.cu": ("flag", "stale values after the flag"),
    "barrier_no_wait.cu": ("barrier", "before those stores arrived"),
    "ring_off_by_one.cu": ("ring", "is the phase boundary (step < size - 1) off by one?"),
    "overlap_no_wait.cu": ("overlap", "rows that had not landed"),
}


def ring(inputs, chunk_of=lambda r, t, n: (r - t - 1) % n, adds=lambda t, n: t < n - 1, source=lambda r, n: (r - 1) % n,
         barrier=True):
    """What lesson_ring.cu's steps compute, in NumPy, with its chunk index, phase test and source rank replaceable
    (the learner's mistakes); without the barrier a step reads what its source had two steps before."""
    n, chunk = len(inputs), len(inputs[0]) // len(inputs)
    out = [np.full_like(x, np.nan) for x in inputs]
    history = [out]
    for t in range(2 * (n - 1)):
        seen = history[-1] if barrier else history[max(0, len(history) - 2)]
        new = [o.copy() for o in history[-1]]
        for r in range(n):
            c = slice(chunk_of(r, t, n) * chunk, (chunk_of(r, t, n) + 1) * chunk)
            taken = (inputs[source(r, n)] if t == 0 else seen[source(r, n)])[c]
            new[r][c] = taken + inputs[r][c] if adds(t, n) else taken
        history.append(new)
    return history[-1]


def integer_inputs(size, n, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(-1000, 1001, n).astype(np.float32) for _ in range(size)]


# --- diagnose_copy ---------------------------------------------------------------------------------------------

def test_copy_right_answer_passes():
    inputs = runners.unique_inputs(np.random.default_rng(0), 2, 100)
    v = lesson.diagnose_copy([inputs[1], inputs[0]], [inputs[1], inputs[0]], inputs=inputs)
    assert v.ok and str(v) == "✓ all 2 ranks hold the expected 100 elements"


def test_copy_grid_that_does_not_cover_n():
    inputs = runners.unique_inputs(np.random.default_rng(1), 2, 24676)
    want = [inputs[1], inputs[0]]
    got = [w.copy() for w in want]
    got[1][8192:] = np.nan
    v = lesson.diagnose_copy(got, want, inputs=inputs)
    assert not v.ok
    assert v.message == ("rank 1 elements 8192..24675 still hold the poison value (nan): the kernel never wrote them "
                         "— is the grid covering n?")
    assert v.details["findings"][0] | {"text": None, "cause": None} == {
        "rank": 1, "kind": "unwritten_tail", "count": 24676 - 8192, "elements": [(8192, 24675)], "text": None,
        "cause": None}


def test_copy_own_data_where_the_peers_was_expected():
    inputs = runners.unique_inputs(np.random.default_rng(2), 2, 1000)
    want = [inputs[1], inputs[0]]  # each rank should get the other's data
    v = lesson.diagnose_copy([inputs[0], inputs[0]], want, inputs=inputs)
    assert v.message == ("rank 0 elements 0..999 hold rank 0's own data where rank 1's was expected: the peer index "
                         "is off by one")


def test_copy_kinds_of_unwritten_and_shifted_and_wrong():
    inputs = runners.unique_inputs(np.random.default_rng(3), 2, 64)
    want = [np.concatenate(inputs)] * 2
    nothing = np.full(128, np.nan, np.float32)
    holes = want[0].copy()
    holes[::32] = np.nan
    v = lesson.diagnose_copy([nothing, holes], want, inputs=inputs)
    kinds = [f["kind"] for f in v.details["findings"]]
    assert kinds == ["unwritten_all", "unwritten"]
    assert "wrote nothing here" in v.message and "step by the whole grid" in v.message
    assert "rank 1 elements 0, 32, 64 and 1 more runs still hold" in v.message
    shifted = np.r_[want[0][1:], want[0][:1]]  # element i holds element i + 1
    v = lesson.diagnose_copy([shifted, want[0]], want, inputs=inputs)
    assert v.details["findings"][0]["kind"] == "shifted"
    assert "hold the values expected 1 element further on: an element index is off by one" in v.message
    wrong = want[0] * 1000
    v = lesson.diagnose_copy([want[0], wrong], want, inputs=inputs)
    assert v.details["findings"][0]["kind"] == "wrong" and "rank 1 elements 0..127 hold wrong values" in v.message


def test_copy_causes_replace_the_defaults():
    want = [np.arange(8, dtype=np.float32)] * 2
    got = [want[0], np.r_[want[0][:4], [np.nan] * 4].astype(np.float32)]
    v = lesson.diagnose_copy(got, want, causes={"unwritten": "read too early"})
    assert v.message.endswith("still hold the poison value (nan): read too early")


def test_copy_same_cause_is_said_once():
    inputs = runners.unique_inputs(np.random.default_rng(4), 2, 10)
    got = [np.concatenate([inputs[0], inputs[0]])] * 2
    v = lesson.diagnose_copy(got, [np.concatenate(inputs)] * 2, inputs=inputs)
    assert v.message.splitlines() == [
        "rank 0 elements 10..19 hold rank 0's own data where rank 1's was expected",
        "rank 1 elements 10..19 hold rank 0's data where rank 1's was expected",
        "  likely cause of these 2: the peer index is off by one"]


@pytest.mark.parametrize("args, match", [
    (([np.zeros(3)], [np.zeros(4)]), "got: expected the shapes of want"),
    ((np.zeros(3), np.zeros(3)), "got: expected one non-empty 1-D array per rank"),
    (([np.zeros(3)], 5), "want: expected one array per rank"),
])
def test_copy_argument_errors(args, match):
    with pytest.raises(ValueError, match=match):
        lesson.diagnose_copy(*args)


# --- diagnose_flag ---------------------------------------------------------------------------------------------

def test_flag_racy_rounds_are_counted():
    rounds, n = 100, 64
    seen = np.tile(np.arange(1, rounds + 1, dtype=np.uint32)[:, None], (1, n))
    seen[[4, 40, 41], :16] = seen[[4, 40, 41], :16] - 1  # three rounds read the previous round's first 16 words
    v = lesson.diagnose_flag(seen)
    assert not v.ok
    assert v.details == {"rounds": 100, "stale_rounds": 3, "stale_fraction": 0.03, "stale_words": 48}
    assert v.message.startswith("stale values after the flag in 3 of 100 rounds (48 of 6400 words; first in round 5: "
                                "elements 0..15 still held round 4's values): the data store is not ordered before "
                                "the flag (use pkit::signal / release)")


def test_flag_right_ahead_and_skipped():
    seen = np.tile(np.arange(1, 5, dtype=np.uint32)[:, None], (1, 8))
    assert lesson.diagnose_flag(seen).ok
    seen[0, 0] = 0
    assert "still held the initial zeros" in lesson.diagnose_flag(seen).message
    seen[0, 0], seen[2, 3], seen[3, 5] = 1, 4, lesson.UNWRITTEN_WORD
    lines = lesson.diagnose_flag(seen).message.splitlines()
    assert lines[0].startswith("round 3: element 3 held a later round's values")
    assert lines[1].startswith("round 4: element 5 was never copied")


def test_flag_argument_errors():
    with pytest.raises(ValueError, match="seen: expected a"):
        lesson.diagnose_flag(np.zeros(5, np.uint32))
    with pytest.raises(ValueError, match="seen: expected a"):
        lesson.diagnose_flag(np.zeros((2, 2)))


# --- diagnose_ring ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("size", [2, 3, 4])
def test_ring_reference_steps_pass(size):
    inputs = integer_inputs(size, size * 300)
    v = lesson.diagnose_ring(ring(inputs), inputs)
    assert v.ok and v.message == f"every rank holds the sum of all {size} inputs ({size * 300} elements)"
    assert lesson.diagnose_ring(ring(inputs, chunk_of=lambda r, t, n: (r - t) % n), inputs).ok  # any consistent offset


@pytest.mark.parametrize("size", [2, 4])
def test_ring_off_by_one_step_counts_an_input_twice(size):
    inputs = integer_inputs(size, size * 300, seed=size)
    v = lesson.diagnose_ring(ring(inputs, adds=lambda t, n: t < n), inputs)  # ring_off_by_one.cu
    assert not v.ok
    assert v.message.splitlines()[0] == "rank 0 chunk 0 (elements 0..299) counts the input of rank 0 twice"
    assert "is the phase boundary (step < size - 1) off by one?" in v.message
    assert {f["kind"] for f in v.details["findings"]} == {"coefficients"}


def test_ring_own_buffer_instead_of_the_previous_ranks():
    inputs = integer_inputs(2, 600)
    v = lesson.diagnose_ring(ring(inputs, source=lambda r, n: r), inputs)
    assert ("rank 0 chunk 1 (elements 300..599) lacks the input of rank 1 and counts the input of rank 0 twice"
            in v.message)
    assert "is the peer index off by one (in.ring(-1) is the previous rank)?" in v.message
    assert "still hold the poison value" in v.message  # the chunks no step wrote


def test_ring_without_barrier_and_other_chunks():
    inputs = integer_inputs(3, 900)
    v = lesson.diagnose_ring(ring(inputs, barrier=False), inputs)
    assert "still hold the poison value (nan)" in v.message
    assert "no step wrote them, or a step read a chunk the previous rank had not written yet" in v.message
    right = ring(inputs)
    rotated = [np.roll(o, 300) for o in right]  # chunk c holds chunk c - 1's sum
    v = lesson.diagnose_ring(rotated, inputs)
    assert "rank 0 chunk 1 (elements 300..599) holds chunk 0's sum" in v.message
    assert "the chunk index is off by one" in v.message
    noisy = [o + 0.5 for o in right]
    v = lesson.diagnose_ring(noisy, inputs)
    assert "holds values that are no sum of inputs (element 0: got" in v.message


@pytest.mark.parametrize("args, match", [
    (([np.zeros(4)] * 3, [np.zeros(4)] * 2), "outputs: expected 2 arrays of 4 elements"),
    (([np.zeros(5)] * 2, [np.zeros(5)] * 2), "inputs: expected n divisible by the 2 ranks"),
])
def test_ring_argument_errors(args, match):
    with pytest.raises(ValueError, match=match):
        lesson.diagnose_ring(*args)


# --- kernels, steps, checks without GPUs, the notebook ----------------------------------------------------------

def notebook_exercises() -> dict:
    """{step: source} of the notebook's exercises: a `%%cuda NAME` cell of CUDA, then `lesson.check_<step>(NAME)` in
    a later cell."""
    sources, found = {}, {}
    for cell in json.loads(NOTEBOOK.read_text())["cells"]:  # plain JSON: the GPU hosts lack nbformat
        source = "".join(cell["source"])
        magic = re.match(r"%%cuda (\w+)\n", source)
        if cell["cell_type"] == "code" and magic:
            sources[magic.group(1)] = source[magic.end():]
        elif cell["cell_type"] == "code":
            found.update({step: sources[name] for step, name in re.findall(r"lesson\.check_(\w+)\((\w+)\)", source)})
    return found


def learner_sources():
    """(id, step, source) of every kernel a check compiles: the reference answers, the notebook's exercises as
    given, and the wrong fixtures."""
    cases = [(f"solution-{s}", s, lesson.solution(s)) for s in lesson.STEPS]
    cases += [(f"exercise-{s}", s, src) for s, src in notebook_exercises().items()]
    cases += [(f"fixture-{name}", step, (FIXTURES / name).read_text()) for name, (step, _) in WRONG.items()]
    return [pytest.param(step, src, id=case) for case, step, src in cases]


def test_notebook_has_an_exercise_for_every_step_and_fixtures_are_listed():
    assert sorted(notebook_exercises()) == sorted(lesson.STEPS)
    assert sorted(p.name for p in FIXTURES.glob("*.cu")) == sorted(WRONG)


@pytest.mark.parametrize("step, source", learner_sources())
def test_learner_kernels_compile_for_sm90a(step, source, cache_dir):
    for name in lesson.STEPS[step].kernels:
        kernel = pkit.compile(source, name, arch="sm_90a")
        assert kernel.cubin[:4] == b"\x7fELF"


def test_steps_and_solutions():
    assert list(lesson.STEPS) == ["addressing", "copy", "flag", "barrier", "ring", "overlap"]
    for step in lesson.STEPS.values():
        assert step.check is getattr(lesson, f"check_{step.name}")
        assert all(f" {k}(" in step.solution for k in step.kernels)
    with pytest.raises(ValueError, match="step: expected one of"):
        lesson.solution("nope")


no_gpus = pytest.mark.skipif(len(pkit.devices()) >= 1, reason="checks run live where there is a GPU")


@no_gpus
def test_checks_without_gpus_compile_and_say_they_did_not_run(cache_dir):
    v = lesson.check_ring(lesson.solution("ring"))
    assert v.ok is None and v.details == {"compiled": True}
    assert str(v).startswith("· compiled ring_step for sm_90a; not run")
    broken = lesson.check_copy('extern "C" __global__ void push_next(int* x) { x[0] = nope; }')
    assert broken.ok is False and broken.message.startswith("the source does not compile") and "nope" in broken.message
    missing = lesson.check_flag(lesson.solution("copy"))
    assert missing.ok is False and "no kernel 'produce'" in missing.message
    assert "(the check launches produce, consume)" in missing.message


@pytest.mark.parametrize("call, match", [
    (lambda: lesson.check_copy(""), "source: expected the kernel's CUDA source"),
    (lambda: lesson.check_copy(None), "source: expected"),
    (lambda: lesson.check_copy("x", team=SimpleNamespace(rank=None, size=1)), "team: expected a one-process"),
    (lambda: lesson.check_flag("x", rounds=0), "rounds: expected an integer"),
    (lambda: lesson.check_barrier("x", trials=1.5), "trials: expected an integer"),
    (lambda: lesson.check_ring("x", trials=0), "trials: expected an integer"),
])
def test_check_argument_errors(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# --- the %%cuda cells ----------------------------------------------------------------------------------------

FILL = 'extern "C" __global__ void fill(float* x) { x[threadIdx.x] = 1.0f; }\n'


@pytest.fixture
def shell(monkeypatch):
    """An IPython shell in this process, without history; cleared afterwards, and what making one changes put back
    (sys.modules['__main__'], the builtins it adds), so later tests do not run as if in IPython."""
    interactiveshell = pytest.importorskip("IPython.core.interactiveshell")
    import builtins

    from traitlets.config import Config

    monkeypatch.setitem(sys.modules, "__main__", sys.modules["__main__"])
    had = set(vars(builtins))
    config = Config()
    config.HistoryManager.enabled = False
    yield interactiveshell.InteractiveShell.instance(config=config)
    interactiveshell.InteractiveShell.clear_instance()
    for name in set(vars(builtins)) - had:
        delattr(builtins, name)


def test_cuda_cells_store_and_compile_in_ipython(shell, cache_dir):
    assert lesson.register_in_ipython()  # what importing pkit.lesson does in IPython
    ran = shell.run_cell(f"%%cuda KERNEL\n{FILL}")
    assert ran.success and shell.user_ns["KERNEL"] == FILL
    assert list(cache_dir.glob("*.cubin"))  # compiled at once, for sm_90a
    ran = shell.run_cell('%%cuda BROKEN\nextern "C" __global__ void fill(float* x) {\n  x[0] = nope;\n}\n')
    error = ran.error_in_exec
    assert isinstance(error, CudaCellError) and shell.user_ns["BROKEN"].startswith('extern "C"')  # stored all the same
    lines = error._render_traceback_()  # what IPython shows instead of a traceback
    assert lines[0].startswith("%%cuda BROKEN does not compile") and ">    2 |   x[0] = nope;" in lines
    assert 'inline.cu(2): error: identifier "nope" is undefined' in lines
    assert isinstance(shell.run_cell(f"%%cuda\n{FILL}").error_in_exec, CudaCellError)


def test_cuda_cells_load_as_an_extension_and_register_nowhere_without_ipython(shell, monkeypatch, cache_dir):
    shell.run_line_magic("load_ext", "pkit.lesson")
    assert shell.run_cell(f"%%cuda K\n{FILL}").success and shell.user_ns["K"] == FILL
    monkeypatch.delitem(sys.modules, "IPython")
    assert lesson.register_in_ipython() is False


@pytest.mark.parametrize("line", ["", "two names", "class", "1x"])
def test_cuda_cell_needs_one_python_name(line):
    names = {}
    with pytest.raises(CudaCellError, match="expected one Python name"):
        cuda_cell(line, FILL, names)
    assert names == {}


def test_recorded_and_timeline_drawing():
    import matplotlib

    matplotlib.use("Agg")
    import pandas as pd

    frame, where = lesson.recorded("quickstart", "h200x2-nv18")
    assert len(frame) and where.startswith("recorded on h200x2-nv18")
    timeline = pd.DataFrame({"rank": [0, 0, 1, 1], "kind": ["gemm", "copy", "gemm", "copy"],
                             "start_us": [0.0, 0.0, 0.0, 1.0], "end_us": [3.0, 2.0, 3.0, 2.0]})
    ax = lesson.draw_timeline(timeline)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["GPU 0 copy", "GPU 0 gemm", "GPU 1 copy", "GPU 1 gemm"]
    with pytest.raises(ValueError, match="frame: expected timeline's columns, missing"):
        lesson.draw_timeline(timeline.drop(columns="kind"))


def test_notebook_is_stripped_with_one_parameters_cell():
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code)
    tagged = [c for c in code if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1 and "mode =" in tagged[0].source and "machine =" in tagged[0].source
    from pkit import studies

    assert studies.for_notebook(NOTEBOOK.stem).name == "lesson"  # what it needs is said in the studies registry


# --- live: every GPU, or 2 to 8 ranks sharing one; the wrong answers on two ranks ---------------------------------

@pytest.mark.parametrize("step", list(lesson.STEPS))
def test_reference_answers_pass(step, team):
    v = lesson.STEPS[step].check(lesson.solution(step), team=team)
    assert v.ok is True, str(v)


@pytest.mark.parametrize("name", list(WRONG))
def test_wrong_kernels_fail_with_the_right_message(name, pair):
    step, says = WRONG[name]
    v = lesson.STEPS[step].check((FIXTURES / name).read_text(), team=pair)
    assert v.ok is False and says in v.message, str(v)


@pytest.mark.parametrize("step", list(lesson.STEPS))
def test_notebook_exercises_as_given_fail_without_a_timeout(step, pair):
    v = lesson.STEPS[step].check(notebook_exercises()[step], team=pair)
    assert v.ok is False and not v.details.get("timeout"), str(v)


@pytest.mark.gpu
def test_the_default_team_is_every_gpu_or_two_ranks_sharing_the_only_one():
    t, gpus = checks._default_team(), len(pkit.devices())
    if gpus >= 2:
        assert t.devices == tuple(range(gpus)) and not t.shares_gpus
    else:
        assert t.devices == (0, 0) and t.shares_gpus and t.stream(0) is not t.stream(1)
