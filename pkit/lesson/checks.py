"""The lesson's checks, `check_<step>(source, team=None)`: compile the learner's kernels, run them on a team
(`pkit.lesson.runners`), and return a `Verdict`.

The default team is every GPU of the machine where there are two or more; on a machine with one GPU two ranks share
it (`Team([0, 0], share_gpus=True)`, each rank on its own stream). Without a GPU a check compiles the source for
`OFFLINE_ARCH` and reports that it did not run (`Verdict.ok is None`). A source that does not compile, a kernel
missing, a wait that timed out or a kernel that crashed the GPU each come back as a wrong verdict saying so.

Example:
    >>> check_copy('extern "C" __global__ void push_next(int* x) { x[0] = nope; }').ok
    False
    >>> from pkit import lesson
    >>> check_copy(lesson.solution("copy"))                            # doctest: +SKIP
    ✓ all 2 ranks hold the expected 24676 elements
"""
from __future__ import annotations

from functools import lru_cache
from typing import Callable

import numpy as np

from ..compiler import compile
from ..errors import CompileError, PeerTimeout
from . import runners
from .verdict import Verdict

OFFLINE_ARCH = "sm_90a"  # what a check compiles for where there is no GPU to run on (Hopper, as on the H200s)


def check_addressing(source: str, team=None) -> Verdict:
    """Step 1, unified addressing. `source` defines `gather_pull(const u64* table, float* out, u64 n, int size)`,
    launched on every rank (8 blocks of 256 threads, n = 5000). It must write out[q·n + i] = element i of rank
    q's buffer, reading it through its address table[q]."""
    return _check(source, ("gather_pull",), team, runners.run_addressing)


def check_copy(source: str, team=None) -> Verdict:
    """Step 2, a peer copy. `source` defines `push_next(const u64* table, const float* src, u64 n, int rank,
    int size)`, launched on every rank with 32 blocks of 256 threads for n = 24676 floats (more than one per
    thread). It must copy src into the next rank's buffer, table[(rank + 1) % size]."""
    return _check(source, ("push_next",), team, runners.run_copy)


def check_flag(source: str, team=None, rounds: int = 1000) -> Verdict:
    """Step 3, a flag that publishes data. `source` defines `produce(u32* data, u32* flag, const u32* ack, u64 n,
    u32 rounds)` (one block on rank 0) and `consume(const u32* data, const u32* flag, u32* ack, u32* seen, u64 n,
    u32 rounds)` (one block on rank 1), as in pkit/kernels/lesson_flag.cu, for `rounds` rounds of 4096 words. The
    verdict says in how many rounds the reader saw stale data (details: stale_fraction)."""
    if not (isinstance(rounds, (int, np.integer)) and 1 <= rounds <= 100_000):
        raise ValueError(f"rounds: expected an integer in [1, 100000], got {rounds!r}")
    return _check(source, ("produce", "consume"), team, lambda t, p, c: runners.run_flag(t, p, c, int(rounds)))


def check_barrier(source: str, team=None, trials: int = 20) -> Verdict:
    """Step 4, a barrier. `source` defines `exchange(const u64* box, const u64* flags, const float* in, float* out,
    u64 n, u32 epoch, int rank, int size)`, one block of 256 threads per rank, n = 65536, a new epoch per trial. It
    must push `in` into slot `rank` of every rank's box, meet the others at a barrier, then copy its own box to
    `out`; every slot must hold its rank's data, in each of `trials` trials. Trial t holds rank t mod size back
    by LATE_START_NS, so a missing wait shows whatever the GPUs' own timing (on one shared GPU the ranks would
    otherwise run in step and hide it)."""
    _check_count("trials", trials)
    return _check(source, ("exchange",), team, lambda t, k: runners.run_barrier(t, k, int(trials)))


def check_ring(source: str, team=None, trials: int = 3) -> Verdict:
    """Step 5, a ring all-reduce. `source` defines `ring_step(const u64* inp, const u64* out, const u64* flags,
    u64 chunk, int step, int rank, int size)`, launched for steps 0 .. 2·size − 3 back to back, one block of 256
    threads per rank, chunk = 5000 floats. Each rank's out must end as the sum of every rank's inp (integer-valued
    floats, so sums are exact), in each of `trials` trials."""
    _check_count("trials", trials)
    return _check(source, ("ring_step",), team, lambda t, k: runners.run_ring(t, k, int(trials)))


def check_overlap(source: str, team=None, trials: int = 5) -> Verdict:
    """Step 6, compute on chunks as they land. `source` defines `consume_chunks(const float* rows, const u32* ready,
    float* out, u64 chunk, u32 epoch)`, launched with one block per chunk (16 chunks of 65536 floats) while
    lesson_overlap.cu's `send_chunks` pushes the previous rank's rows into `rows` on a side stream, releasing
    ready[k] = epoch after chunk k. out must be 2 · rows, in each of `trials` trials."""
    _check_count("trials", trials)
    return _check(source, ("consume_chunks",), team, lambda t, k: runners.run_overlap(t, k, int(trials)))


def _check_count(name: str, value) -> None:
    if not (isinstance(value, (int, np.integer)) and 1 <= value <= 1000):
        raise ValueError(f"{name}: expected an integer in [1, 1000], got {value!r}")


def _check(source: str, names: tuple, team, run: Callable) -> Verdict:
    """Compile `names` from `source`; run them with `run(team, *kernels)` when there is a team to run on."""
    if not isinstance(source, str) or not source.strip():
        raise ValueError(f"source: expected the kernel's CUDA source as a string, got {type(source).__name__}")
    if team is not None and (team.rank is not None or team.size < 2):
        raise ValueError(f"team: expected a one-process pkit.Team of at least 2 ranks, got {team!r}")
    live = team is not None or _gpu_count() >= 1
    try:
        kernels = [compile(source, name, arch=None if live else OFFLINE_ARCH) for name in names]
    except CompileError as e:
        return Verdict(False, f"the source does not compile: {e}", {"compiled": False})
    except ValueError as e:  # a kernel the check launches is missing
        return Verdict(False, f"{e} (the check launches {', '.join(names)})", {"compiled": False})
    if not live:
        return Verdict(None, f"compiled {', '.join(names)} for {OFFLINE_ARCH}; not run: this machine has no GPU (with "
                             "one, two ranks share it; with two or more, each GPU is a rank)", {"compiled": True})
    import cupy as cp

    team = team or _default_team()
    try:
        for kernel in kernels:  # load before any launch: loading a module waits for the GPU's running kernels, and
            for device in set(team.devices):  # with ranks sharing a GPU those wait for the kernel being loaded
                kernel.on(device)
        return run(team, *kernels)
    except PeerTimeout as e:
        return Verdict(False, f"{e}\nA wait never saw its flag: does every rank signal each flag another rank waits "
                              "for, with the value it waits for?", {"timeout": True})
    except (cp.cuda.runtime.CUDARuntimeError, cp.cuda.driver.CUDADriverError) as e:
        return Verdict(False, f"the kernel failed on the GPU ({e}): an access out of bounds? The CUDA context of this "
                              "process is now unusable: restart it (or the notebook kernel)", {"crashed": True})


def _gpu_count() -> int:
    from ..gpus import devices

    return len(devices())


@lru_cache(maxsize=1)
def _default_team():
    """Every GPU of the machine, one rank each, where there are two or more; else two ranks sharing GPU 0 (the
    lesson's kernels are small enough)."""
    from ..team import default_team

    return default_team(shared_ranks=2)

