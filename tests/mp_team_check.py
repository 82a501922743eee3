"""Run under torchrun (2 to 8 processes): peer push/pull, barrier and collectives checks with one process per rank
(one GPU each where there are enough, else sharing GPUs)."""
import os

import cupy as cp
import numpy as np
import torch
import torch.distributed as dist

import pkit
from pkit.errors import PkitError
from pkit.ops.collectives import Collectives

CHECKS = os.path.join(os.path.dirname(__file__), "cuda", "team_checks.cu")


def main() -> None:
    rank, size, gpus = int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"]), torch.cuda.device_count()
    torch.cuda.set_device(rank % gpus)
    if gpus >= size:
        dist.init_process_group("nccl", device_id=torch.device("cuda", rank))
    else:  # ranks share GPUs (the GPU time-slices their kernels): gloo for the host side
        dist.init_process_group("gloo")
    team = pkit.Team.from_torch_distributed()
    n = (1 << 20) + 7
    src, dst = team.empty((n,), "uint32"), team.empty((n,), "uint32")
    # every rank can rebuild every rank's data from the shared seed
    seed = torch.randint(0, 2**31 - 1, (1,), device="cuda" if gpus >= size else "cpu")  # where the backend moves it
    dist.broadcast(seed, 0)
    data = [np.random.default_rng([int(seed), r]).integers(0, 2**32 - 1, n, dtype=np.uint32)
            for r in range(team.size)]
    sender = (team.rank - 1) % team.size
    push, pull = pkit.compile(CHECKS, "push_to_next"), pkit.compile(CHECKS, "pull_from_prev")
    for op, kernel in (("push", push), ("pull", pull)):
        src.local.set(data[team.rank])
        dst.fill(np.uint32(0xDEADBEEF))
        team.synchronize()
        if op == "push":
            args = (src.local, dst.table(team.rank), np.int32(team.rank), np.int32(team.size), np.uint64(n))
        else:
            args = (dst.local, src.table(team.rank), np.int32(team.rank), np.int32(team.size), np.uint64(n))
        kernel((64,), (256,), args)
        team.synchronize()
        np.testing.assert_array_equal(cp.asnumpy(dst.local), data[sender], err_msg=f"{op} on rank {team.rank}")
    mailbox, errors = team.zeros((2, team.size), "uint32"), team.empty((2,), "uint32")
    barrier = pkit.compile(CHECKS, "barrier_rounds")
    barrier((2,), (32,), (mailbox.table(team.rank), team.barrier_flags.table(team.rank), np.int32(team.rank),
                          np.int32(team.size), np.int32(2000), errors.local))
    team.synchronize()
    assert cp.asnumpy(errors.local).tolist() == [0, 0]
    check_collectives(team, int(seed))
    print("MP-TEAM OK", team.rank, flush=True)
    dist.destroy_process_group()


def check_collectives(team, seed: int) -> None:
    """All-reduce (sm, ll), reduce-scatter (sm, ll) and all-gather (ll) of fresh float32 data against float64,
    several calls queued back to back; the copy engine path refuses one process per GPU with a clear error."""
    coll, count = Collectives(team), team.size << 15  # shares of 32768 floats: the LL limit holds up to 8 ranks
    calls = []
    for k, (op, mechanism) in enumerate([("all_reduce", "sm"), ("all_reduce", "ll"), ("reduce_scatter", "ll"),
                                         ("all_reduce", "ll"), ("reduce_scatter", "sm"), ("all_gather", "ll")]):
        share = count // team.size
        length = share if op == "all_gather" else count
        x = [np.random.default_rng([seed, r, k]).standard_normal(length).astype(np.float32) for r in range(team.size)]
        inp = team.empty((length,), "float32")
        inp.local.set(x[team.rank])
        out = team.empty((share if op == "reduce_scatter" else count,), "float32").fill(np.float32(np.nan))
        total = np.sum(np.array(x, dtype=np.float64), axis=0)
        want = {"all_reduce": total, "reduce_scatter": total[team.rank * share:][:share],
                "all_gather": np.concatenate(x).astype(np.float64)}[op]
        calls.append((op, mechanism, inp, out, want))
    team.synchronize()
    for op, mechanism, inp, out, _ in calls:
        getattr(coll, op)(out, inp, mechanism=mechanism)
    team.synchronize()
    for op, mechanism, _, out, want in calls:
        np.testing.assert_allclose(cp.asnumpy(out.local), want, atol=1e-5 * np.abs(want).max(),
                                   err_msg=f"{op}/{mechanism} on rank {team.rank}")
    try:
        coll.all_reduce(calls[0][3], calls[0][2], mechanism="ce")
    except PkitError as e:
        assert "one process driving every GPU" in str(e)
    else:
        raise AssertionError("the copy engine path accepted one process per GPU")


if __name__ == "__main__":
    main()
