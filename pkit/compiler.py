"""`pkit.compile`: CUDA C++ → cubin with NVRTC, cached on disk, loaded per GPU through CuPy.

The cubin is built by NVRTC for an explicit architecture (`sm_90a` keeps Hopper's arch-specific
instructions such as wgmma and setmaxnreg; CuPy's RawModule would add its own plain sm_90) and loaded
with `cupy.cuda.function.Module.load`. pkit's device headers (`pkit/include/pkit/*.cuh`) and the CUDA
headers are on the include path. Compiling needs no GPU. Kernels are `extern "C"` functions looked up by name, or
C++ kernels (templates included) named by NVRTC name expressions such as `"reduce<float>"`, which the compile
instantiates and maps to their mangled names (`Module.lowered`).

Example:
    >>> import pkit
    >>> src = 'extern "C" __global__ void fill(float* x, float v) { x[threadIdx.x] = v; }'
    >>> fill = pkit.compile(src, "fill", arch="sm_90a")
    >>> fill.cubin[:4]
    b'\\x7fELF'
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import struct
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Sequence

from .errors import CompileError
from .waits import WAIT_GLOBALS, prepare_module

PACKAGE_DIR = Path(__file__).resolve().parent
INCLUDE_DIR = PACKAGE_DIR / "include"
KERNEL_DIR = PACKAGE_DIR / "kernels"
_ARCH = re.compile(r"^sm_\d{2,3}[af]?$")
_NAME_EXPRESSION = re.compile(r"^[A-Za-z_]\w*(::[A-Za-z_]\w*)*(<[\w\s:,<>*&]+>)?$")


def cache_dir() -> Path:
    """Cubin cache: $PKIT_CACHE_DIR, else ~/.cache/pkit/cubin."""
    return Path(os.environ.get("PKIT_CACHE_DIR", Path.home() / ".cache" / "pkit" / "cubin"))


@lru_cache(maxsize=None)
def cuda_include_dir() -> Path:
    """The directory holding cuda_bf16.h and friends (pip's nvidia-cuda-runtime, else $CUDA_HOME)."""
    try:
        from cuda.pathfinder import find_nvidia_header_directory

        found = find_nvidia_header_directory("cudart")
        if found:
            return Path(found)
    except Exception:  # noqa: BLE001 - fall back to a toolkit on disk
        pass
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and (Path(root) / "include" / "cuda_bf16.h").exists():
            return Path(root) / "include"
    raise CompileError("<setup>", "CUDA headers not found: install 'cuda-toolkit[cudart]' or set CUDA_HOME", "")


def nvrtc_version() -> tuple[int, int]:
    from cuda.bindings import nvrtc

    _, major, minor = nvrtc.nvrtcVersion()
    return int(major), int(minor)


def device_arch(device: int | None = None) -> str:
    """The NVRTC target for a GPU: `sm_90a` on Hopper (arch-specific features on), else `sm_XY`."""
    import cupy as cp

    from .gpus import require_gpus

    dev = cp.cuda.runtime.getDevice() if device is None else device
    require_gpus([dev])
    cc = cp.cuda.Device(dev).compute_capability
    return f"sm_{cc}a" if cc in ("90", "100", "101", "103", "120", "121") else f"sm_{cc}"


def read_source(source: str) -> tuple[str, str]:
    """(program name, text) of a CUDA source: a file under pkit/kernels/, a path, or the text itself."""
    if not isinstance(source, str) or not source:
        raise ValueError("source: expected CUDA C++ text, a file name under pkit/kernels/, or a path to a .cu file")
    if "\n" not in source and source.endswith((".cu", ".cuh")):
        path = Path(source) if Path(source).exists() else KERNEL_DIR / source
        if not path.exists():
            have = sorted(p.name for p in KERNEL_DIR.glob("*.cu"))
            raise FileNotFoundError(f"source: no CUDA file {source!r}; pkit/kernels has {have}")
        return path.name, path.read_text()
    return "inline.cu", source


def _headers_digest() -> str:
    h = hashlib.sha256()
    for path in sorted(INCLUDE_DIR.rglob("*.cuh")):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def cubin_symbols(cubin: bytes) -> frozenset[str]:
    """Names of the symbols a cubin (a 64-bit little-endian ELF) defines, read from its symbol tables."""
    if cubin[:6] != b"\x7fELF\x02\x01":
        raise ValueError("cubin: expected a 64-bit little-endian ELF image")
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", cubin, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize) for i in range(shnum)]
    names = set()
    for _, kind, _, _, offset, size, link, _, _, entsize in sections:
        if kind == 2:  # SHT_SYMTAB; `link` is its string table
            strings = sections[link][4]
            for at in range(offset, offset + size, entsize):
                name, _, _, shndx = struct.unpack_from("<IBBH", cubin, at)
                if name and shndx:  # named and defined in a section
                    names.add(cubin[strings + name:cubin.index(b"\0", strings + name)].decode())
    return frozenset(names)


@dataclass
class Module:
    """A compiled cubin, and its CuPy modules loaded per device on first use."""

    name: str
    arch: str
    cubin: bytes
    log: str
    from_cache: bool
    source_text: str = field(default="", repr=False)
    lowered: dict = field(default_factory=dict)  # name expression -> mangled kernel name
    _loaded: dict = field(default_factory=dict, repr=False)
    _functions: dict = field(default_factory=dict, repr=False)

    @property
    def has_wait_globals(self) -> bool:
        """Whether the cubin defines the wait globals of include/pkit/sync.cuh (pkit.waits sets them)."""
        return cubin_symbols(self.cubin) >= set(WAIT_GLOBALS)

    def function(self, kernel: str, device: int | None = None):
        """The CuPy function `kernel` of this module on `device` (default: current device)."""
        import cupy as cp

        dev = cp.cuda.runtime.getDevice() if device is None else device
        if dev not in self._loaded:
            with cp.cuda.Device(dev):
                mod = cp.cuda.function.Module()
                mod.load(self.cubin)
                if self.has_wait_globals:
                    prepare_module(mod, dev)
            self._loaded[dev] = mod
        if (kernel, dev) in self._functions:
            return self._functions[kernel, dev]
        try:
            function = self._loaded[dev].get_function(self.lowered.get(kernel, kernel))
        except Exception as e:  # CuPy raises CUDADriverError(CUDA_ERROR_NOT_FOUND)
            names = re.findall(r'extern\s+"C"\s+__global__\s+(?:__launch_bounds__\([^)]*\)\s+)?void\s+(\w+)',
                               self.source_text)
            raise ValueError(f"kernel: {kernel!r} is neither an extern \"C\" __global__ function of {self.name} "
                             f"(found {names}) nor one of its compiled name expressions {list(self.lowered)}") from e
        self._functions[kernel, dev] = function  # looked up once: launches are on the per-call host path
        return function


def compile_cubin(source: str, arch: str | None = None, options: Sequence[str] = (),
                  name_expressions: Sequence[str] = ()) -> Module:
    """Compile `source` (text, or a file under pkit/kernels/) to a cubin for `arch` (default: this GPU).

    `name_expressions`: C++ kernels to instantiate and look up by that name, e.g. `["reduce<__nv_bfloat16>"]`.
    """
    from cuda.bindings import nvrtc

    name, text = read_source(source)
    arch = arch or device_arch()
    if not _ARCH.match(arch):
        raise ValueError(f"arch: expected an SM target such as 'sm_90a' or 'sm_90', got {arch!r}")
    if isinstance(options, str) or not all(isinstance(o, str) for o in options):
        raise ValueError(f"options: expected a sequence of strings, got {options!r}")
    if isinstance(name_expressions, str) or not all(isinstance(e, str) and _NAME_EXPRESSION.match(e)
                                                    for e in name_expressions):
        raise ValueError("name_expressions: expected a sequence of C++ kernel names such as 'k' or 'k<float>', "
                         f"got {name_expressions!r}")
    opts = [f"--gpu-architecture={arch}", "--std=c++17", f"-I{INCLUDE_DIR}", f"-I{cuda_include_dir()}",
            "-default-device", "--device-int128", *options]
    key = hashlib.sha256("\0".join([text, _headers_digest(), *opts, *name_expressions,
                                    repr(nvrtc_version())]).encode()).hexdigest()
    cached = cache_dir() / f"{key[:32]}.cubin"
    names_file = cached.with_suffix(".names.json")
    if cached.exists() and (names_file.exists() or not name_expressions):
        lowered = json.loads(names_file.read_text()) if name_expressions else {}
        return Module(name, arch, cached.read_bytes(), "", True, source_text=text, lowered=lowered)

    err, prog = nvrtc.nvrtcCreateProgram(text.encode(), name.encode(), 0, [], [])
    _check(nvrtc, err, name)
    try:
        for expression in name_expressions:
            _check(nvrtc, nvrtc.nvrtcAddNameExpression(prog, expression.encode())[0], name)
        (result,) = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
        # NVRTC writes into the buffers it is given: they must be fresh and writable (bytearray), never a bytes
        # object, which CPython may share (b" " * 1 is the interpreter's cached b" ", and a 1-byte log's NUL
        # would turn every later b" " into b"\0").
        _, size = nvrtc.nvrtcGetProgramLogSize(prog)
        buf = bytearray(size)
        _check(nvrtc, nvrtc.nvrtcGetProgramLog(prog, buf)[0], name)
        log = bytes(buf).rstrip(b"\0").decode(errors="replace")
        if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CompileError(name, log, text)
        _, size = nvrtc.nvrtcGetCUBINSize(prog)
        image = bytearray(size)
        _check(nvrtc, nvrtc.nvrtcGetCUBIN(prog, image)[0], name)
        cubin = bytes(image)
        lowered = {}
        for expression in name_expressions:
            err, mangled = nvrtc.nvrtcGetLoweredName(prog, expression.encode())
            _check(nvrtc, err, name)
            lowered[expression] = mangled.decode()
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    if name_expressions:
        _write_atomically(names_file, json.dumps(lowered).encode())
    _write_atomically(cached, cubin)
    return Module(name, arch, cubin, log, False, source_text=text, lowered=lowered)


def _write_atomically(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def _check(nvrtc, err, name: str) -> None:
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise CompileError(name, f"NVRTC call failed: {err!r}", "")


@dataclass
class Kernel:
    """One `extern "C" __global__` function of a compiled module, launchable on any GPU.

    Call it as `kernel(grid, block, args, shared_mem=0, device=None, stream=None)`; `args` are CuPy arrays
    (passed as pointers) and NumPy scalars (passed with their exact type, e.g. `np.uint64(n)`).
    """

    module: Module
    name: str

    @property
    def cubin(self) -> bytes:
        return self.module.cubin

    @property
    def arch(self) -> str:
        return self.module.arch

    @property
    def from_cache(self) -> bool:
        return self.module.from_cache

    def on(self, device: int | None = None):
        """The loaded CuPy function on `device`."""
        return self.module.function(self.name, device)

    def __call__(self, grid, block, args, shared_mem: int = 0, device: int | None = None, stream=None) -> None:
        import cupy as cp

        current = cp.cuda.runtime.getDevice()
        dev = current if device is None else device
        fn = self.on(dev)
        if shared_mem > 48 * 1024:  # above the default cap the function must opt in
            from cupy_backends.cuda.api import driver

            with cp.cuda.Device(dev):
                driver.funcSetAttribute(fn.ptr, driver.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, shared_mem)
        if dev != current:  # switch only when needed: this is the per-call host path of small collectives
            cp.cuda.runtime.setDevice(dev)
        try:
            fn(tuple(grid) if not isinstance(grid, int) else (grid,),
               tuple(block) if not isinstance(block, int) else (block,),
               tuple(args), shared_mem=shared_mem, stream=stream or cp.cuda.get_current_stream())
        finally:
            if dev != current:
                cp.cuda.runtime.setDevice(current)


def compile(source: str, name: str, arch: str | None = None, options: Sequence[str] = ()) -> Kernel:  # noqa: A001
    """Compile `source` and return its kernel `name`: an `extern "C" __global__` function's identifier, or a C++
    kernel's name expression such as `"reduce<float>"` (the template is instantiated for it).

    Without a GPU, pass `arch` (e.g. 'sm_90a'): the cubin is built and `.cubin` can be inspected;
    launching needs the GPU.
    """
    if not isinstance(name, str) or not _NAME_EXPRESSION.match(name):
        raise ValueError(f"name: expected the kernel's C identifier or a name expression such as 'k<float>', "
                         f"got {name!r}")
    _, text = read_source(source)
    function = re.match(r"[\w:]+", name).group().split("::")[-1]
    if not re.search(rf"\b{re.escape(function)}\s*\(", text):
        raise ValueError(f"name: no kernel {function!r} in {read_source(source)[0]}")
    return Kernel(compile_cubin(source, arch, options, name_expressions=[name]), name)
