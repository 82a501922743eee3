"""Run under torchrun: every `problems/*/solutions/pkit_*.py` on this rank's GPU against its problem's reference run
on the CPU (gloo), on fresh inputs, in every dtype the problem declares, at each size named on the command line.

With fewer GPUs than ranks the ranks share GPU 0 and the host side of torch.distributed is gloo, so pkit solutions
(whose communication is pkit.dist) can be checked for correctness on a one-GPU machine. `pkit eval` is the real
judge (NCCL references, timing, hostile-candidate checks); this is the developer's quick check of GPU code paths.
Usage: torchrun --nproc_per_node=2 tests/mp_solutions_check.py tiny [small ...]
"""
import os
import random
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from pkit.harness.checks import compare
from pkit.harness.problem import load_module

ROOT = Path(__file__).resolve().parent.parent / "problems"


def to(value, device):
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (list, tuple)):
        return type(value)(to(v, device) for v in value)
    return value


def main() -> None:
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    gpus = torch.cuda.device_count()
    device = torch.device("cuda", rank % gpus)
    torch.cuda.set_device(device)
    dist.init_process_group("gloo")  # host side only: solutions communicate through pkit.dist
    sizes = sys.argv[1:] or ["tiny"]
    seed = random.Random(int.from_bytes(os.urandom(4), "little")).randrange(2**31)
    seed_t = torch.tensor([seed])
    dist.broadcast(seed_t, 0)
    failures = checked = 0
    for solution in sorted(ROOT.glob("*/solutions/pkit_*.py")):
        problem = load_module(solution.parent.parent / "problem.py", f"problem_{solution.parent.parent.name}")
        if size not in problem.META["world_sizes"]:
            continue
        candidate = load_module(solution, f"solution_{solution.stem}")
        for size_name in (s for s in sizes if s in problem.SIZES):
            for dtype in problem.META["dtypes"]:
                inputs = problem.make_inputs(rank, size, size_name, dtype, int(seed_t))
                try:
                    want = problem.reference(*inputs)
                except RuntimeError as e:  # e.g. gloo lacks list all_to_all in some torch versions
                    if "does not support" not in str(e):
                        raise
                    print(f"SKIP {solution.relative_to(ROOT)}: its reference cannot run on gloo here ({e})", flush=True)
                    break
                got = candidate.solution(*to(inputs, device))
                torch.cuda.synchronize()
                check = compare(want, to(got, "cpu"))  # each output at its dtype's tolerance
                checked += 1
                label = f"{solution.relative_to(ROOT)} {size_name} {dtype} rank {rank}"
                if check.ok:
                    print(f"OK {label} max_abs_err={check.max_abs_err}", flush=True)
                else:
                    failures += 1
                    print(f"FAIL {label}: {check.note} {check.flags} first bad {check.first_bad_index}", flush=True)
    print(f"SOLUTIONS {'OK' if not failures and checked else 'FAILED'} {rank}: {checked} checked", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
