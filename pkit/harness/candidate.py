"""One candidate against a started reference: fresh workers driven through the trials and the interleaved timing
rounds, each output checked here as it arrives, the timed calls checked after the workers are gone, and the
verdict's record fields (`run_candidate`).
"""
from __future__ import annotations

import os
import time
from pathlib import Path

from .checks import FingerprintCheck, RankCheck, compare
from .failures import failed_fields, reference_failure
from .integrity import judge, reference_slowed, retimes
from .launch import RunFailed, RunTimeout, WorkerSet
from .options import EvalOptions, spec_for, timing_counts, tolerances
from .outcome import trial_fields
from .problems import Problem
from .records import add_reason, excerpt
from .reference import Reference, ReferenceFailed, Timing, timed_phase
from .snapshot import SnapshotError, load
from .solutions import Candidate
from .speedup import gain_on_reused_sets, timing_fields
from .timer import input_bytes

ROUNDS = 3
"""Interleaved timing rounds: each times the reference and the candidate once on fresh input sets, in turn (the
reference first in even rounds, the candidate first in odd ones, so drift and warm-up fall on both)."""


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
            self.rounds = [self.timed_round(k, counts["iters"], deadline) for k in range(ROUNDS)]
            bad = retimes(self.rounds)
            if bad:  # each window under a --timeout of its own (an honest candidate near its limit does not time out)
                again = time.monotonic()
                self.rounds += [self.timed_round(ROUNDS + k, counts["iters"], time.monotonic() + self.options.timeout_s)
                                for k in range(bad)]
                self.retime_s = time.monotonic() - again
        ws.send({"op": "quit"})
        ws.wait_exit(2.0)

    def timed_round(self, k: int, iters: int, deadline: float) -> tuple[Timing, Timing]:
        """(reference, candidate) timings of round `k`, each on fresh sets; the reference first when k is even."""
        ref = self.reference

        def mine():
            return timed_phase(self.workers, ref.sets, iters, ref.inplace, deadline, ref.out_bytes)

        if k % 2 == 0:
            theirs = ref.retime(iters)
            return theirs, mine()
        own = mine()
        return ref.retime(iters), own

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

    def check_timed(self) -> list[str]:
        """Notes on timed calls of every candidate window whose outputs differ from the reference's for the same
        inputs, each call's fresh change included (empty: all right): every call by its fingerprint, the kept
        calls of the last window element by element (each window's saved outputs replace the one's before)."""
        notes, last = [], len(self.rounds) - 1
        for k, (_, timing) in enumerate(self.rounds):
            notes += [f"window {k + 1}, {note}" for note in self.check_window(timing, k == last)]
        return notes

    def check_window(self, timing: Timing, saved: bool) -> list[str]:
        kept = timing.kept if saved else set()
        summaries, expected = self.reference.expected(timing.seeds, timing.fresh, kept, self.tolerance)
        prints = [[FingerprintCheck(summary) for summary in row] for row in summaries]
        notes = []
        for rank, calls in enumerate(timing.fingerprints):
            for i, got in enumerate(calls):
                why = prints[i][rank].mismatch(got)
                if why:
                    notes.append(f"rank {rank}, timed call {i}: {why}")
        for i in sorted(kept):
            for rank in range(self.options.world_size):
                try:
                    got = load(self.file(rank, f"timed{i}"), self.out_cap, "out")
                except SnapshotError as e:
                    notes.append(f"rank {rank}, timed call {i}: {e}")
                    continue
                check = compare(expected[i][rank], got, **self.tolerance)
                if not check.ok:
                    notes.append(f"rank {rank}, timed call {i}: {check.note}")
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
    On the GPU the reference is timed once more, alone (`integrity.reference_slowed`)."""
    phases, checking = fields["phase_s"], time.monotonic()
    notes = run.check_timed()
    phases["parent: check timed outputs"] = round(time.monotonic() - checking, 3)
    if run.retime_s is not None:
        phases["parent: both timed again after a mismatch"] = round(run.retime_s, 3)
    if notes:
        fields["flags"].add("timed_output")
        return dict(fields, status="wrong_result", error=excerpt(
            f"{len(notes)} timed output(s) differ from the reference's for the same fresh inputs: "
            + "; ".join(notes), head=600))
    rounds, why = judge(run.rounds)
    if why is None and device == "cuda":
        alone = time.monotonic()
        why = reference_slowed(rounds, run.reference.retime(timing_counts(run.options)["iters"]))
        phases["parent: reference timed alone"] = round(time.monotonic() - alone, 3)
    times = timing_fields(rounds)
    if why:
        fields["flags"].add("timing_mismatch")
        times.update(status="correct_slower", speedup=None, speedup_low=None, speedup_high=None)
        fields["error"] = f"timing_mismatch: {why}; not called faster"
    elif times["status"] == "correct_faster" and (reused := gain_on_reused_sets(rounds)):
        times["status"] = "correct_level"
        fields["error"] = add_reason(fields.get("error"), reused)
    return dict(fields, error=fields.get("error"), **times)
