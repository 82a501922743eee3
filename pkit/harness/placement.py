"""Where a timing window runs, drawn anew for every window: the GPU memory its input sets land in, the core its
calls are launched from.

On an H200 a memory-bound op's time moved by a few percent with where its inputs were allocated (row sums over 384
MiB, from one allocation to the next within one process). Freed and allocated again in the same sizes, the sets
would land where they were, so each role process would keep its own placement for a whole evaluation and the ratio
between the two processes would carry that placement's few percent, which rounds of one evaluation cannot see. A gap
of random size held while a window's sets are built moves them, so each window draws a placement and the rounds'
spread carries it. The host's share of a call (launch and synchronize) also differed by a few percent from one core
of that machine to another, the same cores mostly faster whichever process ran there, so each window's calls are
launched from a core drawn at random among those the process may use.

On the CPU the same holds for host memory, through glibc's allocator: its mmap threshold rises to the size of the
largest block freed (up to 32 MiB), so from its second window on a process builds its sets in heap pages it has
held since, while the other role's process, started later, has held them less long. The reference's process lives
through all of a problem's candidates and each candidate's is new: in diagnostic runs of the calibration script on
2 vCPUs identical code read a few percent slower than itself, its interval missing 1.0 far more often than 1 in 20.
`own_pages_per_set` fixes the threshold, so every set gets pages of its own, placed anew each window in both
processes alike; results/cpu/harness_calibration was recorded with it.
"""
from __future__ import annotations

import ctypes
import os
import random
from collections.abc import Callable, Sequence
from typing import TypeVar

import torch

GAP_STEP_BYTES = 2 << 20  # the granularity of CUDA's large allocations
GAP_MAX_BYTES = 1 << 30
GAP_FREE_SHARE = 0.05  # never more than this share of the device's free memory
T = TypeVar("T")
M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter (malloc.h)
MMAP_THRESHOLD_BYTES = 128 << 10  # glibc's initial threshold, kept: blocks this large or larger are mapped anew


def gap_bytes(free_bytes: int, rng: random.Random) -> int:
    """A random gap in GAP_STEP_BYTES steps, at most GAP_MAX_BYTES and GAP_FREE_SHARE of `free_bytes`.

    >>> gap_bytes(0, random.Random(0))
    0
    >>> 0 <= gap_bytes(80 << 30, random.Random(1)) <= 1 << 30
    True
    """
    steps = int(min(GAP_MAX_BYTES, GAP_FREE_SHARE * free_bytes)) // GAP_STEP_BYTES
    return rng.randint(0, steps) * GAP_STEP_BYTES


def hold_gap(device: torch.device, rng: random.Random | None = None):
    """A tensor of random size on `device` (None on the CPU): keep it while allocating the sets, then drop it."""
    if device.type != "cuda":
        return None
    free, _ = torch.cuda.mem_get_info(device)
    size = gap_bytes(free, rng or random.SystemRandom())
    return torch.empty(size, dtype=torch.uint8, device=device) if size else None


def move_to_random_core(allowed: Sequence[int], rng: random.Random | None = None) -> int:
    """Pin the calling thread to one core drawn from `allowed` (the process's cores at start) and return it.

    >>> before = os.sched_getaffinity(0)
    >>> core = move_to_random_core(sorted(before))
    >>> os.sched_getaffinity(0) == {core}
    True
    >>> os.sched_setaffinity(0, before)
    """
    if not allowed:
        raise ValueError("allowed: expected at least one core")
    core = (rng or random.SystemRandom()).choice(list(allowed))
    os.sched_setaffinity(0, {core})
    return core


def placed(build: Callable[[], T], device: torch.device, cores: Sequence[int]) -> T:
    """What `build()` makes, placed anew for one window: on a GPU the calling thread moves to a core drawn from
    `cores` (`move_to_random_core`) and `build` allocates behind a gap of random size (`hold_gap`), held until the
    device has finished building.

    >>> placed(lambda: [1, 2], torch.device("cpu"), [0])
    [1, 2]
    """
    if device.type == "cuda":
        move_to_random_core(cores)
    gap = hold_gap(device)
    made = build()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    del gap
    return made


def own_pages_per_set() -> bool:
    """Fix glibc's mmap threshold at MMAP_THRESHOLD_BYTES (setting it turns its rise off) and hand the heap's free
    pages back (malloc_trim), so every large host allocation, a timed input set among them, is mapped anew rather
    than carved from heap pages the process already holds (tests/test_placement.py shows the difference). False
    where the C library has no mallopt (not glibc) or refuses."""
    try:
        libc = ctypes.CDLL(None)
        mallopt, trim = libc.mallopt, libc.malloc_trim
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype, trim.argtypes = [ctypes.c_int, ctypes.c_int], ctypes.c_int, [ctypes.c_size_t]
    fixed = mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1
    trim(0)
    return fixed
