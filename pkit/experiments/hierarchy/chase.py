"""Latency of each memory level by pointer chasing (kernels in pkit/kernels/pointer_chase.cu).

A chain visits every slot of a working set once, in random order, one slot per `stride` bytes (a cache
line), and then returns to slot 0: one cycle, so prefetchers and coalescing cannot help and each load
waits for the one before. One thread follows it; the kernel times the hops with the SM clock (cycles)
and the global timer (ns) and reports where it stopped, which the Python side checks against the chain.

Example:
    >>> from pkit.experiments.hierarchy.chase import cyclic_order, next_slots
    >>> order = cyclic_order(5, seed=1)
    >>> int(order[0]), sorted(order.tolist())
    (0, [0, 1, 2, 3, 4])
    >>> nxt = next_slots(order); [int(nxt[order[i]]) == int(order[(i + 1) % 5]) for i in range(5)]
    [True, True, True, True, True]
"""
from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

import numpy as np
import pandas as pd

from ...ops.transfers import check_gpus, gpu_count, next_gpu
from .memory import HBM, HOST, L1, L2, PEER, SHARED, pinned

STRIDE = 128  # bytes between links: one cache line, so every hop touches a new line
KiB, MiB = 1 << 10, 1 << 20
PROFILE_HOPS = 4096  # per-hop samples for the near/far L2 split
_LOADS = {"chase_shared": "ld.shared", "chase_l1": "ld.global.ca", "chase_l2": "ld.global.cg"}


def cyclic_order(n_slots: int, seed: int = 0) -> np.ndarray:
    """Slots in the order the chase visits them: 0 first, then 1..n_slots-1 shuffled (int64)."""
    if not isinstance(n_slots, (int, np.integer)) or n_slots < 2:
        raise ValueError(f"n_slots: expected at least 2 slots, got {n_slots!r}")
    rest = np.random.default_rng(seed).permutation(np.arange(1, int(n_slots), dtype=np.int64))
    return np.concatenate([np.zeros(1, dtype=np.int64), rest])


def next_slots(order: np.ndarray) -> np.ndarray:
    """The link table of the cycle `order`: entry s is the slot visited after slot s."""
    order = np.asarray(order)
    nxt = np.empty_like(order)
    nxt[order] = np.roll(order, -1)
    return nxt


def write_chain(xp, words, base: int, n_slots: int, stride: int = STRIDE, seed: int = 0) -> np.ndarray:
    """Write a one-cycle chain of absolute addresses into `words` (a NumPy or CuPy uint64 array).

    `base` is the address of `words` as the chasing GPU sees it (UVA: the same for local, peer and mapped
    host memory). Slot s is the word at byte s·stride; it holds base + next·stride. Returns the visit order.
    """
    order = cyclic_order(n_slots, seed)
    links = np.uint64(base) + next_slots(order).astype(np.uint64) * np.uint64(stride)
    words[xp.arange(n_slots) * (stride // 8)] = xp.asarray(links)
    return order


def near_far(profile_cycles, cycles_per_hop: float, min_share: float = 0.1, min_separation: float = 0.85):
    """Split per-hop L2 latencies into near and far partitions, or None when they are not two groups.

    Otsu's split of the sorted samples; the groups count as distinct when the split explains at least
    `min_separation` of the variance (a uniform spread explains 0.75) and each holds `min_share` of the
    samples. Per-hop samples carry a fixed timing overhead; it is removed by matching their mean to
    `cycles_per_hop`, the chase's overhead-free average. Returns (near, far) median cycles.
    """
    x = np.sort(np.asarray(profile_cycles, dtype=np.float64))
    if x.ndim != 1 or x.size < 20:
        raise ValueError(f"profile_cycles: expected at least 20 per-hop samples, got shape {x.shape}")
    if not cycles_per_hop > 0:
        raise ValueError(f"cycles_per_hop: expected a positive average, got {cycles_per_hop!r}")
    n, total = x.size, x.var()
    if total == 0:
        return None
    k = np.arange(1, n)
    below = np.cumsum(x)[:-1]
    between = (k / n) * (1 - k / n) * ((x.sum() - below) / (n - k) - below / k) ** 2
    between[(k < min_share * n) | (n - k < min_share * n)] = -1.0
    split = int(np.argmax(between))
    if between[split] / total < min_separation:
        return None
    overhead = x.mean() - cycles_per_hop
    return float(np.median(x[:k[split]]) - overhead), float(np.median(x[k[split]:]) - overhead)


@dataclass(frozen=True)
class ChasePlan:
    """One rung of the latency ladder: which kernel chases where, over how much memory, how many hops."""

    level: str
    kernel: str  # chase_shared, chase_l1 (ld.global.ca) or chase_l2 (ld.global.cg)
    memory: str  # shared, device, peer or host
    working_set_bytes: int
    hops: int
    warm_hops: int | None  # None: one full lap of the cycle before timing


LADDER = (
    ChasePlan(SHARED, "chase_shared", "shared", 16 * KiB, 65536, None),
    ChasePlan(L1, "chase_l1", "device", 16 * KiB, 65536, None),
    ChasePlan(L2, "chase_l2", "device", 8 * MiB, 16384, None),
    ChasePlan(HBM, "chase_l2", "device", 256 * MiB, 4096, 1024),
    ChasePlan(PEER, "chase_l2", "peer", 256 * MiB, 2048, 1024),
    ChasePlan(HOST, "chase_l2", "host", 256 * MiB, 2048, 1024),
)


def _check_common(device: int | None, reps: int, stride: int) -> None:
    if device is not None and (not isinstance(device, (int, np.integer)) or device < 0):
        raise ValueError(f"device: expected a GPU id >= 0, got {device!r}")
    if not isinstance(reps, (int, np.integer)) or reps < 1:
        raise ValueError(f"reps: expected at least 1 repetition, got {reps!r}")
    if not isinstance(stride, (int, np.integer)) or stride < 8 or stride % 8:
        raise ValueError(f"stride: expected a multiple of 8 bytes (one 64-bit link), got {stride!r}")


def check_peer(device: int | None, peer: int | None) -> None:
    """Raise unless `peer` is None or a GPU id other than `device` (before asking the machine)."""
    if peer is not None and (not isinstance(peer, (int, np.integer)) or peer < 0 or peer == (device or 0)):
        raise ValueError(f"peer: expected a GPU id other than device={device or 0} (or None: the next GPU), "
                         f"got {peer!r}")


def device_and_peer(device: int | None = None, peer: int | None = None, n_gpus: int | None = None):
    """GPU `device` (default 0) and its peer: `peer`, or the next GPU when the machine has one, else None (the
    hierarchy then has no peer rung), both checked against the machine (`n_gpus`, default this one's).

    Example:
        >>> device_and_peer(n_gpus=2), device_and_peer(n_gpus=1), device_and_peer(1, n_gpus=4)
        ((0, 1), (0, None), (1, 2))
        >>> device_and_peer(0, 1, n_gpus=1)
        Traceback (most recent call last):
        ...
        ValueError: peer: expected None on a machine with one GPU (the hierarchy then has no peer rung), got 1; this machine has 1 GPU
    """
    _check_common(device, 1, STRIDE)
    check_peer(device, peer)
    n = gpu_count() if n_gpus is None else n_gpus
    device = 0 if device is None else int(device)
    check_gpus("device", [device], n)
    if peer is None:
        return device, next_gpu(device, n)
    if n < 2:
        raise ValueError(f"peer: expected None on a machine with one GPU (the hierarchy then has no peer rung), "
                         f"got {peer}; this machine has 1 GPU")
    check_gpus("peer", [peer], n)
    return device, int(peer)


def without_peer(plans: Sequence, peer: int | None) -> list:
    """`plans` (ChasePlans or ReadPlans), less the peer rung when there is no peer GPU."""
    return [p for p in plans if peer is not None or p.memory != "peer"]


@lru_cache(maxsize=None)
def _kernel(name: str):
    import pkit

    return pkit.compile("pointer_chase.cu", name)


def _chase(kernel, device: int, launches: list[tuple[tuple, int]], hops: int, block: int,
           shared_mem: int) -> tuple[np.ndarray, np.ndarray]:
    """One launch per (args, expected end); per launch (cycles, ns) per timed hop. Checks where each stopped."""
    import cupy as cp

    from pkit.launch import synchronize

    with cp.cuda.Device(device):
        out = cp.zeros(3, dtype=cp.uint64)
    samples = []
    for args, expected_end in launches:
        kernel((1,), (block,), (*args, out), shared_mem=shared_mem, device=device)
        synchronize([device])
        cycles, ns, end = (int(v) for v in cp.asnumpy(out))
        if end != expected_end:
            raise AssertionError(f"{kernel.name} on GPU {device} stopped at {end:#x}, expected {expected_end:#x}: "
                                 "the chain is not one cycle through every slot")
        samples.append((cycles, ns))
    cycles, ns = np.array(samples, dtype=np.float64).T
    return cycles / hops, ns / hops


def _global_chain(plan: ChasePlan, device: int, peer: int | None, stride: int, seed: int, stack: ExitStack):
    """Allocate the plan's memory (kept alive by `stack`), write its chain; returns (base address, order)."""
    import cupy as cp

    n_slots = plan.working_set_bytes // stride
    if plan.memory == "host":
        address, view = stack.enter_context(pinned(plan.working_set_bytes))
        return address, write_chain(np, view.view(np.uint64), address, n_slots, stride, seed)
    owner = peer if plan.memory == "peer" else device
    with cp.cuda.Device(owner):
        words = cp.zeros(plan.working_set_bytes // 8, dtype=cp.uint64)
        stack.callback(lambda: words)  # keep the buffer alive until the rung is measured
        order = write_chain(cp, words, words.data.ptr, n_slots, stride, seed)
        cp.cuda.runtime.deviceSynchronize()  # the chain is in place before another GPU may read it
    return words.data.ptr, order


def measure_rung(plan: ChasePlan, device: int = 0, peer: int | None = None, reps: int = 5, stride: int = STRIDE,
                 seed: int = 0, profile: bool = False) -> list[dict]:
    """Chase `plan` from GPU `device` (its memory on `peer` when plan.memory is 'peer'); one row, plus
    'L2 near' and 'L2 far' rows when `profile` finds two groups of per-hop latencies.

    Row columns: level, kind (level or partition), memory, load, working_set_bytes, hops, warm_hops, reps,
    latency_ns and latency_cycles (medians over launches, per hop), cv (of latency_ns), clock_GHz.
    """
    import cupy as cp

    n_slots = plan.working_set_bytes // stride
    if n_slots < 2:
        raise ValueError(f"working_set_bytes: expected at least 2 slots of {stride} bytes, got {plan.working_set_bytes}")
    warm = n_slots if plan.warm_hops is None else plan.warm_hops
    kernel = _kernel(plan.kernel)
    with ExitStack() as stack:
        if plan.memory == "shared":
            order = cyclic_order(n_slots, seed)
            with cp.cuda.Device(device):
                table = cp.asarray(next_slots(order).astype(np.uint32))
            args = (table, np.uint32(n_slots), np.uint32(stride), np.uint64(warm), np.uint64(plan.hops))
            launches = [(args, int(order[(warm + plan.hops) % n_slots]))] * reps
            block, shared_mem = 128, plan.working_set_bytes
        else:
            base, order = _global_chain(plan, device, peer, stride, seed, stack)
            # Past the caches each launch starts where the last one stopped, so no launch re-reads lines an
            # earlier one brought into L2; cached levels restart at slot 0 after a full warm-up lap.
            step = warm + plan.hops if plan.warm_hops is not None else 0
            launches = [((np.uint64(base + int(order[i * step % n_slots]) * stride), np.uint64(warm),
                          np.uint64(plan.hops)), base + int(order[(i * step + warm + plan.hops) % n_slots]) * stride)
                        for i in range(reps)]
            block, shared_mem = 1, 0
        cycles, ns = _chase(kernel, device, launches, plan.hops, block, shared_mem)
        row = {"level": plan.level, "kind": "level", "memory": plan.memory, "load": _LOADS[plan.kernel],
               "working_set_bytes": plan.working_set_bytes, "hops": plan.hops, "warm_hops": warm, "reps": reps,
               "latency_ns": float(np.median(ns)), "latency_cycles": float(np.median(cycles)),
               "cv": float(np.std(ns) / np.mean(ns)), "clock_GHz": float(np.median(cycles / ns))}
        rows = [row]
        if profile:
            split = near_far(_profile(device, base, order, stride), row["latency_cycles"])
            for name, cycles_per_hop in zip((f"{plan.level} near", f"{plan.level} far"), split or ()):
                rows.append({**row, "level": name, "kind": "partition", "hops": PROFILE_HOPS, "reps": 1,
                             "latency_cycles": cycles_per_hop, "latency_ns": cycles_per_hop / row["clock_GHz"],
                             "cv": float("nan")})
    return rows


def _profile(device: int, base: int, order: np.ndarray, stride: int) -> np.ndarray:
    """Per-hop cycles of PROFILE_HOPS hops through L2 from slot 0 of a chain already in the caches."""
    import cupy as cp

    from pkit.launch import synchronize

    with cp.cuda.Device(device):
        cycles = cp.zeros(PROFILE_HOPS, dtype=cp.uint32)
        end = cp.zeros(1, dtype=cp.uint64)
    _kernel("chase_profile_l2")((1,), (1,), (np.uint64(base), np.uint32(PROFILE_HOPS), cycles, end), device=device)
    synchronize([device])
    expected = base + int(order[PROFILE_HOPS % len(order)]) * stride
    if int(end[0]) != expected:
        raise AssertionError(f"chase_profile_l2 stopped at {int(end[0]):#x}, expected {expected:#x}")
    return cp.asnumpy(cycles)


def latency_ladder(device: int | None = None, peer: int | None = None, reps: int = 5, stride: int = STRIDE,
                   seed: int = 0, plans: Sequence[ChasePlan] = LADDER) -> pd.DataFrame:
    """Latency of every level from GPU `device` (default 0): shared memory, L1, L2 (near/far where visible),
    HBM, `peer`'s HBM over NVLink, pinned host memory over PCIe. One row per level (see `measure_rung`).
    `peer` None: the next GPU, or no peer rung on a one-GPU machine (`device_and_peer`).

    Hops per level are in LADDER (65 536 for shared memory and L1, 16 384 for L2, 2 048-4 096 for the
    memories, whose 256 MiB chains are far larger than L2); each level is launched `reps` times.

    Example:
        >>> latency_ladder()[["level", "latency_ns", "latency_cycles"]]        # doctest: +SKIP
    """
    _check_common(device, reps, stride)
    check_peer(device, peer)
    if not plans or not all(isinstance(p, ChasePlan) for p in plans):
        raise ValueError(f"plans: expected a non-empty sequence of ChasePlan, got {plans!r}")
    import pkit

    device, peer = device_and_peer(device, peer)
    plans = without_peer(plans, peer)
    if any(p.memory == "peer" for p in plans):
        pkit.Team([device, peer])  # peer access both ways
    rows = []
    for plan in plans:
        rows += measure_rung(plan, device, peer, reps, stride, seed, profile=plan.level == L2)
    return pd.DataFrame(rows)


def working_set_sweep(sizes_bytes: Sequence[int] | None = None, device: int = 0, hops: int = 8192, reps: int = 3,
                      stride: int = STRIDE, seed: int = 0) -> pd.DataFrame:
    """Latency through L1 (ld.global.ca) of random chases over growing working sets of GPU `device`'s memory.

    Default sizes: 4 KiB to 4 GiB in powers of two, so the L1, L2 and HBM steps (and address-translation
    steps at the largest sizes) show. Working sets up to the L2 size get one full untimed lap first;
    larger ones 16 384 untimed hops. Each size: `hops` timed hops, `reps` launches. Columns as
    `measure_rung`; `level` names the working set.

    Example:
        >>> working_set_sweep([4096, 1 << 30], hops=1024)                          # doctest: +SKIP
    """
    sizes = [4 * KiB << k for k in range(21)] if sizes_bytes is None else list(sizes_bytes)
    _check_common(device, reps, stride)
    if not sizes or not all(isinstance(s, (int, np.integer)) and s >= 2 * stride and s % stride == 0 for s in sizes):
        raise ValueError(f"sizes_bytes: expected multiples of stride={stride} bytes, at least two slots each, "
                         f"got {sizes_bytes!r}")
    if not isinstance(hops, (int, np.integer)) or hops < 1:
        raise ValueError(f"hops: expected at least 1 timed hop, got {hops!r}")
    import cupy as cp

    import pkit

    l2_bytes = pkit.devices()[device].l2_bytes
    rows = []
    for size in sizes:
        warm = None if size <= l2_bytes else min(size // stride, 16384)
        plan = ChasePlan(f"{size} B", "chase_l1", "device", int(size), hops, warm)
        rows += measure_rung(plan, device, None, reps, stride, seed)
    with cp.cuda.Device(device):
        cp.get_default_memory_pool().free_all_blocks()
    return pd.DataFrame(rows)
