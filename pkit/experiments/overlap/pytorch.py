"""PyTorch's tensor-parallel GEMMs, one process per GPU, each schedule serial (the collective, then matmul, or
matmul then the collective) and async tensor parallelism on symmetric memory (no multicast):
all-gather + GEMM (`fused_all_gather_matmul`) and GEMM + reduce-scatter (`fused_matmul_reduce_scatter`).

Run under torchrun, one process per GPU (any number from 2 to 8); rank 0 writes a CSV with
`pkit.experiments.overlap.sweep`'s columns (the slowest rank's time per repetition); `--inner` is N_local for ag_gemm
and K_local for gemm_rs:
    python -m torch.distributed.run --nproc_per_node=$(nvidia-smi -L | wc -l) -m pkit.experiments.overlap.pytorch \
        --out torch.csv --pattern ag_gemm --inner 1024 4096
`pkit.experiments.overlap.torch_sweep` does this and returns the DataFrame.
"""
from __future__ import annotations

import argparse

from ...timing import BenchResult
from . import TORCH_SCHEDULES as SCHEDULES  # noqa: F401 - the names main's rows carry
from . import bf16_match
from ..collectives.pytorch import init_one_gpu_per_rank, time_samples


def _ag_gemm(m: int, k: int, n_local: int, rank: int, world: int, group_name: str, gen):
    """(schedule, call) pairs of AG+GEMM on fresh random inputs, this rank's float32 reference, and the scale of
    its roundings (None: the reference's own magnitude)."""
    import torch
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem

    dev = torch.device("cuda", rank)
    shard = symm_mem.empty((m // world, k), dtype=torch.bfloat16, device=dev)
    shard.copy_(torch.randn(m // world, k, device=dev, generator=gen))
    weight = torch.randn(n_local, k, device=dev, generator=gen).bfloat16()
    gathered = torch.empty(m, k, dtype=torch.bfloat16, device=dev)
    out = torch.empty((m, n_local), dtype=torch.bfloat16, device=dev)
    dist.all_gather_into_tensor(gathered, shard)
    want = gathered.float() @ weight.float().T

    def serial():
        dist.all_gather_into_tensor(gathered, shard)
        return torch.matmul(gathered, weight.T, out=out)

    def async_tp():
        return torch.ops.symm_mem.fused_all_gather_matmul(shard, [weight.T], 0, group_name)[1][0]

    return [("torch_serial", serial), ("torch_async_tp", async_tp)], want, None


def _gemm_rs(m: int, n: int, k_local: int, rank: int, world: int, group_name: str, gen):
    """(schedule, call) pairs of GEMM+RS on fresh random K slices, this rank's float32 reference (its rows of the
    sum, reduced in float32 across ranks), and the sum of the partial products' magnitudes over those rows (what
    the bf16 roundings of partials that may cancel are relative to)."""
    import torch
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem

    dev = torch.device("cuda", rank)
    lhs = symm_mem.empty((m, k_local), dtype=torch.bfloat16, device=dev)
    lhs.copy_(torch.randn(m, k_local, device=dev, generator=gen))
    weight = torch.randn(n, k_local, device=dev, generator=gen).bfloat16()
    partial = torch.empty(m, n, dtype=torch.bfloat16, device=dev)
    out = torch.empty(m // world, n, dtype=torch.bfloat16, device=dev)
    total = lhs.float() @ weight.float().T
    want, scale = torch.empty(m // world, n, device=dev), torch.empty(m // world, n, device=dev)
    dist.reduce_scatter_tensor(want, total)
    dist.reduce_scatter_tensor(scale, total.abs())

    def serial():
        torch.matmul(lhs, weight.T, out=partial)
        dist.reduce_scatter_tensor(out, partial)
        return out

    def async_tp():
        return torch.ops.symm_mem.fused_matmul_reduce_scatter(lhs, weight.T, "sum", 0, group_name)

    return [("torch_serial", serial), ("torch_async_tp", async_tp)], want, scale


def main(argv=None) -> None:
    import pandas as pd
    import torch
    import torch.distributed as dist

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True)
    parser.add_argument("--pattern", choices=("ag_gemm", "gemm_rs"), default="ag_gemm")
    parser.add_argument("--inner", type=int, nargs="+", required=True, help="N_local (ag_gemm) or K_local (gemm_rs)")
    # (torchrun reads abbreviations of its own options among the script's: no --m, --k or --n here)
    parser.add_argument("--shape", type=int, nargs=3, default=(8192, 8192, 8192), metavar=("M", "K", "N"),
                        help="M; K of ag_gemm; N of gemm_rs")
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args(argv)
    rank, world = init_one_gpu_per_rank()
    m, k, n = args.shape
    group_name = dist.group.WORLD.group_name
    rows = []
    for i, inner in enumerate(args.inner):
        gen = torch.Generator(device=torch.device("cuda", rank)).manual_seed(i * world + rank)
        if args.pattern == "ag_gemm":
            cases, want, scale = _ag_gemm(m, k, inner, rank, world, group_name, gen)
            shape, terms, roundings = {"m": m, "k": k, "n": inner}, k, 1
        else:
            cases, want, scale = _gemm_rs(m, n, inner, rank, world, group_name, gen)
            shape, terms, roundings = {"m": m, "k": inner * world, "n": n}, inner, 2
        flops = 2 * shape["m"] * shape["k"] * shape["n"] / (1 if args.pattern == "ag_gemm" else world)
        for schedule, call in cases:
            ok, err = bf16_match(call(), want, terms, roundings, scale)
            verdict = torch.tensor([float(ok), err], device="cuda")
            dist.all_reduce(verdict[:1], op=dist.ReduceOp.MIN)
            dist.all_reduce(verdict[1:], op=dist.ReduceOp.MAX)
            samples = torch.tensor(time_samples(call, args.reps, args.warmup), device="cuda")
            dist.all_reduce(samples, op=dist.ReduceOp.MAX)  # each repetition's slowest rank
            timing = BenchResult(samples.cpu().numpy())
            rows.append({"pattern": args.pattern, "schedule": schedule, "comm_sms": 0, "gpus": world, **shape,
                         **timing.times_us(), "tflops_per_gpu": flops / (timing.median_ms * 1e-3) / 1e12,
                         "verified": bool(verdict[0] > 0), "max_abs_err": float(verdict[1])})
        del cases, want
    if rank == 0:
        pd.DataFrame(rows).to_csv(args.out, index=False)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
