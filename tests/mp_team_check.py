"""Run under torchrun (2 processes): the peer push/pull and barrier checks with one process per GPU."""
import os

import cupy as cp
import numpy as np
import torch
import torch.distributed as dist

import pkit

CHECKS = os.path.join(os.path.dirname(__file__), "cuda", "team_checks.cu")


def main() -> None:
    rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", rank))
    team = pkit.Team.from_torch_distributed()
    n = (1 << 20) + 7
    src, dst = team.empty((n,), "uint32"), team.empty((n,), "uint32")
    # every rank can rebuild every rank's data from the shared seed
    seed = torch.randint(0, 2**31 - 1, (1,), device="cuda")
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
    print("MP-TEAM OK", team.rank, flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
