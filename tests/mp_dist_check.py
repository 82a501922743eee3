"""Run under torchrun (or `check` in ranks given torchrun's environment): pkit.dist's collectives on torch tensors,
every op, dtype and mechanism, checked on every rank.

One process per GPU with NCCL where there are enough GPUs; otherwise every rank shares GPU 0 with gloo for the host
side (the GPU time-slices the processes' kernels: correct, but slow and meaningless to time). CPU tensors run the
torch.distributed fallback. Each case draws fresh inputs from a seed all ranks share, so every rank can compute
every rank's expected output on the CPU from the collective registry's NumPy reference. Reductions must match the
float32 sum in rank order bit for bit (what the kernels compute), so every rank holds identical bits. On CPU tensors
the collectives experiment's check against torch.distributed (pkit.experiments.collectives.pytorch) runs too.
"""
import os
import sys

import torch
import torch.distributed as dist

from pkit import dist as pdist
from pkit.experiments.collectives.pytorch import _matches_nccl
from pkit.ops.collective_ops import collective


def inputs(seed: int, rank: int, shape, dtype) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g).to(dtype)
    return torch.randint(-2**31, 2**31 - 1, shape, generator=g, dtype=torch.int64).to(dtype)


def expected(op: str, xs: list, rank: int) -> torch.Tensor:
    """Rank `rank`'s output of `op` from every rank's input `xs`: the registry's reference, over float32 for a
    reduction (its sum in rank order, rounded once to the dtype: the kernels' order), over the bits for a move."""
    entry, dtype = collective(op), xs[0].dtype
    if entry.reduces:
        return torch.from_numpy(entry.reference([x.float().numpy() for x in xs], rank)).to(dtype)
    bits = torch.int16 if dtype == torch.bfloat16 else dtype  # NumPy has no bfloat16
    return torch.from_numpy(entry.reference([x.view(bits).numpy() for x in xs], rank)).view(dtype)


LARGE_ROWS = {"cuda": 2**19, "cpu": 2**13}
"""A rank's share of the largest case, in rows of 3: past the LL sizes into the staged kernels on GPUs; on CPU tensors,
whose torch.distributed fallback has no sizes of its own, a smaller share does (its checks are element by element)."""


def cases(size: int, where: str = "cuda"):
    """(op, dtype, shape of one rank's input, non-contiguous?): LL sizes, staged sizes, shares needing padding."""
    for op in pdist.OPS:
        moves = (torch.bfloat16, torch.int32, torch.uint8)
        dtypes = (torch.float32, torch.bfloat16) if collective(op).reduces else moves
        for dtype in dtypes:
            for rows in (size * 3, size * 4096, size * LARGE_ROWS[where] + size * 3):  # tiny, LL, staged (and odd)
                yield op, dtype, (rows, 3), False
        yield op, dtypes[0], (size * 64, 10), True


def poison_allocator(device) -> None:
    """Fill memory the caching allocator will hand out next with NaN bits, so an output left unwritten shows."""
    if device.type == "cuda":
        block = torch.full((64 << 20,), float("nan"), device=device)
        del block


def refusals(device, size: int) -> list[str]:
    """Bad arguments get one clear error naming the argument."""
    bad = []
    for call, error, words in ((lambda: pdist.all_reduce(torch.ones(16, dtype=torch.int32, device=device)),
                                ValueError, "x: pkit.dist reductions sum"),
                               (lambda: pdist.reduce_scatter(torch.ones(size * 8 + 1, device=device)),
                                ValueError, "x: expected dimension 0 to split"),
                               (lambda: pdist.all_gather([1.0, 2.0]), TypeError, "x: expected a torch.Tensor"),
                               (lambda: pdist.run("no-such-op", torch.ones(16, device=device)), ValueError,
                                f"op: expected one of {list(pdist.OPS)}")):
        try:
            call()
            bad.append(f"no {error.__name__} for {words!r}")
        except error as e:
            if words not in str(e):
                bad.append(f"{error.__name__} says {e}, expected {words!r}")
    return bad


def graph_replays(device, rank: int, size: int) -> list[str]:
    """Three calls captured in one CUDA graph (an odd count: consecutive replays' first calls must still take
    different staging halves), replayed on fresh inputs; every call's output checked after every replay."""
    bad = []
    for op, rows in (("all_reduce", size * 2**19), ("all_gather", size * 2**19), ("all_reduce", size * 64)):
        x = torch.zeros((rows, 3), device=device, dtype=torch.bfloat16)
        call = getattr(pdist, op)
        call(x)  # warm-up: the team, the staging and the flags exist before capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            ys = [call(x) for _ in range(3)]
        for replay in range(3):
            xs = [inputs(10_000 + replay, r, (rows, 3), torch.bfloat16) for r in range(size)]
            x.copy_(xs[rank])
            graph.replay()
            torch.cuda.synchronize()
            want = expected(op, xs, rank)
            bad += [f"graph {op} {rows} rows: replay {replay}, call {k} on rank {rank} differs"
                    for k, y in enumerate(ys) if not torch.equal(y.cpu(), want)]
    return bad


def experiment_checks(rank: int, size: int) -> list[str]:
    """The collectives experiment's verification of pkit.dist against torch.distributed (`_matches_nccl`), here on
    CPU tensors: every op passes on its own output and fails on one with an element changed."""
    bad = []
    for seed, op in enumerate(pdist.OPS, start=20_000):
        entry = collective(op)
        x = inputs(seed, rank, (size * 16, 3), torch.float32)
        got = pdist.run(op, x)
        wrong = got.clone()
        wrong.view(-1)[0] += 1.0
        if not _matches_nccl(entry, got, x) or _matches_nccl(entry, wrong, x):
            bad.append(f"experiment check of {op} on rank {rank}: passed a wrong output or failed a right one")
    return bad


def check(where: str) -> list[str]:
    """This rank's report: a 'FAIL ...' line per failure, else one 'DIST OK ...' line. The rank and its process
    group come from the environment torchrun sets (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)."""
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if where == "cuda":
        gpus = torch.cuda.device_count()
        device = torch.device("cuda", rank % gpus)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl" if gpus >= size else "gloo")
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    queued = []
    for seed, (op, dtype, shape, strided) in enumerate(cases(size, where)):
        xs = [inputs(seed, r, shape, dtype) for r in range(size)]
        x = xs[rank].to(device)
        if strided:
            x = x.t().contiguous().t()  # same values, column-major: not contiguous
            assert not x.is_contiguous()
        before = x.clone()
        poison_allocator(device)
        y = getattr(pdist, op)(x)
        queued.append((op, dtype, shape, x, before, y, expected(op, xs, rank)))
    bad = []
    for op, dtype, shape, x, before, y, want in queued:  # checked after every call was queued back to back
        got = y.cpu()
        label = f"{op} {dtype} {shape} on rank {rank}"
        if got.shape != want.shape or got.dtype != want.dtype:
            bad.append(f"{label}: got {got.dtype}{tuple(got.shape)}, expected {want.dtype}{tuple(want.shape)}")
        elif not torch.equal(got, want):
            wrong = (got != want).nonzero()
            bad.append(f"{label}: {len(wrong)} elements differ, first at {wrong[0].tolist()}")
        if not torch.equal(x, before):
            bad.append(f"{label}: the input changed")
    bad += refusals(device, size)
    if device.type == "cuda":
        bad += graph_replays(device, rank, size)
    else:
        bad += experiment_checks(rank, size)
    dist.destroy_process_group()
    return [f"FAIL {message}" for message in bad] or [f"DIST OK {rank} {len(queued)} cases"]


def main() -> None:
    for line in check(sys.argv[1] if len(sys.argv) > 1 else "cuda"):
        print(line, flush=True)


if __name__ == "__main__":
    main()
