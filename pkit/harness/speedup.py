"""The timing fields of a correct candidate from interleaved (reference, candidate) rounds: pooled medians and
spread, the speedup, its bootstrap confidence interval and the status that interval gives.

Example:
    >>> from pkit.harness.reference import Timing
    >>> ref, sol = Timing([[2.0, 2.1, 1.9]], [0.01], [1]), Timing([[1.0, 1.05, 0.95]], [0.01], [1])
    >>> fields = timing_fields([(ref, sol)] * 3)
    >>> fields["status"], fields["speedup"], fields["timing_rounds"]
    ('correct_faster', 2.0, 3)
"""
from __future__ import annotations

import math

from .integrity import Rounds
from .records import speed_status

BOOTSTRAP = 2000
"""Resamples of the speedup's confidence interval (`speedup_interval`)."""
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


def speedup_interval(refs: list[list[float]], sols: list[list[float]], resamples: int = BOOTSTRAP,
                     confidence: float = CONFIDENCE, seed: int = 0) -> tuple[float, float]:
    """Percentile interval of the speedup (median reference time / median candidate time, ms per call) by a
    two-level bootstrap over interleaved rounds (`refs[k]`, `sols[k]`: round k's per-call times): each resample
    draws the rounds with replacement (drift between rounds widens the interval), then within each drawn round the
    reference's and the candidate's calls with replacement (noise between calls), and takes the ratio of the pooled
    medians. Deterministic (`seed`).

    >>> low, high = speedup_interval([[2.0, 2.1, 1.9]] * 3, [[1.0, 1.05, 0.95]] * 3)
    >>> 1.7 < low < 2.0 < high < 2.3
    True
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    picked = rng.integers(0, len(refs), (resamples, len(refs)))
    ref, sol = _resampled_medians(refs, picked, rng), _resampled_medians(sols, picked, rng)
    ratios = np.divide(ref, sol, out=np.full(resamples, math.inf), where=sol > 0)
    tail = (1 - confidence) / 2
    low, high = np.quantile(ratios, [tail, 1 - tail])
    return float(low), float(high)


def _resampled_medians(rounds: list[list[float]], picked, rng, cells: int = 1 << 22):
    """Per resample (a row of `picked`, the rounds it drew), the median of the drawn rounds' calls, each drawn
    round's calls drawn with replacement; vectorised over resamples, `cells` values at a time."""
    import numpy as np

    sizes = np.array([len(r) for r in rounds])
    table = np.full((len(rounds), sizes.max()), np.nan)
    for k, times in enumerate(rounds):
        table[k, :len(times)] = times
    medians = np.empty(len(picked))
    step = max(1, cells // picked[0].size // table.shape[1])
    for start in range(0, len(picked), step):
        rows = picked[start:start + step]
        drawn = sizes[rows][..., None]  # (resamples, rounds, 1): the size of each drawn round
        calls = (rng.random((*rows.shape, table.shape[1])) * drawn).astype(np.int64)  # below each round's size
        values = np.where(np.arange(table.shape[1]) < drawn, table[rows[..., None], calls], np.nan)
        medians[start:start + step] = np.nanmedian(values.reshape(len(rows), -1), axis=1)
    return medians
