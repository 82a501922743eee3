"""Measurements that need one process per GPU: a module run under torchrun, whose rank 0 writes a CSV.

Example:
    >>> from pkit.experiments.torchrun import torchrun                                            # doctest: +SKIP
    >>> torchrun("pkit.experiments.overlap.pytorch", ["--inner", "1024"])  # one process per GPU       # doctest: +SKIP
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from typing import Sequence

import pandas as pd

NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def gpu_processes(nproc: int | None = None, what: str = "(one process per GPU)") -> int:
    """How many processes a one-process-per-GPU run starts: `nproc`, at least 2, or None: one per GPU of this
    machine, which must have two or more (else an error naming `nproc`, what needs the GPUs (`what`) and the fix).
    An `nproc` above the GPUs here fails in the run, saying so (collectives.pytorch.init_one_gpu_per_rank)."""
    from ..team import team_devices

    if nproc is None:
        return len(team_devices(need=2, arg="nproc", what=what))
    if not (isinstance(nproc, int) and nproc >= 2):
        raise ValueError(f"nproc: expected at least 2 processes {what}, got {nproc!r}; pass nproc=None for one "
                         "process per GPU of this machine")
    return nproc


def torchrun(module: str, args: Sequence[str], nproc: int | None = None, timeout_s: float = 600) -> pd.DataFrame:
    """`python -m torch.distributed.run --nproc_per_node=nproc -m module --out CSV *args` with NVLink multicast
    off; rank 0's CSV as a DataFrame. `nproc`: processes, None meaning one per GPU of this machine. A failed run
    raises RuntimeError with the end of its stderr."""
    if nproc is None:
        nproc = gpu_processes(what="(one process per GPU)")
    if not (isinstance(nproc, int) and nproc >= 1):
        raise ValueError(f"nproc: expected a positive number of processes, got {nproc!r}")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rank0.csv")
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}", "-m", module,
               "--out", out, *map(str, args)]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env={**os.environ, **NO_MULTICAST})
        if done.returncode != 0:
            raise RuntimeError(f"{module} under torchrun failed ({done.returncode}):\n{done.stderr[-3000:]}")
        return pd.read_csv(out)
