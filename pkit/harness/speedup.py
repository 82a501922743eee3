"""The timing fields of a correct candidate from interleaved (reference, candidate) rounds: pooled medians and
spread, the speedup, its confidence interval over the rounds and the status that interval gives; and when the
rounds have said enough (`decided`).

Example:
    >>> from pkit.harness.reference import Timing
    >>> ref = lambda ms: Timing([[ms, ms * 1.05, ms * 0.95]], [0.01], [1])
    >>> fields = timing_fields([(ref(2.0), ref(1.0)), (ref(2.1), ref(1.0)), (ref(1.9), ref(1.0))])
    >>> fields["status"], round(fields["speedup"], 2), fields["timing_rounds"]
    ('correct_faster', 1.99, 3)
"""
from __future__ import annotations

import math
import statistics

from .integrity import Rounds
from .records import TIE_BAND, speed_status

CONFIDENCE = 0.95
"""Coverage of the speedup's confidence interval."""


def timing_fields(rounds: Rounds) -> dict:
    """Timing fields of a correct candidate from interleaved (reference, candidate) rounds: medians and spread of
    the pooled per-call times (slowest rank), `speedup` = reference median / candidate median, its confidence
    interval (`speedup_interval`) and the status that interval gives (`records.speed_status`)."""
    from ..timing import summarize

    refs, sols = [r.slowest_ms for r, _ in rounds], [s.slowest_ms for _, s in rounds]
    r, s = summarize([v for x in refs for v in x]), summarize([v for x in sols for v in x])
    speedup = r.median_ms / s.median_ms if s.median_ms > 0 else math.inf
    low, high = speedup_interval(refs, sols)
    return {"status": speed_status(low, high), "ref_time_ms": r.median_ms, "sol_time_ms": s.median_ms,
            "ref_time_cv": r.cv, "sol_time_cv": s.cv, "ref_time_min_ms": r.min_ms, "sol_time_min_ms": s.min_ms,
            "ref_time_iqr_ms": r.iqr_ms, "sol_time_iqr_ms": s.iqr_ms, "speedup": speedup, "speedup_low": low,
            "speedup_high": high, "timing_rounds": len(rounds), "rotations": len(rounds[0][1].seeds)}


def gain_on_reused_sets(rounds: Rounds) -> str | None:
    """Why a candidate called faster over all its timed calls is not called faster, or None: when the calls come
    back to input sets already used (fewer sets than calls), the speedup must show on the sets' first uses too,
    which no answer kept from an earlier call can serve; when their interval (`speedup_interval` over each
    round's first uses alone) does not give `correct_faster`, the gain lies on the reused sets.

    >>> from pkit.harness.reference import Timing
    >>> ref = Timing([[2.0, 2.1, 1.9, 2.0, 2.05, 1.95]], [0.01], [1, 2])
    >>> remembers = Timing([[2.0, 1.95, 0.5, 0.55, 0.45, 0.5]], [0.01], [1, 2])
    >>> gain_on_reused_sets([(ref, remembers)] * 3).split(":")[0]
    'faster only on reused input sets'
    >>> gain_on_reused_sets([(ref, Timing([[1.0, 0.95, 1.0, 1.05, 0.95, 1.0]], [0.01], [1, 2]))] * 3) is None
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


def speedup_interval(refs: list[list[float]], sols: list[list[float]], confidence: float = CONFIDENCE
                     ) -> tuple[float, float]:
    """Confidence interval of the speedup (median of all reference calls / median of all candidate calls, ms per
    call) over interleaved rounds (`refs[k]`, `sols[k]`: round k's per-call times): the speedup times
    exp(± t·s/√n), s the standard deviation over the n rounds of each round's log ratio (its reference median over
    its candidate median), t Student's two-sided `confidence` quantile with n − 1 degrees of freedom. The rounds
    are the samples, so drift between rounds widens the interval, and calls within a round, which share the
    round's conditions, count once. Fewer than two rounds say nothing: (0, inf).

    >>> low, high = speedup_interval([[2.0, 2.1], [2.2, 2.1], [1.9, 2.0]], [[1.0, 1.05], [1.0, 1.0], [1.0, 0.95]])
    >>> 1.6 < low < 2.0 < high < 2.5
    True
    """
    pooled = statistics.median(v for r in refs for v in r) / statistics.median(v for s in sols for v in s)
    logs = [math.log(statistics.median(r) / statistics.median(s)) for r, s in zip(refs, sols)]
    if len(logs) < 2:
        return 0.0, math.inf
    half = t_quantile(confidence, len(logs) - 1) * statistics.stdev(logs) / math.sqrt(len(logs))
    return pooled * math.exp(-half), pooled * math.exp(half)


def decided(low: float, high: float, band: float = TIE_BAND) -> bool:
    """True when more rounds would not change the verdict of the interval [low, high]: it lies clear of the tie
    band (faster or slower) or inside it (level).

    >>> decided(1.2, 1.4), decided(0.97, 1.03), decided(0.97, 1.3)
    (True, True, False)
    """
    return speed_status(low, high, band) != "correct_level" or (low >= 1 / (1 + band) and high <= 1 + band)


def t_quantile(confidence: float, df: int) -> float:
    """t with P(|T| <= t) = `confidence` for Student's T with `df` (an integer >= 1) degrees of freedom.

    >>> [round(t_quantile(0.95, df), 3) for df in (1, 2, 4, 30)]
    [12.706, 4.303, 2.776, 2.042]
    """
    low, high = 0.0, 1.0
    while _t_within(high, df) < confidence:
        high *= 2
    for _ in range(100):  # bisection: the closed form below is increasing in t
        mid = (low + high) / 2
        low, high = (mid, high) if _t_within(mid, df) < confidence else (low, mid)
    return (low + high) / 2


def _t_within(t: float, df: int) -> float:
    """P(|T| <= t) for Student's T with integer `df` degrees of freedom (Abramowitz & Stegun 26.7.3-4)."""
    theta = math.atan(t / math.sqrt(df))
    c2, s = math.cos(theta) ** 2, math.sin(theta)
    if df % 2:  # odd: (2/π)(θ + sinθ cosθ (1 + 2/3 cos²θ + 2·4/(3·5) cos⁴θ + ...)), df − 1 terms in all
        term = total = 1.0 if df > 1 else 0.0
        for k in range(1, (df - 1) // 2):
            term *= c2 * (2 * k) / (2 * k + 1)
            total += term
        return 2 / math.pi * (theta + s * math.cos(theta) * total)
    term = total = 1.0  # even: sinθ (1 + 1/2 cos²θ + 1·3/(2·4) cos⁴θ + ...)
    for k in range(1, df // 2):
        term *= c2 * (2 * k - 1) / (2 * k)
        total += term
    return s * total
