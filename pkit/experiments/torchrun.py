"""Measurements that need one process per GPU: a module run under torchrun, whose rank 0 writes a CSV.

Example:
    >>> from pkit.experiments.torchrun import torchrun                                            # doctest: +SKIP
    >>> torchrun("pkit.experiments.torch_overlap", ["--n-locals", "1024"], nproc=2)                # doctest: +SKIP
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from typing import Sequence

import pandas as pd

NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def torchrun(module: str, args: Sequence[str], nproc: int = 2, timeout_s: float = 600) -> pd.DataFrame:
    """`python -m torch.distributed.run --nproc_per_node=nproc -m module --out CSV *args` with NVLink multicast
    off; rank 0's CSV as a DataFrame. A failed run raises RuntimeError with the end of its stderr."""
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
