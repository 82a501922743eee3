"""Shared test setup: GPU markers skip cleanly on machines without the GPUs they need."""
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


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A fresh, empty cubin cache for the test."""
    monkeypatch.setenv("PKIT_CACHE_DIR", str(tmp_path / "cubin"))
    return tmp_path / "cubin"
