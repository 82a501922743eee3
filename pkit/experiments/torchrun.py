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


def gpu_processes(nproc: int | None, experiment: str) -> int:
    """How many processes a one-process-per-GPU run of `experiment` starts: `nproc`, at least the GPUs the
    experiment needs (`pkit.studies.gpu_needs`), or None: one per GPU of this machine, which must have that many
    (else an error naming `nproc`, what the experiment needs and the fix). An `nproc` above the GPUs here fails in
    the run, saying so (collectives.pytorch.init_one_gpu_per_rank)."""
    from ..studies import gpu_needs, part_devices

    if nproc is None:
        return len(part_devices(experiment, arg="nproc"))
    need, what = gpu_needs(experiment)
    if not (isinstance(nproc, int) and nproc >= need):
        raise ValueError(f"nproc: expected at least {need} processes {what}, got {nproc!r}; pass nproc=None for "
                         "one process per GPU of this machine")
    return nproc


def torchrun(module: str, args: Sequence[str], nproc: int | None = None, timeout_s: float = 600) -> pd.DataFrame:
    """`python -m torch.distributed.run --nproc_per_node=nproc -m module --out CSV *args` with NVLink multicast
    off; rank 0's CSV as a DataFrame. `nproc`: processes, None meaning one per GPU of this machine. A failed run
    raises RuntimeError with the end of its stderr."""
    if nproc is None:
        from ..team import team_devices

        nproc = len(team_devices(arg="nproc"))
    if not (isinstance(nproc, int) and nproc >= 1):
        raise ValueError(f"nproc: expected a positive number of processes, got {nproc!r}")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "rank0.csv")
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}", "-m", module,
               "--out", out, *map(str, args)]
        # TMPDIR: torchrun's own log folder (torchelastic_*), which it leaves behind, goes with `tmp`
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                              env={**os.environ, **NO_MULTICAST, "TMPDIR": tmp})
        if done.returncode != 0:
            raise RuntimeError(f"{module} under torchrun failed ({done.returncode}):\n{done.stderr[-3000:]}")
        return pd.read_csv(out)
