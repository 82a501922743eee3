"""Shared test setup: GPU markers skip cleanly on machines without the GPUs they need; two-rank teams."""
import os

import pytest

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")


def _gpu_count() -> int:
    from pkit.gpus import devices

    return len(devices())


def pytest_collection_modifyitems(config, items):
    count = _gpu_count()
    for item in items:
        if "multigpu" in item.keywords and count < 2:
            item.add_marker(pytest.mark.skip(reason=f"needs 2 GPUs with peer access; this machine has {count}"))
        elif "gpu" in item.keywords and count < 1:
            item.add_marker(pytest.mark.skip(reason="needs a CUDA GPU; this machine has none"))


@pytest.fixture(scope="module", params=[pytest.param([0, 1], marks=pytest.mark.multigpu, id="own_gpus"),
                                        pytest.param([0, 0], marks=pytest.mark.gpu, id="shared_gpu")])
def team(request):
    """Two ranks on GPUs 0 and 1, or sharing GPU 0, each on its own stream (pkit.Team(..., share_gpus=True):
    correctness, never speed), one module-wide team per placement."""
    import pkit

    return pkit.Team(request.param, share_gpus=True)


@pytest.fixture(scope="module")
def two_gpus():
    """Two ranks on GPUs 0 and 1 (the tests that need one GPU per rank: NCCL, CUDA-graph capture per GPU)."""
    import pkit

    return pkit.Team([0, 1])


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A fresh, empty cubin cache for the test."""
    monkeypatch.setenv("PKIT_CACHE_DIR", str(tmp_path / "cubin"))
    return tmp_path / "cubin"
