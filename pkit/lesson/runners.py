"""What each lesson check runs on a team of GPUs: fresh random inputs, outputs poisoned with NaN, the learner's
kernels launched on every rank (`LESSON_THREADS` threads per block), then the outputs diagnosed
(`pkit.lesson.diagnose`).

`run_<step>(team, *kernels, ...)` returns a `Verdict`; the steps that race (barrier, ring, overlap) repeat over
trials and report how many were wrong. Needs GPUs; `unique_inputs` does not.

Example:
    >>> [a.tolist() for a in unique_inputs(np.random.default_rng(0), 2, 3)]  # 1 .. 6 shuffled: each value traceable
    [[4.0, 3.0, 6.0], [5.0, 1.0, 2.0]]
    >>> import pkit
    >>> run_copy(pkit.team.default_team(), pkit.compile("lesson_copy.cu", "push_next"))   # doctest: +SKIP
    ✓ all 2 ranks hold the expected 24676 elements
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..compiler import compile
from .diagnose import UNWRITTEN_WORD, diagnose_copy, diagnose_flag, diagnose_ring
from .verdict import Verdict

LESSON_THREADS = 256  # threads per block of every lesson launch
LATE_START_NS = 1_000_000  # how long check_barrier holds one rank back per trial: far longer than its stores take


def unique_inputs(rng, size: int, n: int) -> list[np.ndarray]:
    """`size` arrays of `n` float32 values, all distinct across ranks (1 .. size·n, shuffled; exact in float32), so
    a wrong value can be traced to the element it came from."""
    values = (rng.permutation(size * n) + 1).astype(np.float32)
    return [values[q * n:(q + 1) * n] for q in range(size)]


def _put(array, host: list) -> None:
    import cupy as cp

    for r, values in enumerate(host):
        with cp.cuda.Device(array.team.devices[r]):
            array[r][:] = cp.asarray(values)


def _get(array) -> list[np.ndarray]:
    import cupy as cp

    return [cp.asnumpy(array[r]) for r in range(array.team.size)]


def _trials(trials: int, one: Callable[[int], Verdict], what: str) -> Verdict:
    """Run `one(t)` for t = 0 .. trials − 1; the first wrong verdict, with how many trials were wrong."""
    verdicts = [one(t) for t in range(trials)]
    wrong = [v for v in verdicts if not v.ok]
    if not wrong:
        return Verdict(True, f"{what} in all {trials} trials", {"trials": trials, "wrong_trials": 0})
    return Verdict(False, f"wrong in {len(wrong)} of {trials} trials; the first:\n{wrong[0].message}",
                   {**wrong[0].details, "trials": trials, "wrong_trials": len(wrong)})


def run_addressing(team, kernel, n: int = 5000, blocks: int = 8) -> Verdict:
    size, rng = team.size, np.random.default_rng()
    inp, out = team.empty((n,)), team.empty((size * n,))
    inputs = unique_inputs(rng, size, n)
    _put(inp, inputs)
    out.fill(np.nan)
    team.synchronize()
    team.launch(kernel, (blocks,), (LESSON_THREADS,), lambda r: (inp.table(r), out[r], np.uint64(n), np.int32(size)))
    team.synchronize()
    return diagnose_copy(_get(out), [np.concatenate(inputs)] * size, inputs=inputs)


def run_copy(team, kernel, n: int = 3 * 8192 + 100, blocks: int = 32) -> Verdict:
    size, rng = team.size, np.random.default_rng()
    inp, out = team.empty((n,)), team.empty((n,))
    inputs = unique_inputs(rng, size, n)
    _put(inp, inputs)
    out.fill(np.nan)
    team.synchronize()
    team.launch(kernel, (blocks,), (LESSON_THREADS,),
                lambda r: (out.table(r), inp[r], np.uint64(n), np.int32(r), np.int32(size)))
    team.synchronize()
    grid = (f"the kernel never wrote them — is the grid covering n? ({blocks} blocks × {LESSON_THREADS} threads = "
            f"{blocks * LESSON_THREADS} threads for n = {n}: loop with a grid stride)")
    return diagnose_copy(_get(out), [inputs[(r - 1) % size] for r in range(size)], inputs=inputs,
                         causes={"unwritten_tail": grid})


def run_flag(team, produce, consume, rounds: int, n: int = 4096) -> Verdict:
    import cupy as cp

    data, flag, ack = team.zeros((n,), "uint32"), team.zeros((1,), "uint32"), team.zeros((1,), "uint32")
    seen = team.empty((rounds * n,), "uint32").fill(np.uint32(UNWRITTEN_WORD))
    team.synchronize()
    produce((1,), (LESSON_THREADS,), (np.uint64(data.addresses[0][1]), np.uint64(flag.addresses[0][1]), ack[0],
                                      np.uint64(n), np.uint32(rounds)), device=team.devices[0], stream=team.stream(0))
    consume((1,), (LESSON_THREADS,), (data[1], flag[1], np.uint64(ack.addresses[1][0]), seen[1], np.uint64(n),
                                      np.uint32(rounds)), device=team.devices[1], stream=team.stream(1))
    team.synchronize()
    return diagnose_flag(cp.asnumpy(seen[1]).reshape(rounds, n))


BARRIER_CAUSES = {"unwritten": "the rank read its box before those stores arrived — does it wait (pkit::wait_until) "
                               "for every rank's signal, and does every rank signal (pkit::signal) only after its "
                               "stores?"}


def run_barrier(team, kernel, trials: int, n: int = 1 << 16) -> Verdict:
    late = compile("spin.cu", "spin_ns")
    size, rng = team.size, np.random.default_rng()
    box, out, inp = team.empty((size * n,)), team.empty((size * n,)), team.empty((n,))
    flags = team.zeros((size,), "uint32")

    def one(t: int) -> Verdict:
        inputs = unique_inputs(rng, size, n)
        _put(inp, inputs)
        box.fill(np.nan)
        out.fill(np.nan)
        team.synchronize()
        held = t % size
        late((1,), (1,), (np.uint64(LATE_START_NS),), device=team.devices[held], stream=team.stream(held))
        team.launch(kernel, (1,), (LESSON_THREADS,), lambda r: (box.table(r), flags.table(r), inp[r], out[r],
                                                                np.uint64(n), np.uint32(t + 1), np.int32(r),
                                                                np.int32(size)))
        team.synchronize()
        return diagnose_copy(_get(out), [np.concatenate(inputs)] * size, inputs=inputs, causes=BARRIER_CAUSES)

    return _trials(trials, one, "every rank read every rank's slot after the barrier")


def run_ring(team, kernel, trials: int, chunk: int = 5000) -> Verdict:
    size, rng = team.size, np.random.default_rng()
    inp, out = team.empty((size * chunk,)), team.empty((size * chunk,))
    flags = team.zeros((size + 1,), "uint32")

    def one(t: int) -> Verdict:
        inputs = [rng.integers(-1000, 1001, size * chunk).astype(np.float32) for _ in range(size)]
        _put(inp, inputs)
        out.fill(np.nan)
        team.synchronize()
        for step in range(2 * (size - 1)):
            team.launch(kernel, (1,), (LESSON_THREADS,),
                        lambda r, step=step: (inp.table(r), out.table(r), flags.table(r), np.uint64(chunk),
                                              np.int32(step), np.int32(r), np.int32(size)))
        team.synchronize()
        return diagnose_ring(_get(out), inputs)

    return _trials(trials, one, "every rank holds the sum of all inputs")


OVERLAP_CAUSES = {"unwritten": "they were computed from rows that had not landed — wait for the chunk's flag "
                               "(pkit::wait_until(ready + k, epoch)) before reading it"}


def run_overlap(team, consume, trials: int, chunks: int = 16, chunk: int = 1 << 16) -> Verdict:
    import cupy as cp

    from ..gpus import on_device

    send = compile("lesson_overlap.cu", "send_chunks")  # loaded by its first launch, before any consumer runs
    size, rng = team.size, np.random.default_rng()
    x, rows, out = (team.empty((chunks * chunk,)) for _ in range(3))
    ready = team.zeros((chunks,), "uint32")
    side = [on_device(d, lambda: cp.cuda.Stream(non_blocking=True)) for d in team.devices]

    def one(t: int) -> Verdict:
        inputs = unique_inputs(rng, size, chunks * chunk)
        _put(x, inputs)
        rows.fill(np.nan)
        out.fill(np.nan)
        team.synchronize()
        for r in range(size):  # senders first, on side streams: a receiver never waits on work queued behind it
            nxt = (r + 1) % size
            send((1,), (LESSON_THREADS,), (np.uint64(rows.addresses[r][nxt]), x[r], np.uint64(ready.addresses[r][nxt]),
                                    np.uint64(chunk), np.int32(chunks), np.uint32(t + 1)),
                 device=team.devices[r], stream=side[r])
        team.launch(consume, (chunks,), (LESSON_THREADS,), lambda r: (rows[r], ready[r], out[r], np.uint64(chunk),
                                                               np.uint32(t + 1)))
        team.synchronize()
        want = [2 * inputs[(r - 1) % size] for r in range(size)]
        return diagnose_copy(_get(out), want, causes=OVERLAP_CAUSES)

    return _trials(trials, one, "every chunk was computed after it landed")

