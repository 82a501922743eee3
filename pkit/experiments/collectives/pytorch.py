"""torch.distributed (NCCL), torch symmetric-memory and pkit.dist collectives, one process per GPU.

Run under torchrun, one process per GPU (any number from 2 to 8); rank 0 writes a CSV with the slowest rank's median
per (implementation, op, bytes):
    python -m torch.distributed.run --nproc_per_node=$(nvidia-smi -L | wc -l) -m pkit.experiments.collectives.pytorch \
        --out torch.csv --sizes 65536 1073741824 --dtype bfloat16
`pkit.experiments.collectives.torch_baselines` does this and returns the DataFrame.
"""
from __future__ import annotations

import argparse
import os
from functools import partial

from ...ops.collective_ops import COLLECTIVES, CollectiveOp
from ...timing import BenchResult
from ...tolerance import tolerance

TORCH_OPS = tuple(name for name, op in COLLECTIVES.items() if op.torch)  # the registered ops torch.distributed runs
SYMM_MIN_BYTES = 4096  # torch symmetric memory's smallest all-reduce


def time_samples(fn, reps: int, warmup: int, calls_per_sample: int = 1, graph: bool = False):
    """Samples in ms per call; each is the mean of `calls_per_sample` back-to-back calls (see pkit.bench). With
    `graph`, the calls are captured once into a CUDA graph and a sample is one replay (nccl-tests' -G)."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    if graph:
        captured = torch.cuda.CUDAGraph()
        with torch.cuda.graph(captured):
            for _ in range(calls_per_sample):
                fn()
        sample, launches = captured.replay, 1
    else:
        sample, launches = fn, calls_per_sample
    events = [torch.cuda.Event(enable_timing=True) for _ in range(reps + 1)]
    # Hold the stream while every launch queues (as pkit.bench's hide_launch does), so the samples are
    # device time back to back, not host launch overhead: at ~2 GHz, at least 5 ms and 50 µs per launch.
    torch.cuda._sleep(max(10_000_000, 100_000 * reps * launches))
    events[0].record()
    for i in range(reps):
        for _ in range(launches):
            sample()
        events[i + 1].record()
    torch.cuda.synchronize()
    return [events[i].elapsed_time(events[i + 1]) / calls_per_sample for i in range(reps)]


def init_one_gpu_per_rank() -> tuple[int, int]:
    """(rank, world size) of this torchrun process, after it took GPU `rank` and joined the NCCL process group; a
    clear error when the run has more processes than the machine has GPUs (NCCL takes one GPU per rank)."""
    import torch
    import torch.distributed as dist

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if world > torch.cuda.device_count():
        raise SystemExit(f"nproc: expected at most {torch.cuda.device_count()} processes, one per GPU of this machine "
                         f"(NCCL takes one GPU per rank), got {world}; start one process per GPU")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", rank))
    return rank, world


def _torch_call(entry: CollectiveOp, out, inp, root: int = 0) -> None:
    """`entry`'s torch.distributed call: into `out` from `inp`, or on `inp` where torch runs it in place; a rooted op
    from or to rank `root` (torch's `src` or `dst`)."""
    import torch.distributed as dist

    function = getattr(dist, entry.torch)
    tensors = (inp,) if entry.torch_in_place else (out, inp)
    function(*tensors, *(() if entry.rooted is None else (root,)))


def _cases(nbytes: int, dtype, world: int, rank: int, group_name: str | None):
    """(implementation, op, callable, verified) for one total size S in bytes; `verified` is None where pkit does
    not check the output (torch's own collectives), else whether it matched NCCL's on these inputs."""
    import torch

    from pkit import dist as pdist

    count = nbytes // torch.tensor([], dtype=dtype).element_size()
    dev = torch.device("cuda", rank)
    tensors = {}  # op -> (input, output), sized by the registry (`CollectiveOp.counts`)
    for op in TORCH_OPS:
        inp_count, out_count = COLLECTIVES[op].counts(count, world)
        tensors[op] = torch.randn(inp_count, device=dev).to(dtype), torch.empty(out_count, device=dev, dtype=dtype)
    for op, (inp, out) in tensors.items():  # a rooted op from or to rank 0, as the one-process sweep runs it
        yield "torch_nccl", op, partial(_torch_call, COLLECTIVES[op], out, inp), None
    for op, (inp, _) in tensors.items():
        if op in pdist.OPS:
            call = partial(pdist.run, op, inp)
            yield "pkit_dist", op, call, _matches_nccl(COLLECTIVES[op], call(), inp)
    if group_name is not None:
        import torch.distributed._symmetric_memory as symm_mem

        buf = symm_mem.empty(count, dtype=dtype, device=dev)
        symm_mem.rendezvous(buf, group_name)
        buf.copy_(torch.randn(count, device=dev))
        yield ("torch_symm_one_shot", "all_reduce",
               lambda: torch.ops.symm_mem.one_shot_all_reduce(buf, "sum", group_name), None)
        yield ("torch_symm_two_shot", "all_reduce",
               lambda: torch.ops.symm_mem.two_shot_all_reduce_(buf, "sum", group_name), None)


def _matches_nccl(entry: CollectiveOp, got, inp) -> bool:
    """Whether pkit.dist's output `got` of `entry` on `inp` matches NCCL's on every rank: moves exactly, sums within
    the dtype's tolerance (`pkit.tolerance`; NCCL may add in another order)."""
    import torch
    import torch.distributed as dist

    want = torch.empty_like(got)
    if entry.torch_in_place:
        inp = want.copy_(inp)
    _torch_call(entry, want, inp)
    atol, rtol = tolerance(got.dtype)
    ok = torch.tensor([float(torch.allclose(got, want, rtol=rtol, atol=atol) if entry.reduces
                             else torch.equal(got, want))],
                      device=got.device)
    dist.all_reduce(ok, op=dist.ReduceOp.MIN)
    return bool(ok.item())


def main(argv=None) -> None:
    import pandas as pd
    import torch
    import torch.distributed as dist

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True)
    parser.add_argument("--sizes", type=int, nargs="+", required=True, help="total bytes S per collective")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--calls-per-sample", type=int, default=1, help="back-to-back calls timed per sample")
    parser.add_argument("--graph", action="store_true", help="time CUDA-graph replays of the calls of a sample")
    parser.add_argument("--ops", nargs="+", default=list(TORCH_OPS), choices=TORCH_OPS)
    parser.add_argument("--symm-max-bytes", type=int, default=64 << 20, help="largest size for symmetric memory")
    parser.add_argument("--symm-min-bytes", type=int, default=SYMM_MIN_BYTES, help="smallest size for symmetric memory")
    args = parser.parse_args(argv)
    rank, world = init_one_gpu_per_rank()
    dtype = getattr(torch, args.dtype)
    group_name = dist.group.WORLD.group_name
    rows = []
    for nbytes in args.sizes:
        symm = group_name if args.symm_min_bytes <= nbytes <= args.symm_max_bytes else None
        for impl, op, fn, verified in _cases(nbytes, dtype, world, rank, symm):
            if op not in args.ops:
                continue
            samples = torch.tensor(time_samples(fn, args.reps, args.warmup, args.calls_per_sample, args.graph),
                                   device="cuda")
            dist.all_reduce(samples, op=dist.ReduceOp.MAX)  # each repetition's slowest rank
            rows.append({"implementation": impl, "op": op, "dtype": args.dtype, "bytes": nbytes,
                         "calls_per_sample": args.calls_per_sample, "timing": "graph" if args.graph else "launches",
                         **BenchResult(samples.cpu().numpy()).times_us(), "verified": verified})
    if rank == 0:
        pd.DataFrame(rows).to_csv(args.out, index=False)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
