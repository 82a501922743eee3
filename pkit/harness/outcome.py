"""A candidate's record: the fields of its trials' checks, and the whole record around the fields its run gave
(what ran, the problem's roofline and its wall, provenance and version stamps)."""
from __future__ import annotations

from .checks import RankCheck
from .integrity import roofline_wall
from .options import EvalOptions, spec_for
from .problems import Problem
from .records import new_record
from .solutions import Candidate
from .versions import stamp


def roofline_ms(problem: Problem, world_size: int, size: str, dtype: str, ceilings: str) -> tuple:
    """(roofline time in ms, bound) of the problem's cost model in `dtype` (FLOPs at that dtype's rate,
    `pkit.harness.problems.roofline_floor`) under a GPU's datasheet; (None, None) without a cost model."""
    from ..roofline import Ceilings
    from .problems import roofline_floor

    cost = problem.cost(world_size, size, dtype)
    if cost is None:
        return None, None
    f = roofline_floor(cost, dtype, Ceilings.datasheet(ceilings))
    return f.time_s * 1e3, f.bound


def trial_fields(checks: list[list[RankCheck]]) -> dict:
    """Fields of the trials run (`checks[t][rank]`): the last trial per rank, the largest errors, the trials run
    and passed, and every check's flags."""
    flat = [c for row in checks for c in row]
    last = checks[-1] if checks else []
    return {
        "per_rank": [c.to_dict(rank) for rank, c in enumerate(last)],
        "max_abs_err": max((c.max_abs_err for c in flat if c.max_abs_err is not None), default=None),
        "max_rel_err": max((c.max_rel_err for c in flat if c.max_rel_err is not None), default=None),
        "trials": len(checks), "trials_passed": sum(all(c.ok for c in row) for row in checks),
        "flags": {f for c in flat for f in c.flags},
    }


def record_for(problem: Problem, candidate: Candidate, options: EvalOptions, device: str, provenance: dict | None,
               fields: dict, wall_s: float) -> dict:
    """The record of `candidate` on `problem`: `fields` (what its run gave) with what ran, the roofline (and
    `integrity.roofline_wall`), the run's wall time and the provenance stamped with `versions.stamp`."""
    spec = spec_for(problem, options, device)
    roof_ms, bound = roofline_ms(problem, options.world_size, spec["size"], spec["dtype"], options.ceilings)
    if fields.get("sol_time_ms") and roof_ms is not None:
        fields["roofline_fraction"] = roof_ms / fields["sol_time_ms"]
    fields = roofline_wall(fields, roof_ms, bound, device, options.ceilings)
    prov = dict(provenance or {}, seed=options.seed, **stamp(problem, candidate, options))
    return new_record(
        problem=problem.name, category=problem.category, solution=candidate.relpath, model=candidate.model,
        sample=candidate.sample, backend=candidate.backend, world_size=options.world_size, size=spec["size"],
        dtype=spec["dtype"], device=device, roofline_time_ms=roof_ms, roofline_bound=bound, seed=options.seed,
        timing="full" if options.perf else "quick", wall_s=round(wall_s, 3), provenance=prov, **fields)
