"""The timing fields of a correct candidate from interleaved (reference, candidate) rounds: pooled medians and
spread, the speedup (the median of the rounds' ratios), its confidence interval over the rounds and the status
that interval gives; and when the rounds have said enough (`decided`).

Example:
    >>> from pkit.harness.reference import Timing
    >>> calls = lambda ms: Timing([[ms, ms * 1.05, ms * 0.95]], [0.01], [1])
    >>> fields = timing_fields([(calls(ms), calls(1.0)) for ms in (2.0, 2.1, 1.9, 2.0, 2.2, 1.8)])
    >>> fields["status"], fields["speedup"], (fields["speedup_low"], fields["speedup_high"]), fields["timing_rounds"]
    ('correct_faster', 2.0, (1.8, 2.2), 6)
"""
from __future__ import annotations

import math
import statistics

from .integrity import Rounds
from .records import TIE_BAND, speed_status

CONFIDENCE = 0.95
"""Coverage of the speedup's confidence interval."""
SLOW_CALL = 3.0
"""A timed call slower than this many times its role's pooled median is a slow call: records count them
(`*_slow_calls`) and give the others' spread apart (`*_cv_calm`), which tells a few late calls from a spread of
all. Medians and the interval are unaffected by them either way."""


def timing_fields(rounds: Rounds) -> dict:
    """Timing fields of a correct candidate from interleaved (reference, candidate) rounds: medians and spread of
    the pooled per-call times (slowest rank), `speedup` = the median over rounds of the round's reference median
    over its candidate median (`round_ratios`), its confidence interval (`speedup_interval`) and the status that
    interval gives (`records.speed_status`)."""
    from ..timing import summarize

    refs, sols = [r.slowest_ms for r, _ in rounds], [s.slowest_ms for _, s in rounds]
    r, s = summarize([v for x in refs for v in x]), summarize([v for x in sols for v in x])
    speedup = statistics.median(round_ratios(refs, sols))
    low, high = speedup_interval(refs, sols)
    return {"status": speed_status(low, high), "ref_time_ms": r.median_ms, "sol_time_ms": s.median_ms,
            "ref_time_cv": r.cv, "sol_time_cv": s.cv, "ref_time_cv_rounds": cv_within_rounds(refs),
            "sol_time_cv_rounds": cv_within_rounds(sols), "ref_time_min_ms": r.min_ms, "sol_time_min_ms": s.min_ms,
            "ref_time_iqr_ms": r.iqr_ms, "sol_time_iqr_ms": s.iqr_ms, "ref_time_max_ms": r.max_ms,
            "sol_time_max_ms": s.max_ms, **slow_call_fields("ref", refs), **slow_call_fields("sol", sols),
            "speedup": speedup, "speedup_low": low, "speedup_high": high,
            "timing_rounds": len(rounds), "rotations": len(rounds[0][1].seeds)}


def slow_call_fields(role: str, times: list[list[float]]) -> dict:
    """`<role>_time_slow_calls`, the calls (ms, per round) over SLOW_CALL times their pooled median, and
    `<role>_time_cv_calm`, the coefficient of variation of the others.

    >>> slow_call_fields("ref", [[1.0, 1.0], [1.0, 5.0]])
    {'ref_time_slow_calls': 1, 'ref_time_cv_calm': 0.0}
    """
    calls = [v for t in times for v in t]
    median = statistics.median(calls)
    calm = [v for v in calls if v <= SLOW_CALL * median]
    cv = statistics.pstdev(calm) / statistics.fmean(calm) if statistics.fmean(calm) > 0 else None
    return {f"{role}_time_slow_calls": len(calls) - len(calm), f"{role}_time_cv_calm": cv}


def cv_within_rounds(times: list[list[float]]) -> float | None:
    """The median over rounds of each round's coefficient of variation (standard deviation over mean of its calls,
    ms), None without a round of two calls: the calls' spread within a window, without the spread between windows
    (placements drawn per window, drift) that the pooled cv carries.

    >>> cv_within_rounds([[1.0, 1.0], [2.0, 2.0], [1.0, 3.0]])
    0.0
    """
    cvs = [statistics.pstdev(t) / statistics.fmean(t) for t in times if len(t) > 1 and statistics.fmean(t) > 0]
    return statistics.median(cvs) if cvs else None


def gain_on_reused_sets(rounds: Rounds) -> str | None:
    """Why a candidate called faster over all its timed calls is not called faster, or None: when the calls come
    back to input sets already used (fewer sets than calls), the speedup must show on the sets' first uses too,
    which no answer kept from an earlier call can serve; when their interval (`speedup_interval` over each
    round's first uses alone) does not give `correct_faster`, the gain lies on the reused sets.

    >>> from pkit.harness.reference import Timing
    >>> ref = Timing([[2.0, 2.1, 1.9, 2.0, 2.05, 1.95]], [0.01], [1, 2])
    >>> remembers = Timing([[2.0, 1.95, 0.5, 0.55, 0.45, 0.5]], [0.01], [1, 2])
    >>> gain_on_reused_sets([(ref, remembers)] * 6).split(":")[0]
    'faster only on reused input sets'
    >>> gain_on_reused_sets([(ref, Timing([[1.0, 0.95, 1.0, 1.05, 0.95, 1.0]], [0.01], [1, 2]))] * 6) is None
    True
    """
    if all(len(r.seeds) >= len(r.slowest_ms) and len(s.seeds) >= len(s.slowest_ms) for r, s in rounds):
        return None
    refs = [r.slowest_ms[:len(r.seeds)] for r, _ in rounds]
    sols = [s.slowest_ms[:len(s.seeds)] for _, s in rounds]
    low, high = speedup_interval(refs, sols)
    if speed_status(low, high) == "correct_faster":
        return None
    return (f"faster only on reused input sets: the first uses of its sets alone give a speedup interval of "
            f"[{low:.3g}, {high:.3g}], so the gain is not credited")


def round_ratios(refs: list[list[float]], sols: list[list[float]]) -> list[float]:
    """Per interleaved round (`refs[k]`, `sols[k]`: round k's per-call times, ms), its reference median over its
    candidate median."""
    return [statistics.median(r) / statistics.median(s) if statistics.median(s) > 0 else math.inf
            for r, s in zip(refs, sols)]


def speedup_interval(refs: list[list[float]], sols: list[list[float]], confidence: float = CONFIDENCE
                     ) -> tuple[float, float]:
    """Confidence interval of the speedup, the median over interleaved rounds of `round_ratios`: the sign test's
    interval of that median, from the k-th smallest to the k-th largest ratio (`order_rank`). The rounds are the
    samples, so drift between rounds widens it and calls within a round, which share its conditions, count once;
    it assumes nothing of the ratios' spread (a round hit by a burst of load moves it by one rank at most). Too few
    rounds for `confidence` say nothing: (0, inf).

    >>> speedup_interval([[2.0], [2.2], [1.9], [2.1], [2.05], [1.95]], [[1.0]] * 6)
    (1.9, 2.2)
    >>> speedup_interval([[2.0], [2.2]], [[1.0], [1.0]])
    (0.0, inf)
    """
    ratios = sorted(round_ratios(refs, sols))
    k = order_rank(len(ratios), confidence)
    return (ratios[k - 1], ratios[-k]) if k else (0.0, math.inf)


def order_rank(n: int, confidence: float = CONFIDENCE) -> int:
    """The largest k >= 1 for which the k-th smallest and k-th largest of n samples bound their median with at
    least `confidence` (P(Binomial(n, 1/2) < k) <= (1 - confidence) / 2), or 0 when even the smallest and largest
    do not.

    >>> [order_rank(n) for n in (5, 6, 8, 9, 12)]
    [0, 1, 1, 2, 3]
    """
    below, k = 0.0, 0
    while True:
        below += math.comb(n, k) / 2 ** n  # P(Binomial(n, 1/2) <= k)
        if 2 * below > 1 - confidence or k >= n // 2:
            return k
        k += 1


def fewest_rounds(confidence: float = CONFIDENCE) -> int:
    """The fewest rounds whose `speedup_interval` exists at `confidence` (6 at 95%).

    >>> fewest_rounds(0.95)
    6
    """
    return next(n for n in range(1, 64) if order_rank(n, confidence))


def decided(low: float, high: float, band: float = TIE_BAND) -> bool:
    """True when more rounds would not change the verdict of the interval [low, high]: it lies clear of the tie
    band (faster or slower) or inside it (level).

    >>> decided(1.2, 1.4), decided(0.97, 1.03), decided(0.97, 1.3)
    (True, True, False)
    """
    return speed_status(low, high, band) != "correct_level" or (low >= 1 / (1 + band) and high <= 1 + band)
