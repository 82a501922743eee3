"""pkit: measure, write and compare multi-GPU communication kernels.

Example:
    >>> import pkit
    >>> team = pkit.Team([0, 1])                                   # doctest: +SKIP
    >>> x = team.empty((1 << 20,), "float32")                      # doctest: +SKIP
    >>> copy = pkit.compile("copy.cu", "copy16")                   # doctest: +SKIP
"""
from __future__ import annotations

import importlib

from .errors import CompileError, PeerTimeout, PkitError

__version__ = "0.1.0"

_LAZY = {
    "compile": ("pkit.compiler", "compile"),
    "compile_cubin": ("pkit.compiler", "compile_cubin"),
    "Kernel": ("pkit.compiler", "Kernel"),
    "devices": ("pkit.gpus", "devices"),
    "topology": ("pkit.gpus", "topology"),
    "Team": ("pkit.team", "Team"),
    "SymmetricArray": ("pkit.team", "SymmetricArray"),
    "bench": ("pkit.timing", "bench"),
    "synchronize": ("pkit.launch", "synchronize"),
}
_SUBMODULES = {"roofline", "hardware", "metrics", "analysis", "results", "figures", "timing", "team",
               "experiments", "harness", "problem_kit", "launch", "dist"}


def __getattr__(name: str):
    if name in _LAZY:
        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(module), attr)
    elif name in _SUBMODULES:
        value = importlib.import_module(f"pkit.{name}")
    else:
        raise AttributeError(f"module 'pkit' has no attribute {name!r}")
    globals()[name] = value
    return value


__all__ = ["CompileError", "PeerTimeout", "PkitError", *sorted(_LAZY), *sorted(_SUBMODULES)]
