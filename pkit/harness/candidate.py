"""One candidate against a started reference: fresh workers driven through the trials and the interleaved timing
rounds (as many as the verdict needs, `settled`), each output checked here as it arrives, the timed calls checked
after the workers are gone, and the verdict's record fields (`run_candidate`).
"""
from __future__ import annotations

import os
import secrets
import time
from dataclasses import replace
from pathlib import Path

from .checks import FingerprintCheck, RankCheck, compare
from .failures import failed_fields, reference_failure
from .integrity import ALONE_WINDOWS, Rounds, judge, reference_slowed, timing_mismatch
from .launch import RunFailed, RunTimeout, WorkerSet
from .options import EvalOptions, spec_for, timing_counts, tolerances
from .outcome import trial_fields
from .problems import Problem
from .records import add_reason, excerpt
from .reference import Plan, Reference, ReferenceFailed, Timing, timed_phase
from .snapshot import SnapshotError, load
from .solutions import Candidate
from .speedup import decided, fewest_rounds, gain_on_reused_sets, speedup_interval, timing_fields
from .timer import input_bytes

MIN_ROUNDS = fewest_rounds()
"""Interleaved timing rounds before a verdict, the fewest whose speedup interval exists (`speedup.fewest_rounds`):
each times the reference and the candidate once on the same fresh input sets (one `Plan`), in turn (the reference
first in even rounds, the candidate first in odd ones, so drift and warm-up fall on both)."""
WARM_ROUNDS = 1
"""Rounds timed and checked first but left out of the verdict: the reference's workers come to the first idle since
their last window (cold caches, clocks run down), the candidate's straight from their warm-up."""
MAX_ROUNDS = 48
"""Most interleaved rounds per candidate after the WARM_ROUNDS under --perf: more than ROUNDS_BUDGET_S holds of a
0.1 ms op's rounds on a GPU (about 0.25 s each), so that the budget, not a count, ends a close call (a 10% slower
candidate's interval needs about 20 rounds to clear the 5% tie band)."""
QUICK_ROUNDS = 12
"""Most rounds under quick timing (without --perf, `options.QUICK_TIMING`): its windows of a few calls are there to
call a candidate faster or slower, not to split close calls; on two CPU cores, whose calls spread by a quarter of
their median, 48 rounds did not split a 10% slowdown from the tie band either (docs/harness.md)."""
ROUNDS_BUDGET_S = 6.0
"""Seconds of rounds after which no new round starts, once MIN_ROUNDS have run: with the worker's start, the
trials and the checks a candidate then costs the harness under 10 s even where its verdict is a close call."""


def most_rounds(options: EvalOptions) -> int:
    """The most rounds after the WARM_ROUNDS for `options`: MAX_ROUNDS under --perf, else QUICK_ROUNDS (never more
    than MAX_ROUNDS).

    >>> most_rounds(EvalOptions(perf=True)), most_rounds(EvalOptions(perf=False))
    (48, 12)
    """
    return MAX_ROUNDS if options.perf else min(QUICK_ROUNDS, MAX_ROUNDS)


def settled(rounds: Rounds) -> bool:
    """True when more rounds would not change the verdict: at least MIN_ROUNDS rounds fail the timing checks and
    they outnumber those that pass (a lie repeats: `integrity.judge`), or at least MIN_ROUNDS pass and their
    speedup's interval is `speedup.decided` (clear of the tie band, or inside it)."""
    clean = [(r, s) for r, s in rounds if timing_mismatch(r, s) is None]
    failing = len(rounds) - len(clean)
    if failing >= MIN_ROUNDS and failing > len(clean):
        return True
    return len(clean) >= MIN_ROUNDS and decided(*speedup_interval([r.slowest_ms for r, _ in clean],
                                                                  [s.slowest_ms for _, s in clean]))


class CandidateRun:
    """One candidate's workers, driven through trials and timing, checked here as outputs arrive."""

    def __init__(self, problem: Problem, candidate: Candidate, reference: Reference, options: EvalOptions,
                 device: str, folder: Path, log):
        self.reference, self.options = reference, options
        self.tolerance = tolerances(problem, options)
        spec = dict(spec_for(problem, options, device), role="candidate",
                    candidate={"path": str(candidate.path), "function": candidate.function})
        self.folder = folder / f"candidate-{os.urandom(4).hex()}"
        self.workers = WorkerSet(spec, self.folder, log=log, zygote=reference.zygote)
        self.checks: list[list[RankCheck]] = []
        self.rounds: list[tuple[Timing, Timing]] = []  # (reference, candidate) per interleaved round
        self.plans: list[Plan] = []  # the plan of each round
        self.compared: int | None = None  # the round whose kept outputs are compared element by element
        self.phases = {"parent: reference windows": 0.0, "parent: candidate windows": 0.0}
        self.retime_s: float | None = None
        self.out_cap = 4 * reference.out_bytes + (1 << 20)

    def file(self, rank: int, tag: str) -> str:
        return str(self.folder / f"candidate{rank}_{tag}.pt")

    def drive(self) -> None:
        """Trials (stop at the first failing one), then warm-up and timing when all passed."""
        ws, ref = self.workers, self.reference
        deadline = time.monotonic() + self.options.timeout_s
        ws.gather("ready", deadline)
        ws.send({"op": "trials", "seeds": [self.options.seed + t for t in range(len(ref.trials))]})
        for t, row in enumerate(ref.trials):
            messages = ws.gather("trial", deadline)
            checks = [self.check_trial(t, rank, row[rank], m) for rank, m in enumerate(messages)]
            self.checks.append(checks)
            passed = all(c.ok for c in checks)
            ws.send({"op": "verdict", "go": passed})
            if not passed:
                break
        ws.gather("trials_done", deadline)
        if self.passed:
            counts = timing_counts(self.options)
            ws.send({"op": "warmup", "n": counts["warmup"]})
            ws.gather("warm", deadline)
            self.time_rounds(counts["iters"], deadline, most_rounds(self.options))
        ws.send({"op": "quit"})
        ws.wait_exit(2.0)

    def time_rounds(self, iters: int, deadline: float, most: int) -> None:
        """Interleaved rounds of `iters` calls a window: WARM_ROUNDS, then more until those are `settled`, `most`
        have run (`most_rounds`) or ROUNDS_BUDGET_S is spent, never fewer than MIN_ROUNDS; the candidate's windows
        after the first WARM_ROUNDS + MIN_ROUNDS rounds each under a --timeout of their own (an honest candidate near
        its limit does not time out), as the reference's always are. A round with a timed output whose fingerprint
        differs from the reference's ends the rounds at once: the verdict is wrong_result whatever more rounds would
        show. `retime_s`: the seconds of the rounds after the first that failed a timing check."""
        began, ends, first = time.monotonic(), [], WARM_ROUNDS + MIN_ROUNDS
        while len(self.rounds) < WARM_ROUNDS + max(most, MIN_ROUNDS):
            k = len(self.rounds)
            self.rounds.append(self.timed_round(k, iters, deadline if k < first
                                                else time.monotonic() + self.options.timeout_s))
            ends.append(time.monotonic())
            if self.fingerprint_mismatches(k):
                break
            if k + 1 >= first and (settled(self.rounds[WARM_ROUNDS:]) or ends[-1] - began > ROUNDS_BUDGET_S):
                break
        failed = [k for k, (r, s) in enumerate(self.rounds) if timing_mismatch(r, s) is not None]
        if failed:
            self.retime_s = ends[-1] - ends[failed[0]]

    def timed_round(self, k: int, iters: int, deadline: float) -> tuple[Timing, Timing]:
        """(reference, candidate) timings of round `k` on one new `Plan`; the reference first when k is even. The
        reference's window gives the right answers the candidate's calls are checked against (`check_timed`). This
        round replaces the one whose kept outputs are compared element by element with probability 1/(k + 1), so
        that round is drawn uniformly from the rounds run; the draw is made here, before the round, and only the
        reference's workers learn it (they write their kept outputs in that round alone); both roles copy the
        plan's calls in every round, the same work around their calls."""
        ref = self.reference
        plan = Plan.new(ref.sets, iters, ref.out_bytes, self.tolerance, f"round{k}")
        compared = secrets.randbelow(k + 1) == 0

        def timed(role: str, run):
            began = time.monotonic()
            timing = run()
            self.phases[f"parent: {role} windows"] += time.monotonic() - began
            return timing

        def theirs():
            return timed("reference", lambda: ref.window(plan if compared else replace(plan, save=False)))

        def mine():
            return timed("candidate", lambda: timed_phase(self.workers, plan, ref.inplace, deadline))

        if k % 2 == 0:
            pair = theirs(), mine()
        else:
            own = mine()
            pair = theirs(), own
        self.plans.append(plan)
        dropped = k
        if compared:
            dropped, self.compared = self.compared, k
        if dropped is not None:
            self.remove_kept(dropped)
        return pair

    def remove_kept(self, k: int) -> None:
        """Remove the files of the outputs kept in round `k` (both roles')."""
        for i in self.plans[k].kept:
            for rank in range(self.options.world_size):
                tag = f"{self.plans[k].tag}_timed{i}"
                for path in (self.file(rank, tag), self.reference.file(rank, tag)):
                    try:
                        os.remove(path)
                    except OSError:
                        pass

    @property
    def passed(self) -> bool:
        return len(self.checks) == len(self.reference.trials) and all(c.ok for row in self.checks for c in row)

    def check_trial(self, t: int, rank: int, ref, message: dict) -> RankCheck:
        try:
            out = load(self.file(rank, f"trial{t}_out"), self.out_cap, "out")
            after = load(self.file(rank, f"trial{t}_after"), self.out_cap + 4 * input_bytes(ref.before.value), "input")
        except SnapshotError as e:
            return RankCheck(ok=False, note=f"unreadable output: {e}", flags=["unreadable_output"])
        aliases = [a for a in message.get("aliases", []) if isinstance(a, str)]
        check = compare(ref.out, out, pristine=ref.before, ref_inputs=ref.after, sol_inputs=after,
                        inplace=self.reference.inplace, ref_aliases=ref.aliases, sol_aliases=aliases,
                        **self.tolerance)
        if message.get("side_stream") is True:
            check.ok = False
            check.flags = sorted({*check.flags, "side_stream"})
            check.note = add_reason(check.note, "output still changed after the current stream finished: work on a "
                                           "side stream not joined back")
        return check

    def fingerprint_mismatches(self, k: int) -> list[str]:
        """Notes on the timed calls of round `k` whose output's fingerprint differs from the reference's
        `fingerprint_check` of the same call (empty: all right)."""
        theirs, mine = self.rounds[k]
        return [f"round {k + 1}, rank {rank}, timed call {i}: {why}"
                for rank, (wants, gots) in enumerate(zip(theirs.checks, mine.checks))
                for i, (want, got) in enumerate(zip(wants, gots))
                if (why := FingerprintCheck(want).mismatch(got.get("want") if isinstance(got, dict) else None))]

    def check_timed(self) -> list[str]:
        """Notes on timed calls whose outputs differ from the reference's for the same inputs, each call's change
        included (empty: all right): every call of every round by its fingerprint, against the reference's
        `fingerprint_check` of the same call in the same round; the kept calls of the round `timed_round` drew,
        element by element."""
        notes = [note for k in range(len(self.rounds)) for note in self.fingerprint_mismatches(k)]
        if self.compared is None:
            return notes
        plan = self.plans[self.compared]
        for i in sorted(plan.kept):
            for rank in range(self.options.world_size):
                tag = f"{plan.tag}_timed{i}"
                try:
                    want = self.reference.kept(rank, tag)
                except SnapshotError as e:
                    raise ReferenceFailed(f"kept output: {e}") from None
                try:
                    got = load(self.file(rank, tag), self.out_cap, "out")
                except SnapshotError as e:
                    notes.append(f"round {self.compared + 1}, rank {rank}, timed call {i}: {e}")
                    continue
                check = compare(want, got, **self.tolerance)
                if not check.ok:
                    notes.append(f"round {self.compared + 1}, rank {rank}, timed call {i}: {check.note}")
        return notes


def run_candidate(problem: Problem, candidate: Candidate, reference: Reference, options: EvalOptions, device: str,
                  folder: Path, log=None) -> tuple[dict, float]:
    """(record fields, wall seconds) of one candidate against a started reference; flagged `loud_output` when its
    ranks printed more than `options.output_mib` each (`output_dropped_bytes`: the bytes dropped, all ranks)."""
    start = time.monotonic()
    run = CandidateRun(problem, candidate, reference, options, device, folder, log)
    failure = reference_failed = None
    try:
        run.drive()
    except (RunFailed, RunTimeout) as e:
        failure = e
    except ReferenceFailed as e:  # timing the reference again, after a mismatch
        reference_failed = e
    finally:
        ranks = run.workers.close()
    fields = verdict_fields(run, ranks, failure or reference_failed, device)
    dropped = sum(r.output_dropped for r in ranks)
    if dropped:
        fields["flags"] = {*fields["flags"], "loud_output"}
    return dict(fields, output_dropped_bytes=dropped), time.monotonic() - start


def verdict_fields(run: CandidateRun, ranks: list, failure: Exception | None, device: str) -> dict:
    """The record fields of a candidate whose workers are gone (`ranks`: their final states), given how its run
    stopped early (`failure`: RunFailed, RunTimeout or ReferenceFailed; None when it ran through)."""
    fields = dict(trial_fields(run.checks), phase_s={k: round(v, 3) for k, v in ranks[0].phase_s.items()})
    if isinstance(failure, ReferenceFailed):
        return dict(fields, **reference_failure(failure))
    if failure is not None:
        return failed_fields(fields, failure, ranks, run.options.timeout_s)
    if not run.passed:
        last = run.checks[-1]
        return dict(fields, status="wrong_result", error=excerpt(
            "; ".join(f"rank {r}: {c.note}" for r, c in enumerate(last) if c.note)))
    try:
        return judged_fields(run, fields, device)
    except ReferenceFailed as e:
        return dict(fields, **reference_failure(e))


def judged_fields(run: CandidateRun, fields: dict, device: str) -> dict:
    """`fields` of a candidate whose workers passed every trial and are gone: `wrong_result` when a timed output
    differs from the reference's; else its times, not called faster when a timing check does not believe them
    (`timing_mismatch`), called level when it is faster only on reused input sets (`speedup.gain_on_reused_sets`).
    On the GPU the reference is timed once more, alone, and again while that window is faster than its rounds
    allow, up to ALONE_WINDOWS windows (`integrity.reference_slowed`). `phase_s` gains the parent's
    seconds: each role's windows, the timed calls in them (slowest rank, both roles), the checks."""
    phases, checking = fields["phase_s"], time.monotonic()
    notes = run.check_timed()
    phases["parent: check timed outputs"] = round(time.monotonic() - checking, 3)
    phases.update({name: round(seconds, 3) for name, seconds in run.phases.items()})
    phases["parent: timed calls"] = round(sum(sum(t.slowest_ms) for pair in run.rounds for t in pair) / 1e3, 3)
    if run.retime_s is not None:
        phases["parent: both timed again after a mismatch"] = round(run.retime_s, 3)
    if notes:
        fields["flags"].add("timed_output")
        return dict(fields, status="wrong_result", error=excerpt(
            f"{len(notes)} timed output(s) differ from the reference's for the same fresh inputs: "
            + "; ".join(notes), head=600))
    rounds, why = judge(run.rounds[WARM_ROUNDS:])
    if why is None and device == "cuda":
        began, iters, alone = time.monotonic(), timing_counts(run.options)["iters"], []
        while not alone or (why and len(alone) < ALONE_WINDOWS):
            alone.append(run.reference.window(Plan.new(run.reference.sets, iters, None, run.tolerance)))
            why = reference_slowed(rounds, alone)
        phases["parent: reference timed alone"] = round(time.monotonic() - began, 3)
    times = timing_fields(rounds)
    if why:
        fields["flags"].add("timing_mismatch")
        times.update(status="correct_slower", speedup=None, speedup_low=None, speedup_high=None)
        fields["error"] = f"timing_mismatch: {why}; not called faster"
    elif times["status"] == "correct_faster" and (reused := gain_on_reused_sets(rounds)):
        times["status"] = "correct_level"
        fields["error"] = add_reason(fields.get("error"), reused)
    return dict(fields, error=fields.get("error"), **times)
