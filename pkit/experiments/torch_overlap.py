"""PyTorch's all-gather + GEMM, one process per GPU: serial (all_gather_into_tensor, then matmul) and async
tensor parallelism (`torch.ops.symm_mem.fused_all_gather_matmul` on symmetric memory, no multicast).

Run under torchrun; rank 0 writes a CSV with `pkit.experiments.overlap.sweep`'s columns (the slowest rank's
time per repetition):
    python -m torch.distributed.run --nproc_per_node=2 -m pkit.experiments.torch_overlap \
        --out torch.csv --n-locals 1024 4096
`pkit.experiments.overlap.torch_sweep` does this and returns the DataFrame.
"""
from __future__ import annotations

import argparse
import os

from .torch_collectives import time_samples

SCHEDULES = ("torch_serial", "torch_async_tp")


def _cases(m: int, k: int, n_local: int, rank: int, world: int, group_name: str, seed: int):
    """(schedule, call, output) for one shape, on fresh random inputs, and this rank's float32 reference."""
    import torch
    import torch.distributed as dist
    import torch.distributed._symmetric_memory as symm_mem

    dev = torch.device("cuda", rank)
    gen = torch.Generator(device=dev).manual_seed(seed * world + rank)
    shard = symm_mem.empty((m // world, k), dtype=torch.bfloat16, device=dev)
    shard.copy_(torch.randn(m // world, k, device=dev, generator=gen))
    weight = torch.randn(n_local, k, device=dev, generator=gen).bfloat16()
    gathered = torch.empty(m, k, dtype=torch.bfloat16, device=dev)
    out = torch.full((m, n_local), float("nan"), dtype=torch.bfloat16, device=dev)
    dist.all_gather_into_tensor(gathered, shard)
    want = gathered.float() @ weight.float().T

    def serial():
        dist.all_gather_into_tensor(gathered, shard)
        torch.matmul(gathered, weight.T, out=out)
        return out

    def async_tp():
        return torch.ops.symm_mem.fused_all_gather_matmul(shard, [weight.T], 0, group_name)[1][0]

    return [("torch_serial", serial), ("torch_async_tp", async_tp)], want


def main(argv=None) -> None:
    import pandas as pd
    import torch
    import torch.distributed as dist

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True)
    parser.add_argument("--n-locals", type=int, nargs="+", required=True)
    parser.add_argument("--m", type=int, default=8192)
    parser.add_argument("--k", type=int, default=8192)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args(argv)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", rank))
    group_name = dist.group.WORLD.group_name
    rows = []
    for i, n_local in enumerate(args.n_locals):
        cases, want = _cases(args.m, args.k, n_local, rank, world, group_name, seed=i)
        for schedule, call in cases:
            got = call().float()
            err = (got - want).abs()
            ok = bool(torch.isfinite(got).all()) and bool((err <= 2 ** -7 * want.abs() + 1e-3 * args.k ** 0.5).all())
            verdict = torch.tensor([float(ok), float(err.max())], device="cuda")
            dist.all_reduce(verdict[:1], op=dist.ReduceOp.MIN)
            dist.all_reduce(verdict[1:], op=dist.ReduceOp.MAX)
            samples = torch.tensor(time_samples(call, args.reps, args.warmup), device="cuda")
            dist.all_reduce(samples, op=dist.ReduceOp.MAX)  # each repetition's slowest rank
            median_us = float(samples.median()) * 1e3
            rows.append({"schedule": schedule, "comm_sms": 0, "gpus": world, "m": args.m, "k": args.k,
                         "n_local": n_local, "time_median_us": median_us,
                         "time_min_us": float(samples.min()) * 1e3, "time_max_us": float(samples.max()) * 1e3,
                         "cv": float(samples.std(unbiased=False) / samples.mean()),
                         "tflops_per_gpu": 2 * args.m * args.k * n_local / (median_us * 1e-6) / 1e12,
                         "verified": bool(verdict[0] > 0), "max_abs_err": float(verdict[1])})
        del cases, want
    if rank == 0:
        pd.DataFrame(rows).to_csv(args.out, index=False)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
