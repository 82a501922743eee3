"""The lesson's recorded results: a frame of `results/<machine>/`, or a line saying that none is recorded.

Example (step 6's timeline is measured live, not recorded):
    >>> recorded("overlap_timeline", "h200x2-nv18")[1]
    "nothing recorded as 'overlap_timeline' for 'h200x2-nv18'"
"""
from __future__ import annotations

from ..errors import PkitError


def recorded(experiment: str, machine: str):
    """(frame, where it was measured) of a recorded result (`pkit.results.load`), or (None, a line saying that
    nothing is recorded under that name).

    >>> frame, where = recorded("quickstart", "h200x2-nv18")
    >>> where.startswith("recorded on h200x2-nv18"), recorded("no_such_study", "h200x2-nv18")
    (True, (None, "nothing recorded as 'no_such_study' for 'h200x2-nv18'"))
    """
    from ..results import describe, load

    try:
        run = load(experiment, machine)
    except PkitError:
        return None, f"nothing recorded as {experiment!r} for {machine!r}"
    return run.frame, f"recorded on {describe(run.provenance)}"

