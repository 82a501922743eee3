"""The overlap model's GEMM: a time for C = A·Bᵀ at any shape and on any number of SMs, fitted to a one-GPU GEMM
study (results/<machine>/overlap_gemm) and equal to it where it recorded the shape.

A GEMM's work goes to the SMs in waves, and a wave costs about the longer of its mainloop over K and its epilogue
(they overlap: the outbox drains while the next tile multiplies). How the work is cut depends on the GEMM:

* pkit's GEMM (`planned`) runs the `pkit.ops.gemm_plans.plan` it picks for the shape and the SMs: ⌈units / SMs⌉ whole
  waves of units, each over ⌈K slices / splits⌉ slices of K, a slice of a 128-wide unit costing the plan rule's
  `narrow_slice` of a 256-wide one; on fewer SMs the GEMM plans again, and so does the model.
* cuBLAS (not `planned`) picks among kernels of its own (tile sizes, split-K, stream-K) that pkit cannot see: its
  work is counted as 128 × 256 tiles spread evenly over the SMs, tiles / SMs waves (balanced, fractional).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pandas as pd

from ...hardware import GPUS

MEASURED_SMS = GPUS["H200"].sms  # the SMs of the GPU the one-GPU GEMM studies ran on
LENGTHS = np.geomspace(1.0, 1e5, 1001)  # the epilogue's length in K searched by `GemmFit.from_points`


def work(m: int, n: int, k: int, sms: int, planned: bool) -> tuple[float, float, bool]:
    """(waves, K per unit, split) of an M × N × K GEMM on `sms` SMs: pkit's plan (`planned`: whole waves of its
    units over the SMs its clusters fill, K per unit ⌈K slices / splits⌉ slices' elements scaled by the plan rule's
    width_slice and slice_cost (a narrower, shallower, paired or shorter unit's slice), split when splits > 1; a
    split tail's whole waves counted as waves of the tail's shorter units) or cuBLAS's balanced tiles (tiles / SMs,
    all of K, no split)."""
    from ...ops.gemm_plans import BLOCK_K, BLOCK_M, BLOCK_N, plan, plan_rule

    if sms < 1:
        raise ValueError(f"sms: expected at least 1 SM, got {sms}")
    if not planned:
        return math.ceil(m / BLOCK_M) * math.ceil(n / BLOCK_N) / sms, float(k), False
    how = plan(int(m), int(n), int(k), int(sms))
    rule = plan_rule()
    slices = math.ceil(k / BLOCK_K)
    per_unit = math.ceil(slices / how.splits) * BLOCK_K * rule.width_slice(how.block_n) * rule.slice_cost(how)
    whole, rounds = how.waves(m, n, sms // how.cluster)  # a split tail's whole waves counted in its tail's units
    return rounds + whole * slices / math.ceil(slices / how.splits), per_unit, how.splits > 1


def _columns(w: np.ndarray, k: np.ndarray, split: np.ndarray, length: float) -> np.ndarray:
    """The fit's linear terms at an epilogue `length` (in K): the waves' mainloop-or-epilogue, its growth with the
    waves, the per-call constant and split units' extra per K."""
    main = w * np.hypot(k, length)
    return np.column_stack([main, w * main, np.ones_like(w), w * k * split])


@dataclass(frozen=True)
class GemmFit:
    """A GEMM's time: call_s + W·(1 + growth·W)·√((K_u·seconds_per_k)² + epilogue_s²) + W·K_u·split_s·[split],
    W and K_u the waves and K per unit of `work` on the SMs given. The mainloop over K_u and the epilogue overlap
    (their quadratic mean, a smooth maximum); a wave costs more the more waves the call runs (`growth`: the study's
    long GEMMs run slower per wave); a split unit's K costs more (`split_s`: the units of one tile share no operand
    rows in L2); call_s is what a call costs apart from its waves. On fewer SMs the same work takes more waves (and
    pkit's GEMM plans again): nothing is fitted to that.

    Where the study recorded the shape (`points`, all `sms`), `time_s` is the recorded time itself (a measurement
    of the very GEMM a schedule runs), on fewer SMs scaled by the fit's `rate_on`; elsewhere the fit's. `errors`
    reports the fit's own error at every recorded point."""

    implementation: str
    seconds_per_k: float
    epilogue_s: float
    growth: float = 0.0
    call_s: float = 0.0
    split_s: float = 0.0
    planned: bool = False
    sms: int = MEASURED_SMS
    points: tuple = ()

    @classmethod
    def from_points(cls, implementation: str, points: Sequence[tuple], sms: int = MEASURED_SMS,
                    planned: bool | None = None) -> "GemmFit":
        """Least squares on the relative error of each time (each shape weighs alike) of `points` (M, N, K, seconds
        on all `sms`); `planned` defaults to pkit's GEMM (an implementation named pkit_gemm…). Needs more points
        than parameters (five, four without split units). The epilogue's length in K (epilogue_s / seconds_per_k)
        is searched on a log grid from 1 to 10⁵ (`LENGTHS`); for each, the others are linear."""
        planned = implementation.startswith("pkit_gemm") if planned is None else planned
        pts = tuple(tuple(float(v) for v in p) for p in points)
        cut = [work(m, n, k, sms, planned) for m, n, k, _ in pts]
        w, per_unit, split = (np.array([c[i] for c in cut], dtype=float) for i in range(3))
        t = np.array([p[3] for p in pts])
        used = [True, True, True, bool(split.any())]
        if len(pts) <= sum(used) + 1:
            raise ValueError(f"points: expected more than {sum(used) + 1} (M, N, K, seconds) to fit {sum(used) + 1} "
                             f"parameters, got {len(pts)}")
        best = None
        for length in LENGTHS:
            x = _columns(w, per_unit, split, length)[:, used] / t[:, None]
            coef, *_ = np.linalg.lstsq(x, np.ones(len(t)), rcond=None)
            loss = float(np.sum((x @ coef - 1.0) ** 2))
            if best is None or loss < best[0]:
                best = (loss, length, coef)
        _, length, coef = best
        per_k, grown, call, split_s = (*coef, 0.0)[:4]
        return cls(implementation, float(per_k), float(per_k * length), float(grown / per_k), float(call),
                   float(split_s), planned, sms, pts)

    @classmethod
    def from_frame(cls, frame: pd.DataFrame, implementation: str, sms: int = MEASURED_SMS) -> "GemmFit":
        """From a recorded gemm study (overlap.gemm_rates: implementation, m, n, k, time_median_us)."""
        rows = frame[frame["implementation"] == implementation]
        if rows.empty:
            raise ValueError(f"implementation: expected one of {sorted(set(frame['implementation']))}, "
                             f"got {implementation!r}")
        return cls.from_points(implementation, list(zip(rows["m"], rows["n"], rows["k"],
                                                        rows["time_median_us"] * 1e-6)), sms)

    def fit_s(self, m: int, n: int, k: int, sms: int | None = None) -> float:
        """The fit's seconds for C = A·Bᵀ (M × K by N × K) on `sms` SMs (default all of them)."""
        w, per_unit, split = work(m, n, k, self.sms if sms is None else sms, self.planned)
        mainloop = float(np.hypot(per_unit * self.seconds_per_k, self.epilogue_s))
        return self.call_s + w * (1 + self.growth * w) * mainloop + w * per_unit * self.split_s * split

    def recorded_s(self, m: int, n: int, k: int) -> float | None:
        """The study's time of this shape on all the SMs, None where it recorded none."""
        return next((t for pm, pn, pk, t in self.points if (pm, pn, pk) == (m, n, k)), None)

    def time_s(self, m: int, n: int, k: int, sms: int | None = None) -> float:
        """Seconds for C = A·Bᵀ on `sms` SMs (default all of them): the recorded time where the study has the
        shape (scaled by the fit's `rate_on` on fewer SMs), the fit's elsewhere."""
        recorded = self.recorded_s(m, n, k)
        if recorded is None:
            return self.fit_s(m, n, k, sms)
        return recorded if sms in (None, self.sms) else recorded / self.rate_on(m, n, k, sms)

    def tflops(self, m: int, n: int, k: int) -> float:
        return 2.0 * m * n * k / self.time_s(m, n, k) / 1e12

    def rate_on(self, m: int, n: int, k: int, sms: int) -> float:
        """The GEMM's rate on `sms` SMs over its rate on all of them (the fit's: nothing recorded on fewer SMs)."""
        return self.fit_s(m, n, k) / self.fit_s(m, n, k, sms)

    def errors(self) -> pd.DataFrame:
        """Each recorded point: m, n, k, measured_us, model_us (the fit's, not the recorded time `time_s` returns
        there), error (model over measured − 1)."""
        rows = [{"implementation": self.implementation, "m": int(m), "n": int(n), "k": int(k), "measured_us": t * 1e6,
                 "model_us": self.fit_s(m, n, k) * 1e6} for m, n, k, t in self.points]
        out = pd.DataFrame(rows)
        return out.assign(error=out["model_us"] / out["measured_us"] - 1)
