"""Shared test setup: GPU markers skip cleanly on machines without the GPUs they need; teams of every GPU of the
machine or of 2 to 8 ranks sharing one GPU (`team`), and of exactly two ranks (`pair`, `two_gpus`); how many
pytest-xdist workers `-n auto` starts (make test passes `-n auto --dist loadfile`), each pinned to its own CPUs, heavy
modules first; one zygote for the harness tests that share it (`shared_zygote`); the fewest timing
rounds, of a few calls each, for the harness tests that check verdicts, not rounds (`fewest_rounds`,
`module_fewest_rounds`, `fewest_rounds_within`)."""
import multiprocessing.util
import os
import shutil
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

import pytest

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")
# nbformat imports jsonschema, which compiles the grammar of IRIs (rfc3987_syntax, 1.5-2 s a process) for a format
# check no test makes: the test processes go without it, and so do the processes they start (`_without_iri_grammar`).
sys.modules.setdefault("rfc3987_syntax", None)
# Bytecode is cached (__pycache__, which git ignores) even where PYTHONDONTWRITEBYTECODE is set: without it each
# pytest-xdist worker rewrites and compiles the asserts of every test module again (about 5 s of a 2-core machine's
# CPU a worker), and each process the tests start (notebook kernels, `pkit` commands, ranks) compiles pkit's modules
# again. The workers and those processes inherit the environment; conftest.py is imported before any test module.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


def pytest_configure(config):
    """The run's temporary files in one folder of its own, removed at its end (`pytest_unconfigure`): pytest's
    tmp_path folders and whatever the tests and the processes they start write to the temporary directory (Ray's
    session, pkit eval's run folders, Chromium's profile), and there a folder on the PYTHONPATH they inherit
    (`_without_iri_grammar`). Under pytest-xdist on a machine without GPUs, pin worker k (and every process it
    starts) to its own share of this process's CPUs: an evaluation then times its reference and its candidates on
    the same cores, which no other worker's tests load, so the harness's timing checks see the noise of a quiet
    machine."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER"), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if not worker:  # the workers and every process started inherit TMPDIR
        # This process's multiprocessing folder stays in the system's temporary directory: multiprocessing removes
        # it at exit, after pytest_unconfigure has removed the run's folder.
        multiprocessing.util.get_temp_dir()
        config.run_tmpdir = tempfile.tempdir = os.environ["TMPDIR"] = tempfile.mkdtemp(prefix="pkit-tests-")
        _without_iri_grammar(Path(config.run_tmpdir) / "no_iri_grammar")
    cpus = sorted(os.sched_getaffinity(0))
    if worker and 0 < count <= len(cpus) and not _gpu_count():
        mine = set(cpus[int(worker.removeprefix("gw")) % count::count])
        os.sched_setaffinity(0, mine)
        os.environ["OMP_NUM_THREADS"] = str(len(mine))


def _without_iri_grammar(folder: Path) -> None:
    """Every process the tests start goes without the grammar of IRIs too: JupyterLab's server and Ray's daemons and
    workers import jsonschema, each compiling it for a second or more of its core (eight processes for one local Ray
    cluster). A module `rfc3987_syntax` in `folder` raises ImportError, which jsonschema takes as that format check's
    absence; `folder` joins the PYTHONPATH the workers and every process started inherit."""
    folder.mkdir()
    (folder / "rfc3987_syntax.py").write_text('raise ImportError("left out of the test run (tests/conftest.py)")\n')
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(folder)]))


def pytest_unconfigure(config):
    if hasattr(config, "run_tmpdir"):
        shutil.rmtree(config.run_tmpdir, ignore_errors=True)


def _gpu_count() -> int:
    from pkit.gpus import devices

    return len(devices())


@pytest.hookimpl(trylast=True)  # after pytest's own reordering by fixture parameters
def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: item.get_closest_marker("heavy") is None)  # stable: heavy modules first, for xdist
    count = _gpu_count()
    for item in items:
        if "multigpu" in item.keywords and count < 2:
            item.add_marker(pytest.mark.skip(reason=f"needs 2 GPUs with peer access; this machine has {count}"))
        elif "gpu" in item.keywords and count < 1:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU; this machine has none"))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    """`-n auto`: one worker per CPU core this process may use; none (every test in this process, one at a time)
    on a machine with GPUs, whose tests share its GPUs and time them."""
    return 0 if _gpu_count() else len(os.sched_getaffinity(0))


def _placement(devices, id: str):
    """A team placement as a fixture param: `devices` None is every GPU of the machine, one rank each (multigpu);
    a list of GPU 0 repeated is that many ranks sharing it (gpu)."""
    return pytest.param(devices, marks=pytest.mark.multigpu if devices is None or 1 in devices else pytest.mark.gpu,
                        id=id)


SHARED = {w: _placement([0] * w, "shared_gpu" if w == 2 else f"shared_gpu_w{w}") for w in (2, 3, 4, 8)}
PLACEMENTS = (_placement(None, "own_gpus"), *SHARED.values())
TWO_RANKS = (_placement([0, 1], "gpus_0_1"), SHARED[2])


def _team(devices):
    import pkit

    return pkit.Team(pkit.team.team_devices(devices), share_gpus=True)


@pytest.fixture(scope="module", params=PLACEMENTS)
def team(request):
    """Every GPU of the machine, one rank each, or 2, 3, 4 or 8 ranks sharing GPU 0, each on its own stream
    (pkit.Team(..., share_gpus=True): correctness, never speed), one module-wide team per placement."""
    return _team(request.param)


@pytest.fixture(scope="module", params=TWO_RANKS)
def pair(request):
    """Two ranks on GPUs 0 and 1, or sharing GPU 0: for the tests that only make sense with exactly two ranks."""
    return _team(request.param)


@pytest.fixture(scope="module")
def two_gpus():
    """Two ranks on GPUs 0 and 1 (the tests that need one GPU per rank: NCCL, CUDA-graph capture per GPU)."""
    import pkit

    return pkit.Team([0, 1])


@pytest.fixture(autouse=True)
def close_figures():
    """After each test, the pyplot figures it drew are closed: pyplot keeps a figure until it is closed, and one
    process runs many tests that draw."""
    yield
    if "matplotlib.pyplot" in sys.modules:
        sys.modules["matplotlib.pyplot"].close("all")


@pytest.fixture
def gpus_here(monkeypatch):
    """gpus_here(n): pkit sees n H200s from here on in the test (pkit.devices(); nothing is launched on them), for the
    argument checks of defaults that take every GPU of the machine."""
    from pkit import gpus

    def pretend(count: int) -> None:
        fake = tuple(gpus.GPUInfo(i, "NVIDIA H200", "9.0", 132, 141 << 30, 60 << 20, f"0000:{i + 1:02x}:00.0")
                     for i in range(count))
        monkeypatch.setattr(gpus, "_gpus", lambda: fake)

    return pretend


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A fresh, empty cubin cache for the test."""
    monkeypatch.setenv("PKIT_CACHE_DIR", str(tmp_path / "cubin"))
    return tmp_path / "cubin"


@pytest.fixture(scope="session")
def process_zygote():
    """The zygote of every module of this test process that shares one (`shared_zygote`): started at first use (and
    again after a module that counts the processes a run leaves has stopped it), stopped at the end of the run."""
    from pkit.harness.zygote import Zygote

    one = Zygote()
    yield one
    one.close()


@pytest.fixture(scope="module")
def shared_zygote(process_zygote):
    """Every in-process evaluation of the module forks its workers from the test process's zygote (as inside
    pkit.harness.zygote.shared(), but left running for the next module) instead of importing torch in a zygote of
    its own."""
    from pkit.harness import zygote

    zygote._SHARED.append(process_zygote)
    yield process_zygote
    zygote._SHARED.remove(process_zygote)


SHORT_WINDOWS = {"warmup": 1, "iters": 3}
"""Quick timing's windows under `fewest_rounds`: 3 calls after 1 warm-up call (pkit.harness.options.QUICK_TIMING
has 10 after 2)."""


@contextmanager
def _fewest_rounds(windows: dict | None = None):
    from pkit.harness import candidate, options

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(candidate, "MAX_ROUNDS", candidate.MIN_ROUNDS)
        if windows:
            patch.setattr(options, "QUICK_TIMING", windows)
        yield


@pytest.fixture
def fewest_rounds():
    """The test's in-process evaluations time each candidate in the warm round and at most MIN_ROUNDS rounds
    (pkit.harness.candidate.MAX_ROUNDS set to MIN_ROUNDS for the test), under quick timing in SHORT_WINDOWS: for
    tests that check statuses and records, not how many rounds a verdict takes, how narrow its interval is or how
    many calls a window makes (a level candidate, such as a reference as its own candidate, otherwise runs to
    `candidate.most_rounds`). Records keep the settings they were given; processes the test starts keep the
    harness's own limit and windows."""
    with _fewest_rounds(SHORT_WINDOWS):
        yield


@pytest.fixture(scope="module")
def module_fewest_rounds():
    """`fewest_rounds` for every evaluation of the module, its module fixtures' included."""
    with _fewest_rounds(SHORT_WINDOWS):
        yield


@pytest.fixture(scope="session")
def fewest_rounds_within():
    """The context manager that caps the rounds as `fewest_rounds` does, quick timing's windows kept, for a fixture
    that caps the rounds of one run only."""
    return _fewest_rounds
