"""The status and reason of a run that stopped early: which rank's failure explains it (its own error, not the echo
of a peer's death), a timeout, a broken protocol, or the problem's own code failing (`reference_error`)."""
from __future__ import annotations

import signal

from .launch import RankState, RunTimeout
from .records import excerpt
from .reference import ReferenceFailed

REFERENCE_PHASES = ("load_problem", "inputs")
"""Phases of a candidate worker in which only the problem's own code runs (a failure there is the problem's)."""


def failed_fields(fields: dict, failure: Exception, ranks: list[RankState], timeout_s: float) -> dict:
    """`fields` with the status and error of a run that stopped early: a rank's own error or death, a timeout, or
    a broken protocol."""
    first = root_cause(ranks)
    if first is not None:
        status = "compile_error" if first.error and first.error.get("kind") == "compile_error" else "runtime_error"
        if first.error and str(first.error.get("phase", "")).startswith(REFERENCE_PHASES):
            fields["flags"].add("reference_error")
        return dict(fields, status=status, error=excerpt(describe_failure(first), head=1000))
    tails = "\n".join(f"--- rank {r.rank} output ---\n{r.log_tail[-600:]}" for r in ranks if r.log_tail.strip())
    if isinstance(failure, RunTimeout):
        where = "; ".join(f"rank {r.rank} in phase {r.phase}" for r in ranks)
        return dict(fields, status="timeout",
                    error=excerpt(f"no result within {timeout_s:g} s; all ranks killed ({where})\n{tails}", head=400))
    return dict(fields, status="runtime_error", error=excerpt(f"{failure}\n{tails}", head=400))


def root_cause(ranks: list[RankState]) -> RankState | None:
    """The rank whose failure explains the run, or None when no rank failed.

    In order: a compile error; the earliest error of the rank's own (not the echo of a peer's death, such
    as gloo's 'Connection closed by peer'); the first rank seen to die on its own (not killed by us); the
    earliest echo.
    """
    errored = sorted((r for r in ranks if r.error), key=lambda r: r.error.get("time", 0))
    crashed = sorted((r for r in ranks if not r.error and r.exit_order is not None and r.returncode not in (0, -9)),
                     key=lambda r: r.exit_order)
    own = [r for r in errored if not r.error.get("peer_failure")]
    compiled = [r for r in own if r.error.get("kind") == "compile_error"]
    for group in (compiled, own, crashed, errored):
        if group:
            return group[0]
    return None


def describe_failure(rank: RankState) -> str:
    """What a failed rank said (phase, exception, traceback) or, when it said nothing, how it died."""
    if rank.error:
        e = rank.error
        return (f"rank {rank.rank}, phase {e.get('phase')}: {e.get('type')}: {e.get('message')}\n"
                f"{e.get('traceback', '')}")
    code = rank.returncode
    how = f"signal {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit code {code}"
    return f"rank {rank.rank} died ({how}) in phase {rank.phase} without a result\n{rank.log_tail}"


def reference_failure(e: ReferenceFailed) -> dict:
    """Record fields for a candidate whose problem's reference failed."""
    cause = root_cause(e.ranks)
    text = describe_failure(cause) if cause is not None else str(e)
    return {"status": "runtime_error", "flags": {"reference_error"},
            "error": excerpt(f"the reference failed: {text}", head=1000), "per_rank": [], "trials": 0,
            "trials_passed": 0}
