"""Without a GPU: which modules get their wait globals set is read from the cubin, not probed by a failing call."""
from contextlib import nullcontext

import pytest

import pkit.compiler
from pkit.compiler import compile_cubin, cubin_symbols
from pkit.waits import WAIT_GLOBALS

KERNEL = 'extern "C" __global__ void fill(int* x) { x[threadIdx.x] = 1; }'


def test_module_including_sync_cuh_has_wait_globals(cache_dir):
    module = compile_cubin("#include <pkit/sync.cuh>\n" + KERNEL, arch="sm_90a")
    assert module.has_wait_globals and set(WAIT_GLOBALS) <= cubin_symbols(module.cubin)


def test_module_without_sync_cuh_has_no_wait_globals(cache_dir):
    module = compile_cubin(KERNEL, arch="sm_90a")
    assert not module.has_wait_globals
    assert "fill" in cubin_symbols(module.cubin) and not set(WAIT_GLOBALS) & cubin_symbols(module.cubin)


@pytest.mark.parametrize("name, expected", [("collectives.cu", True), ("ll_collectives.cu", True),
                                            ("spin.cu", True), ("tma_copy.cu", True), ("copy.cu", False),
                                            ("read_bandwidth.cu", False), ("pointer_chase.cu", False)])
def test_package_kernels_marked_by_their_headers(name, expected, cache_dir):
    assert compile_cubin(name, arch="sm_90a").has_wait_globals is expected


def test_cubin_symbols_rejects_what_is_not_a_cubin():
    with pytest.raises(ValueError, match="64-bit little-endian ELF"):
        cubin_symbols(b"not a cubin")


class _LoadedModule:
    """Stands in for cupy's Module: loads nothing and refuses global look-ups."""

    def load(self, cubin):
        pass

    def get_function(self, name):
        return name

    def get_global_var(self, name):
        raise AssertionError(f"looked up {name}")


@pytest.mark.parametrize("header, prepared", [("#include <pkit/sync.cuh>\n", [0]), ("", [])])
def test_loading_prepares_only_modules_with_wait_globals(header, prepared, cache_dir, monkeypatch):
    import cupy as cp

    calls = []
    monkeypatch.setattr(cp.cuda, "Device", lambda device: nullcontext())
    monkeypatch.setattr(cp.cuda.function, "Module", _LoadedModule)
    monkeypatch.setattr(pkit.compiler, "prepare_module", lambda module, device: calls.append(device))
    assert compile_cubin(header + KERNEL, arch="sm_90a").function("fill", device=0) == "fill"
    assert calls == prepared
