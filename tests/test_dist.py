"""pkit.dist (collectives on torch tensors, one process per rank) under torchrun: tests/mp_dist_check.py checks
every op, dtype, mechanism and padding case on every rank. On CPU tensors it runs the torch.distributed fallback;
on one GPU both ranks share it (correctness only); on two GPUs each rank has its own."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
ROOT = HERE.parent


def run_check(where: str, nproc: int = 2) -> str:
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}",
                          str(HERE / "mp_dist_check.py"), where], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.count("DIST OK") == nproc, out.stdout[-4000:] + out.stderr[-4000:]
    return out.stdout


def test_cpu_tensors_run_the_torch_distributed_fallback():
    run_check("cpu")


@pytest.mark.gpu
def test_every_op_dtype_and_mechanism_on_every_rank():
    run_check("cuda")


@pytest.mark.gpu
def test_pkit_solutions_match_their_references_on_the_gpu():
    """Every problems/*/solutions/pkit_*.py on the GPU against its reference on the CPU, tiny size."""
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                          str(HERE / "mp_solutions_check.py"), "tiny"], capture_output=True, text=True,
                         timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.count("SOLUTIONS OK") == 2, out.stdout[-6000:] + out.stderr[-3000:]


@pytest.mark.gpu
def test_four_ranks_take_the_two_shot_all_reduce():
    """Beyond two ranks large all-reduces are two-shot (staged_all_reduce_two_shot); four ranks may share GPUs."""
    run_check("cuda", nproc=4)
