"""Can a candidate's times be believed? The timing checks, all made in the parent from what it saw: the reported
times against the wall time and the reference's harness work (`timing_mismatch`), the interleaved rounds' verdict
(`judge`), the reference slowed beside the candidate's processes (`reference_slowed`) and the roofline
wall (`roofline_wall`). A candidate whose times fail them is correct but not called faster.

Example:
    >>> from pkit.harness.reference import Timing
    >>> alone, beside = Timing([[1.0, 1.0, 1.1]], [0.01], [1]), Timing([[1.3, 1.2, 1.4]], [0.01], [1])
    >>> reference_slowed([(beside, beside)], [alone]).split(",")[0]
    "the reference's median call took 1.3 ms beside the candidate's processes"
    >>> reference_slowed([(alone, beside), (alone, beside), (beside, beside)], [alone]) is None
    True
"""
from __future__ import annotations

import math
import statistics

from .records import CORRECT, add_reason
from .reference import Timing

MISMATCH_SLACK_S = 0.05
"""Wall time (s) a timed window may exceed its explained time by before `timing_mismatch` (plus 25% of the
reference's overhead and the candidate's own reported time: see `timing_mismatch`)."""
BUILD_SLACK_S = 0.5
"""Seconds the candidate's input-set building may take beyond 1.5x the reference's (see `timing_mismatch`)."""
REUSE_RATIO = 0.5
"""The candidate's calls on reused input sets, relative to their sets' first calls, may not be faster than this
fraction of the same ratio of the reference's (see `timing_mismatch`)."""
ALONE_RATIO = 1.1
"""The reference's median call over the interleaved rounds (the one its speedup divides) may be at most this many
times its median timed alone after the candidate's processes are gone, plus ALONE_SLACK_MS (see
`reference_slowed`)."""
ALONE_SLACK_MS = 0.02
"""Milliseconds a call of the reference may take beyond ALONE_RATIO times its time alone: the jitter of a median
of calls of a few tens of µs (a tiny size, where synchronising is most of a call), as in the per-call check."""
ALONE_WINDOWS = 3
"""Most windows the reference is timed alone: one, and another while every one so far was faster than the rounds
allow. One window's median of a noisy op strays that far now and then (identical code on a 0.08 ms fixture op,
on an H100); all of them seldom. Work a candidate left running slows none of them: its
processes are gone."""

Rounds = list[tuple[Timing, Timing]]
"""Interleaved rounds: (reference, candidate) timings of each."""


def reuse_ratio(timing: Timing) -> float | None:
    """Median time of the calls on reused input sets over the median of the sets' first calls (None without
    reuse). The calls rotate over the sets, so the first len(seeds) calls are the first uses."""
    sets, slowest = len(timing.seeds), timing.slowest_ms
    if sets >= len(slowest):
        return None
    first = statistics.median(slowest[:sets])
    return statistics.median(slowest[sets:]) / first if first > 0 else None


def timing_mismatch(ref: Timing, sol: Timing) -> str | None:
    """Why the candidate's reported times cannot be believed, from what this process saw (None: they can).

    Four checks, all against the reference's own timed phase, which does the same harness work:
    - reused sets (when there are fewer sets than calls and the candidate would be called faster): the median
      call on a reused set over the median first call of a set must not fall below REUSE_RATIO times the
      reference's (answers kept from the first use and looked up show here);
    - building the input sets: the candidate's must not take longer than 1.5x the reference's plus
      BUILD_SLACK_S (outputs computed ahead while the sets are built show here, when they cost that much);
    - per call: the time between answering call i-1 and hearing of call i, minus the reported time of call i,
      is the harness's work around a call; the candidate's median must not exceed the reference's median by
      more than half the candidate's reported median, a quarter of the reference's median, three median
      absolute deviations (the larger of the two roles') and 20 µs (work hidden from a patched timer shows
      here, call after call; it must stand out of this noise to be seen);
    - per window (from the sets being built to the last call): the candidate's window minus the reference's
      overhead (window minus reported times) must not exceed twice its reported total plus 25% of that
      overhead plus MISMATCH_SLACK_S.
    """
    mine_reuse, theirs_reuse = reuse_ratio(sol), reuse_ratio(ref)
    faster = statistics.median(sol.slowest_ms) < statistics.median(ref.slowest_ms)
    if faster and mine_reuse is not None and theirs_reuse is not None and mine_reuse < REUSE_RATIO * theirs_reuse:
        return (f"calls on reused input sets took {mine_reuse:.2g}x the time of their sets' first calls (the "
                f"reference: {theirs_reuse:.2g}x): answers remembered, not computed")
    if sol.build_s and ref.build_s and max(sol.build_s) > 1.5 * max(ref.build_s) + BUILD_SLACK_S:
        return (f"building its timed input sets took {max(sol.build_s):.3g} s here, the reference's "
                f"{max(ref.build_s):.3g} s (allowed: 1.5x + {BUILD_SLACK_S:g} s)")
    mine, theirs = sol.unexplained_ms, ref.unexplained_ms
    if mine and theirs:
        usual, own = statistics.median(theirs), statistics.median(mine)
        spread = max(statistics.median(abs(v - usual) for v in theirs), statistics.median(abs(v - own) for v in mine))
        allowed = 0.5 * statistics.median(sol.slowest_ms) + 0.25 * usual + 3 * spread + 0.02
        extra = statistics.median(mine) - usual
        if extra > allowed:
            return (f"per call, {extra:.3g} ms more passed around each timed call than the reference's harness work "
                    f"({usual:.3g} ms; allowed {allowed:.3g} ms more) while the candidate reported a median of "
                    f"{statistics.median(sol.slowest_ms):.3g} ms")
    overhead = max(0.0, max(ref.window_s) - sum(ref.slowest_ms) / 1e3)
    reported = sum(sol.slowest_ms) / 1e3
    if max(sol.window_s) - overhead > 2 * reported + 0.25 * overhead + MISMATCH_SLACK_S:
        return (f"the candidate reported {reported * 1e3:.3g} ms over its timed calls, but its timed window took "
                f"{max(sol.window_s) * 1e3:.3g} ms here (the reference's overhead: {overhead * 1e3:.3g} ms)")
    return None


def judge(rounds: Rounds) -> tuple[Rounds, str | None]:
    """(the rounds the verdict comes from, why the candidate's times are not believed or None): the rounds whose
    timing checks pass; all rounds, with the first failing round's reason, when those are fewer than the failing
    ones."""
    whys = [timing_mismatch(r, s) for r, s in rounds]
    clean = [pair for pair, why in zip(rounds, whys) if why is None]
    if len(clean) < len(rounds) - len(clean):
        return rounds, next(w for w in whys if w)
    return clean, None


def reference_slowed(rounds: Rounds, alone: list[Timing]) -> str | None:
    """Why the reference's times in `rounds` cannot be believed, or None: the median of its calls pooled over the
    rounds (the `ref_time_ms` a speedup divides) exceeds ALONE_RATIO times its median in each window of `alone`,
    timed after the candidate's processes were gone, plus ALONE_SLACK_MS (the slowest window's median is the one
    compared). Work the candidate's processes leave running on the GPU while the reference is timed (between the
    candidate's calls, where no check of the candidate sees it) slows the reference and makes the candidate read
    faster; slowing only some rounds gains at most ALONE_RATIO."""
    beside = statistics.median(v for ref, _ in rounds for v in ref.slowest_ms)
    solo = max(statistics.median(window.slowest_ms) for window in alone)
    if beside <= ALONE_RATIO * solo + ALONE_SLACK_MS:
        return None
    ratio = beside / solo if solo > 0 else math.inf
    windows = "alone" if len(alone) == 1 else f"in the slowest of {len(alone)} windows alone"
    return (f"the reference's median call took {beside:.3g} ms beside the candidate's processes, "
            f"{ratio:.3g}x its {solo:.3g} ms {windows} after they were gone (allowed: {ALONE_RATIO:g}x + "
            f"{ALONE_SLACK_MS * 1e3:g} µs): work left running by the candidate slows the reference")


def roofline_wall(fields: dict, roof_ms: float | None, bound: str | None, device: str, ceilings: str) -> dict:
    """`fields` of a correct candidate whose median time lies below the problem's roofline (`roof_ms`, the cost
    model's floor under the measuring GPU's ceilings): flag `beyond_roofline`, status `correct_slower` with no
    speedup, and a reason naming the bound; no time can beat the floor, so such a time is a defect of the timing
    or the check, not a speedup. Only on 'cuda': gloo timings on the CPU have nothing to do with GPU ceilings."""
    sol = fields.get("sol_time_ms")
    if device != "cuda" or roof_ms is None or not sol or fields.get("status") not in CORRECT or sol >= roof_ms:
        return fields
    flags = set(fields.get("flags") or ())
    flags.add("beyond_roofline")
    why = (f"beyond_roofline: median time {sol:.4g} ms is below the {bound or 'roofline'} bound of "
           f"{roof_ms:.4g} ms ({ceilings} ceilings); not called faster")
    return dict(fields, flags=flags, status="correct_slower", speedup=None, speedup_low=None, speedup_high=None,
                error=add_reason(fields.get("error"), why))
