"""pkit.dist (collectives on torch tensors, one process per rank): tests/mp_dist_check.py checks every op, dtype,
mechanism and padding case on every rank, for 2 to 8 ranks, under torchrun on GPUs. On CPU tensors it runs the
torch.distributed fallback (gloo), its ranks forked with the environment torchrun gives them; with at least as many
GPUs as ranks each rank has its own GPU (NCCL); with fewer, the ranks' processes share GPUs with gloo for the host
side (NCCL refuses two ranks on one GPU; the GPU time-slices the processes' kernels: correctness only)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
from problem_ranks import forked_ranks

pytestmark = pytest.mark.heavy

HERE = Path(__file__).parent
ROOT = HERE.parent


def run_check(where: str, nproc: int = 2) -> str:
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}",
                          str(HERE / "mp_dist_check.py"), where], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.count("DIST OK") == nproc, out.stdout[-4000:] + out.stderr[-4000:]
    return out.stdout


def _report_cpu_check(out_dir: str) -> None:
    """In a forked rank: mp_dist_check's lines for CPU tensors, into `out_dir`/rank<RANK>.txt."""
    import mp_dist_check

    Path(out_dir, f"rank{os.environ['RANK']}.txt").write_text("\n".join(mp_dist_check.check("cpu")))


@pytest.mark.parametrize("nproc", [2, 3])
def test_cpu_tensors_run_the_torch_distributed_fallback(nproc, tmp_path):
    """Three ranks: the reductions still add in rank order (torch.distributed's own sum would not); more ranks on
    CPU take minutes and tens of GB, and run on the GPU machine below. The ranks fork from a process that imported
    torch once, with the environment torchrun gives them (torchrun itself starts the GPU runs below)."""
    forked_ranks(nproc, _report_cpu_check, str(tmp_path))
    reports = [(tmp_path / f"rank{r}.txt").read_text() for r in range(nproc)]
    assert all(report.startswith(f"DIST OK {r} ") for r, report in enumerate(reports)), reports


@pytest.mark.gpu
@pytest.mark.parametrize("nproc", [2, 3, 4, 8])
def test_every_op_dtype_and_mechanism_on_every_rank(nproc):
    """Beyond two ranks large all-reduces are two-shot (staged_all_reduce_two_shot); three ranks pad odd shares."""
    run_check("cuda", nproc)


@pytest.mark.gpu
def test_pkit_solutions_match_their_references_on_the_gpu():
    """Every problems/*/solutions/pkit_*.py on the GPU against its reference on the CPU, tiny size."""
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                          str(HERE / "mp_solutions_check.py"), "tiny"], capture_output=True, text=True,
                         timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}, cwd=ROOT)
    assert out.returncode == 0 and out.stdout.count("SOLUTIONS OK") == 2, out.stdout[-6000:] + out.stderr[-3000:]

