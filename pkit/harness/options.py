"""How to evaluate: `EvalOptions`, and what they mean for one problem (device, dtype, the workers' spec, timing
counts, tolerances).

Example:
    >>> options = EvalOptions(perf=False)
    >>> timing_counts(options), options.world_size
    ({'warmup': 2, 'iters': 10}, 2)
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from .contain import OUTPUT_BYTES
from .problems import Problem

QUICK_TIMING = {"warmup": 2, "iters": 10}
"""Timing without --perf: just enough to call a correct candidate faster or slower."""


@dataclass
class EvalOptions:
    """How to evaluate. Times in seconds; `size`/`device` 'auto' pick tiny+cpu without enough GPUs,
    large+cuda with them; `dtype` None takes each problem's first dtype; `atol`/`rtol` None use the
    dtype table of pkit.tolerance (or the problem's own tolerance); `fresh_mib` caps the distinct timed input
    sets a rank holds at once, in MiB (None: `worker.FRESH_BYTES`, 4 GiB on GPUs, 512 MiB on CPUs); past it the
    timed calls come back to sets already used; `output_mib` caps the stdout and stderr of one rank kept on disk,
    in MiB (the rest is counted and dropped, and the record flagged `loud_output`)."""

    world_size: int = 2
    size: str = "auto"
    dtype: str | None = None
    trials: int = 5
    seed: int = 0
    perf: bool = False
    warmup: int = 25
    iters: int = 100
    timeout_s: float = 300.0
    atol: float | None = None
    rtol: float | None = None
    device: str = "auto"
    ceilings: str = "H200"
    fresh_mib: float | None = None
    output_mib: float = OUTPUT_BYTES / (1 << 20)

    def validate(self, spell: Callable[[str], str] = str) -> None:
        """Raise ValueError naming the first option out of range; `spell` turns a field name into the name the
        message uses (the command line passes its option names: 'timeout_s' -> '--timeout').

        >>> EvalOptions(atol=-1).validate(lambda field: "--" + field)
        Traceback (most recent call last):
        ...
        ValueError: --atol: expected a number >= 0, got -1
        """
        from ..hardware import GPUS

        rules = (("world_size", self.world_size >= 1, "an integer >= 1"),
                 ("trials", self.trials >= 1, "an integer >= 1"),
                 ("warmup", self.warmup >= 0, "an integer >= 0"),
                 ("iters", self.iters >= 1, "an integer >= 1"),
                 ("timeout_s", self.timeout_s > 0, "seconds > 0"),
                 ("atol", self.atol is None or self.atol >= 0, "a number >= 0"),
                 ("rtol", self.rtol is None or self.rtol >= 0, "a number >= 0"),
                 ("device", self.device in ("auto", "cpu", "cuda"), "one of auto, cpu, cuda"),
                 ("fresh_mib", self.fresh_mib is None or 0 < self.fresh_mib < math.inf, "MiB > 0"),
                 ("output_mib", 0 <= self.output_mib < math.inf, "MiB >= 0"),
                 ("ceilings", self.ceilings in GPUS, f"a GPU of pkit.hardware.GPUS ({', '.join(GPUS)})"))
        for name, ok, expected in rules:
            if not ok:
                value = getattr(self, name)
                raise ValueError(f"{spell(name)}: expected {expected}, got "
                                 + (f"{value:g}" if isinstance(value, float) else repr(value)))


def pick_device(requested: str, world_size: int) -> str:
    """'cuda' when asked for or when 'auto' finds at least `world_size` GPUs, else 'cpu'."""
    import torch

    if requested == "cuda" and torch.cuda.device_count() < world_size:
        raise ValueError(f"device: 'cuda' needs {world_size} GPUs, found {torch.cuda.device_count()}")
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() and torch.cuda.device_count() >= world_size else "cpu"
    return requested


def unsupported(problem: Problem, options: EvalOptions) -> str | None:
    """Why `problem` cannot run under `options` (world size or dtype), or None when it can."""
    if problem.world_sizes and options.world_size not in problem.world_sizes:
        return f"world size {options.world_size} not in {list(problem.world_sizes)}"
    if options.dtype and options.dtype not in problem.dtypes:
        return f"dtype {options.dtype} not in {list(problem.dtypes)}"
    return None


def problem_dtype(problem: Problem, dtype: str | None) -> str:
    """`dtype`, or the problem's first dtype; checks the problem supports it."""
    dtype = dtype or problem.dtypes[0]
    if dtype not in problem.dtypes:
        raise ValueError(f"dtype: problem {problem.name} supports {list(problem.dtypes)}, got {dtype!r}")
    return dtype


def spec_for(problem: Problem, options: EvalOptions, device: str) -> dict:
    """The part of a worker's spec shared by reference and candidate workers."""
    size = problem.resolve_size(options.size, device)
    dtype = problem_dtype(problem, options.dtype)
    return {"source": problem.source, "world_size": options.world_size, "device": device, "size": size,
            "dtype": dtype, "pg_timeout_s": options.timeout_s + 60,
            "fresh_bytes": None if options.fresh_mib is None else int(options.fresh_mib * (1 << 20)),
            "output_bytes": int(options.output_mib * (1 << 20))}


def timing_counts(options: EvalOptions) -> dict:
    """Warm-up calls and timed calls per window: --warmup and --iters with --perf, else `QUICK_TIMING`."""
    return {"warmup": options.warmup, "iters": options.iters} if options.perf else dict(QUICK_TIMING)


def tolerances(problem: Problem, options: EvalOptions) -> dict:
    """The tolerance keywords of `checks.compare` for `problem` under `options`: `atol`, `rtol` (None: the dtype
    table) and `summands`, the world size for a problem whose outputs are sums over the ranks (META['rank_sums']),
    else 1."""
    atol, rtol = options.atol, options.rtol
    if problem.tolerance is not None:
        atol = problem.tolerance[0] if atol is None else atol
        rtol = problem.tolerance[1] if rtol is None else rtol
    return {"atol": atol, "rtol": rtol, "summands": options.world_size if problem.rank_sums else 1}
