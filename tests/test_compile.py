"""pkit.compile without a GPU: every kernel builds for sm_90a, errors carry the log, the cache works."""
from pathlib import Path

import pytest

import pkit
from pkit.compiler import KERNEL_DIR, compile_cubin

KERNELS = sorted(KERNEL_DIR.glob("*.cu"))
TEST_KERNELS = sorted((Path(__file__).parent / "cuda").glob("*.cu"))


def test_package_has_kernels():
    assert {p.name for p in KERNELS} >= {"copy.cu", "spin.cu", "tma_copy.cu"}


@pytest.mark.parametrize("path", KERNELS + TEST_KERNELS, ids=lambda p: p.name)
def test_every_kernel_compiles_for_sm90a(path, cache_dir):
    module = compile_cubin(str(path), arch="sm_90a")
    assert module.cubin[:4] == b"\x7fELF" and len(module.cubin) > 1000
    assert module.arch == "sm_90a" and not module.from_cache


def test_compile_by_file_name_and_kernel_name(cache_dir):
    kernel = pkit.compile("copy.cu", "copy16", arch="sm_90a")
    assert kernel.name == "copy16" and kernel.cubin[:4] == b"\x7fELF"


def test_hopper_only_instruction_needs_sm90a(cache_dir):
    src = ('extern "C" __global__ void k() { asm volatile("setmaxnreg.inc.sync.aligned.u32 232;"); }')
    assert compile_cubin(src, arch="sm_90a").cubin
    with pytest.raises(pkit.CompileError):
        compile_cubin(src, arch="sm_90")


def test_compile_error_shows_log_and_offending_line(cache_dir):
    src = 'extern "C" __global__ void broken(int* x) {\n  int a = 1;\n  x[0] = undefined_name;\n}\n'
    with pytest.raises(pkit.CompileError) as info:
        pkit.compile(src, "broken", arch="sm_90a")
    message = str(info.value)
    assert 'identifier "undefined_name" is undefined' in message
    assert ">    3 |   x[0] = undefined_name;" in message
    assert info.value.log and info.value.source == src


def test_compiling_leaves_the_interpreters_shared_bytes_alone(cache_dir):
    """NVRTC writes its log into the buffer it gets: a 1-byte empty log once overwrote CPython's cached b" " with
    NUL, so every later print separator written to a pipe came out as a NUL byte."""
    module = compile_cubin('extern "C" __global__ void k(int* x) { x[0] = 1; }', arch="sm_90a")
    assert not module.from_cache and module.log == ""
    assert bytes([32])[0] == 32 and " ".encode()[0] == 32


def test_cache_hit_and_miss(cache_dir):
    src = 'extern "C" __global__ void fill(float* x, float v) { x[threadIdx.x] = v; }'
    first = compile_cubin(src, arch="sm_90a")
    second = compile_cubin(src, arch="sm_90a")
    assert not first.from_cache and second.from_cache and second.cubin == first.cubin
    assert len(list(cache_dir.glob("*.cubin"))) == 1
    assert not compile_cubin(src, arch="sm_90a", options=["-lineinfo"]).from_cache
    assert not compile_cubin(src, arch="sm_80").from_cache
    assert not compile_cubin(src + "\n// changed\n", arch="sm_90a").from_cache
    assert len(list(cache_dir.glob("*.cubin"))) == 4


def test_cache_key_covers_headers(cache_dir, monkeypatch, tmp_path):
    import pkit.compiler as C

    include = tmp_path / "include"
    (include / "pkit").mkdir(parents=True)
    header = include / "pkit" / "extra.cuh"
    header.write_text("#define PKIT_EXTRA 1\n")
    monkeypatch.setattr(C, "INCLUDE_DIR", include)
    src = '#include <pkit/extra.cuh>\nextern "C" __global__ void k(int* x) { x[0] = PKIT_EXTRA; }'
    assert not compile_cubin(src, arch="sm_90a").from_cache
    assert compile_cubin(src, arch="sm_90a").from_cache
    header.write_text("#define PKIT_EXTRA 2\n")
    assert not compile_cubin(src, arch="sm_90a").from_cache


@pytest.mark.parametrize("kwargs, error, text", [
    (dict(source="nope.cu", name="k", arch="sm_90a"), FileNotFoundError, "no CUDA file 'nope.cu'"),
    (dict(source="copy.cu", name="copy16", arch="sm90"), ValueError, "arch: expected"),
    (dict(source="copy.cu", name="not an identifier", arch="sm_90a"), ValueError, "name: expected"),
    (dict(source="copy.cu", name="missing_kernel", arch="sm_90a"), ValueError, "no kernel 'missing_kernel'"),
    (dict(source="", name="k", arch="sm_90a"), ValueError, "source: expected"),
    (dict(source="copy.cu", name="copy16", arch="sm_90a", options="-O3"), ValueError, "options: expected"),
])
def test_bad_arguments_give_clear_errors(kwargs, error, text, cache_dir):
    with pytest.raises(error, match=text):
        pkit.compile(**kwargs)
