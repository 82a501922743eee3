"""The reference side of an evaluation: a set of worker processes that never import a candidate.

`Reference.start` launches reference workers for one problem and keeps them for all of its candidates:
they compute the trial outputs (kept in this process, the files deleted at once), show which inputs the
reference updates in place, and are warmed up. Then each interleaved round times the reference and the
candidate on the same `Plan` (input sets, each call's change, the calls whose whole outputs are kept): the
reference's window doubles as the right answers the candidate's calls are checked against, every call by the
`fingerprint_check` the reference worker computes on its device, the kept calls element by element. If a
candidate killed the reference workers, they are started again.

`timed_phase` runs the timing protocol for either role: the input sets' seeds are revealed only when the
window opens, each call's change seed only just before the call (with the answer to the call before it),
every call is followed by a `keep` answer chosen here at random (so a worker cannot know which outputs will
be checked element by element), and the window's wall time is measured here, outside the workers.
"""
from __future__ import annotations

import math
import os
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .checks import leaves, same_values
from .launch import RunFailed, RunTimeout, WorkerSet
from .snapshot import Snapshot, SnapshotError, load

KEEP_TOTAL = 8
"""Timed outputs compared element by element per candidate (each on another input set while sets last)."""

KEEP_BYTES = 256 << 20
"""Bytes of those outputs per rank (copied on the device during the window, saved after it): fewer than
KEEP_TOTAL outputs are kept when they are larger, never none."""


class ReferenceFailed(Exception):
    """The problem's own code (inputs or reference) failed; `ranks` holds the workers' final states."""

    def __init__(self, message: str, ranks=None):
        super().__init__(message)
        self.ranks = ranks or []


def random_seeds(n: int) -> list[int]:
    """`n` distinct seeds nobody can predict (from the OS's random source)."""
    seeds: set[int] = set()
    while len(seeds) < n:
        seeds.add(secrets.randbits(31))
    return list(seeds)


def keep_plan(iters: int, sets: int, out_bytes: int) -> set[int]:
    """Indices of timed calls whose whole outputs (`out_bytes` each, per rank) are compared: KEEP_TOTAL, or
    as many as fit KEEP_BYTES (at least one), on distinct input sets in random order while sets last, each a
    random use of its set. Every timed call is checked by its fingerprint besides.

    Example:
        >>> plan = keep_plan(iters=100, sets=4, out_bytes=1 << 20)
        >>> len(plan), sorted({i % 4 for i in plan})
        (8, [0, 1, 2, 3])
    """
    total = max(1, min(KEEP_TOTAL, iters, KEEP_BYTES // max(out_bytes, 1)))
    order = secrets.SystemRandom().sample(range(sets), sets)
    chosen: set[int] = set()
    for j in range(total):
        k = order[j % sets]
        uses = [i for i in range(k, iters, sets) if i not in chosen]
        if uses:
            chosen.add(uses[secrets.randbelow(len(uses))])
    return chosen


@dataclass
class Timing:
    """One role's timed phase: per-rank samples (ms); per rank, as this process saw them, the time to build
    the input sets (s) and the window of the calls from then on (s); the input sets' seeds, the kept calls, per
    rank and call the gap before it (ms) and the worker's `fingerprint_check` summary of its output (`checks`),
    the time to build, and per call the seed of its change (`fresh`)."""

    samples_ms: list[list[float]]
    window_s: list[float]
    seeds: list[int]
    kept: set[int] = field(default_factory=set)
    gaps_ms: list[list[float]] = field(default_factory=list)
    checks: list[list] = field(default_factory=list)
    build_s: list[float] = field(default_factory=list)
    fresh: list[int] = field(default_factory=list)

    @property
    def unexplained_ms(self) -> list[float]:
        """Per call after the first, the time this process saw between answering call i-1 and hearing of call i,
        minus the time the worker reported for call i; the smallest over ranks (barrier waits drop out)."""
        return [min(g[i] - s[i + 1] for g, s in zip(self.gaps_ms, self.samples_ms))
                for i in range(len(self.gaps_ms[0]))] if self.gaps_ms and self.gaps_ms[0] else []

    @property
    def slowest_ms(self) -> list[float]:
        """Per call, the slowest rank's time in ms."""
        return [max(s) for s in zip(*self.samples_ms)]


@dataclass
class Plan:
    """What the windows of one round share: the input sets' seeds, each call's change seed (`fresh`), the calls
    whose whole outputs are kept (copied on the device after the call, in both roles alike), the tolerance
    (`options.tolerances`) the outputs' checks are computed for, the tag of the kept outputs' files
    (`<role><rank>_<tag>_timed<i>.pt`) and whether they are written (`save`) once the window has closed."""

    seeds: list[int]
    fresh: list[int]
    kept: set[int]
    tolerance: dict
    tag: str = "timed"
    save: bool = True

    @classmethod
    def new(cls, sets: int, iters: int, out_bytes: int | None, tolerance: dict, tag: str = "timed") -> "Plan":
        """Fresh seeds for `sets` input sets and `iters` calls; `keep_plan` for outputs of `out_bytes` (None
        keeps none)."""
        kept = keep_plan(iters, sets, out_bytes) if out_bytes is not None else set()
        return cls(random_seeds(sets), random_seeds(iters), kept, tolerance, tag)


def timed_phase(workers: WorkerSet, plan: Plan, inplace, deadline: float) -> Timing:
    """Time `len(plan.fresh)` calls on the `plan`'s fresh input sets, each call's set changed with a seed of its own
    sent just before it (`go`, then with each answer); answers each call with keep or drop (`plan.kept`)."""
    seeds, fresh, kept, iters = plan.seeds, plan.fresh, plan.kept, len(plan.fresh)
    answered: dict[int, int] = {}
    ranks = range(workers.world_size)
    gaps: list[list[float]] = [[] for _ in ranks]
    checks: list[list] = [[] for _ in ranks]
    replied: dict[int, float] = {}

    def answer(rank: int, message: dict) -> None:
        if message["op"] != "called" or message.get("i") != answered.get(rank, 0):
            raise RunFailed(f"rank {rank}: unexpected message {message['op']!r} while timing")
        if rank in replied:
            gaps[rank].append((message["_at"] - replied[rank]) * 1e3)
        checks[rank].append(message.get("check"))
        after = message["i"] + 1
        workers.send({"op": "keep", "keep": message["i"] in kept, "fresh": fresh[after] if after < iters else None},
                     ranks=[rank])
        replied[rank] = time.monotonic()
        answered[rank] = message["i"] + 1

    opened = time.monotonic()
    workers.send({"op": "time", "seeds": seeds, "iters": iters, "inplace": sorted(inplace),
                  "tolerance": plan.tolerance, "tag": plan.tag, "save": plan.save})
    built = [m["_at"] for m in workers.gather("built", deadline)]
    workers.send({"op": "go", "fresh": fresh[0]})
    done = workers.gather("timed", deadline, answer)
    samples = [m.get("samples_ms") for m in done]
    for rank, s in enumerate(samples):  # before `saved`: a forged early report fails now, not at the deadline
        if (not isinstance(s, list) or len(s) != iters or answered.get(rank) != iters
                or not all(isinstance(v, (int, float)) and math.isfinite(v) and v >= 0 for v in s)):
            raise RunFailed(f"rank {rank}: timing report does not match the {iters} calls it was asked for")
    workers.gather("saved", deadline)
    return Timing(samples, [m["_at"] - b for m, b in zip(done, built)], seeds, set(kept), gaps, checks,
                  [b - opened for b in built], fresh)


@dataclass
class TrialRecord:
    """The reference on one rank in one trial: inputs before and after the call, output, aliased outputs."""

    before: Snapshot
    after: Snapshot
    out: Snapshot
    aliases: list
    out_bytes: int


class Reference:
    """Reference workers of one problem under one set of options (see the module docstring)."""

    def __init__(self, spec: dict, folder: Path, timeout_s: float, log=None, zygote=None):
        self.spec, self.folder, self.timeout_s, self.log, self.zygote = spec, Path(folder), timeout_s, log, zygote
        self.trials: list[list[TrialRecord]] = []
        self.inplace: set[str] = set()
        self.sets = 1
        self.workers: WorkerSet | None = None

    def _launch(self) -> float:
        self.workers = WorkerSet(dict(self.spec, role="reference"), self.folder / "reference", log=self.log,
                                 zygote=self.zygote)
        deadline = time.monotonic() + self.timeout_s
        self.workers.gather("ready", deadline)
        return deadline

    def file(self, rank: int, tag: str) -> str:
        return str(self.folder / "reference" / f"reference{rank}_{tag}.pt")

    def _take(self, rank: int, tag: str, root: str) -> Snapshot:
        path = self.file(rank, tag)
        try:
            return load(path, root=root)
        finally:
            _remove(path)

    def start(self, seeds: list[int], declared_inplace, warmup: int, iters: int) -> "Reference":
        """Trials on `seeds`, in-place detection, the timed sets' count, then `warmup` calls; ReferenceFailed on
        failure."""
        try:
            deadline = self._launch()
            self.workers.send({"op": "trials", "seeds": seeds})
            for t in range(len(seeds)):
                messages = self.workers.gather("trial", deadline)
                row = []
                for rank, m in enumerate(messages):
                    size = os.path.getsize(self.file(rank, f"trial{t}_out"))
                    row.append(TrialRecord(self._take(rank, f"trial{t}_before", "input"),
                                           self._take(rank, f"trial{t}_after", "input"),
                                           self._take(rank, f"trial{t}_out", "out"), list(m.get("aliases", [])), size))
                self.trials.append(row)
                self.workers.send({"op": "verdict", "go": True})
            self.workers.gather("trials_done", deadline)
            self.inplace = self._inplace(declared_inplace)
            self.workers.send({"op": "plan", "seed": random_seeds(1)[0], "iters": iters})
            self.sets = max(int(m["sets"]) for m in self.workers.gather("plan", deadline))
            self.workers.send({"op": "warmup", "n": warmup})
            self.workers.gather("warm", deadline)
        except (RunFailed, RunTimeout, SnapshotError, OSError) as e:
            raise ReferenceFailed(f"{type(e).__name__}: {e}", self.close()) from None
        return self

    def window(self, plan: Plan) -> Timing:
        """Time the reference on `plan` (warm workers: no warm-up; restarted ones if they died), with a --timeout of
        its own."""
        try:
            if self.workers is None or self.workers.failed():
                self.close()
                self._launch()
            return timed_phase(self.workers, plan, self.inplace, time.monotonic() + self.timeout_s)
        except (RunFailed, RunTimeout, SnapshotError, OSError) as e:
            raise ReferenceFailed(f"timing: {type(e).__name__}: {e}", self.close()) from None

    def kept(self, rank: int, tag: str) -> Snapshot:
        """The whole output a window kept under `tag` (`<plan tag>_timed<i>`) on `rank`; its file is removed."""
        return self._take(rank, tag, "out")

    def _inplace(self, declared) -> set[str]:
        """Input paths the reference changed in any trial, plus those under the declared input indices."""
        changed = set(f"input[{i}]" for i in declared)
        for row in self.trials:
            for rec in row:
                before, after = dict(leaves(rec.before.value, "input")), dict(leaves(rec.after.value, "input"))
                for path, was in before.items():
                    if path not in after or not _equal(was, after[path]):
                        changed.add(path)
        all_paths = {p for row in self.trials for rec in row for p, _ in leaves(rec.before.value, "input")}
        return {p for p in all_paths if any(p == c or p.startswith(c + "[") for c in changed)}

    @property
    def out_bytes(self) -> int:
        """The largest trial output's snapshot size (bytes), on any rank."""
        return max(rec.out_bytes for row in self.trials for rec in row)

    def close(self):
        """Stop the reference workers; returns their final states."""
        ranks = self.workers.close() if self.workers is not None else []
        self.workers = None
        return ranks


def _equal(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and same_values(a, b)
    return type(a) is type(b) and a == b


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass
