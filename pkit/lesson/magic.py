"""The lesson's `%%cuda NAME` cell magic: the cell below the magic line is CUDA C++, stored in the notebook as the
string `NAME` and compiled at once with pkit's compiler (NVRTC, for `OFFLINE_ARCH`; no GPU needed), so a mistake
shows with the compiler's lines as soon as the cell runs, before any check launches it.

Importing `pkit.lesson` in IPython (a notebook's kernel, papermill's, plain IPython) registers the magic; so does
`%load_ext pkit.lesson`. The source is stored before it is compiled, so a check given `NAME` says what is wrong
too. JupyterLab colours the cell as C++ where pkit's small JupyterLab extension is loaded (pkit/lesson/labextension;
`cuda-cells.js` says why it takes one).

Example (what the cell `%%cuda KERNEL` does, called directly):
    >>> cell = 'extern "C" __global__ void fill(float* x) { x[threadIdx.x] = 1.0f; }'
    >>> names = {}
    >>> cuda_cell("KERNEL", cell, names)
    >>> names["KERNEL"] == cell
    True
    >>> cuda_cell("KERNEL", cell.replace("1.0f", "one"), names)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    pkit.lesson.magic.CudaCellError: %%cuda KERNEL does not compile (stored as KERNEL all the same; ...):
    compiling 'inline.cu' failed:
    inline.cu(1): error: identifier "one" is undefined
    ...
"""
from __future__ import annotations

import keyword
import sys
from pathlib import Path

from ..compiler import compile_cubin
from ..errors import CompileError, PkitError
from .checks import OFFLINE_ARCH

LABEXTENSIONS = Path(__file__).parent / "labextension"  # for JupyterLab: --LabApp.extra_labextensions_path


class CudaCellError(PkitError):
    """A `%%cuda` cell without a name to store it in, or that NVRTC rejects; IPython shows the message (for a
    compile error, the log and the source lines) without a traceback."""

    def _render_traceback_(self) -> list[str]:
        return str(self).splitlines()


def cuda_cell(line: str, cell: str, namespace: dict) -> None:
    """Run a `%%cuda NAME` cell: `line` is what follows `%%cuda` (one Python name), `cell` the CUDA C++ below it.
    Stores `cell` as `namespace[NAME]`, then compiles it for OFFLINE_ARCH; raises CudaCellError where NAME is no
    Python name, or with the compiler's log and the offending lines where the cell does not compile."""
    name = line.strip()
    if not name.isidentifier() or keyword.iskeyword(name):
        raise CudaCellError(f"%%cuda: expected one Python name to store the cell's source in (%%cuda COPY), got "
                            f"{line!r}")
    namespace[name] = cell
    try:
        compile_cubin(cell, arch=OFFLINE_ARCH)
    except CompileError as e:
        raise CudaCellError(f"%%cuda {name} does not compile (stored as {name} all the same; line 1 is the first line "
                            f"under %%cuda):\n{e}") from None


def load_ipython_extension(shell) -> None:
    """Register `%%cuda` in an IPython shell, storing into its user namespace (`%load_ext pkit.lesson` calls it)."""

    def cuda(line: str, cell: str) -> None:
        cuda_cell(line, cell, shell.user_ns)

    cuda.__doc__ = cuda_cell.__doc__
    shell.register_magic_function(cuda, "cell", "cuda")


def register_in_ipython() -> bool:
    """Register `%%cuda` in the IPython shell this process runs in; False where there is none (plain Python)."""
    ipython = sys.modules.get("IPython")  # never imported here: a process without IPython has no shell to serve
    shell = ipython.get_ipython() if ipython else None
    if shell is not None:
        load_ipython_extension(shell)
    return shell is not None
