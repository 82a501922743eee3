"""Checks for the lesson on multi-GPU communication (notebooks/08_lesson_multi_gpu_communication.ipynb).

Every step of the lesson (`STEPS`) has a check, `check_<step>(source, team=None)`. It compiles the learner's kernel
source, runs it on fresh random inputs with NaN-poisoned outputs on every rank of a team (any size from 2 to 8; the
flag step uses ranks 0 and 1), and returns a `Verdict`. When the answer is wrong, the verdict says which rank and
which elements are wrong, and gives a likely cause. The default team is every GPU of the machine where there are two
or more; on a machine with one GPU two ranks share it (`Team([0, 0], share_gpus=True)`, each rank on its own
stream); without a GPU a check compiles the source for sm_90a and reports that it did not run (`Verdict.ok is
None`). The diagnosis is plain NumPy over the outputs (`diagnose_copy`,
`diagnose_flag`, `diagnose_ring`), so it runs and is tested anywhere. `solution(step)` returns the reference kernel,
pkit/kernels/lesson_<step>.cu.

Example:
    >>> import numpy as np
    >>> want = [np.arange(8, dtype=np.float32)] * 2
    >>> got = [want[0], np.r_[want[1][:4], [np.nan] * 4].astype(np.float32)]
    >>> print(diagnose_copy(got, want))
    ✗ rank 1 elements 4..7 still hold the poison value (nan): the kernel never wrote them — is the grid covering n?
    >>> from pkit import lesson
    >>> lesson.check_copy(lesson.solution("copy"))                      # doctest: +SKIP
    ✓ all 2 ranks hold the expected 24676 elements
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable

import numpy as np

from .compiler import KERNEL_DIR, compile
from .errors import CompileError, PeerTimeout, PkitError
from .ops.collectives import lookup

THREADS = 256  # threads per block of every lesson launch
LATE_START_NS = 1_000_000  # how long check_barrier holds one rank back per trial: far longer than its stores take
UNWRITTEN_WORD = 0xFFFFFFFF  # what check_flag's `seen` holds where the reader never copied a word
_MARKS = {True: "✓", False: "✗", None: "·"}  # right, wrong, not run


@dataclass(frozen=True, repr=False)
class Verdict:
    """A check's answer. `ok`: True (right), False (wrong), None (compiled, not run: no GPUs). `message`: what is
    wrong and the likely cause, one line per finding. `details`: the same for programs (e.g. `findings`: rank,
    kind, element ranges, count)."""

    ok: bool | None
    message: str
    details: dict = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{_MARKS[self.ok]} {self.message}"

    __repr__ = __str__


# --- diagnosis: plain NumPy over the outputs -----------------------------------------------------------------

COPY_CAUSES = {
    "unwritten_all": "the kernel wrote nothing here — does it store into this rank's buffer at all?",
    "unwritten_tail": "the kernel never wrote them — is the grid covering n?",
    "unwritten": "the kernel never wrote them — does its loop step by the whole grid (gridDim.x * blockDim.x)?",
    "other_rank": "the peer index is off by {off}",
    "shifted": "an element index is off by {off}",
    "wrong": "check what the kernel stores there",
}
"""Default likely causes of `diagnose_copy`, by finding kind; `{off}` is filled in."""


def diagnose_copy(got, want, poison=np.nan, inputs=None, causes: dict | None = None) -> Verdict:
    """Compare each rank's output with the expected one and say what is wrong.

    `got`, `want`: one 1-D array per rank (a list, or a 2-D array with one row per rank). `poison`: the value the
    outputs held before the kernel ran (NaN matches NaN). `inputs`: every rank's input, optional. With them, a
    wrong element is traced to the input element it holds, which finds another rank's data (a peer index off by
    one) or a shifted element index. Findings, per rank, by `kind`: 'unwritten_all', 'unwritten_tail' (every
    element from some index on), 'unwritten', 'other_rank', 'shifted', 'wrong'. `causes` replaces the default
    likely causes (`COPY_CAUSES`) of the kinds it names; the key 'unwritten' also covers the two other unwritten
    kinds.

    Example:
        >>> a, b = np.arange(4.0), np.arange(4.0) + 10
        >>> print(diagnose_copy([a, a], [b, a], inputs=[a, b]))
        ✗ rank 0 elements 0..3 hold rank 0's own data where rank 1's was expected: the peer index is off by one
    """
    got, want = _per_rank(got, "got"), _per_rank(want, "want")
    if [g.shape for g in got] != [w.shape for w in want]:
        raise ValueError(f"got: expected the shapes of want {[w.shape for w in want]}, got {[g.shape for g in got]}")
    inputs = None if inputs is None else _per_rank(inputs, "inputs")
    given = causes or {}
    unwritten_kinds = ("unwritten_all", "unwritten_tail") if "unwritten" in given else ()
    causes = {**COPY_CAUSES, **{k: given["unwritten"] for k in unwritten_kinds}, **given}
    findings = []
    for r, (g, w) in enumerate(zip(got, want)):
        bad = ~_equal(g, w)
        unwritten = bad & _is(g, poison)
        if unwritten.any():
            idx = np.flatnonzero(unwritten)
            kind = ("unwritten_all" if len(idx) == len(g) else
                    "unwritten_tail" if len(idx) == len(g) - idx[0] else "unwritten")
            findings.append(_finding(r, kind, idx, f"still {_verb(idx, 'hold')} the poison value ({poison})",
                                     causes[kind]))
        rest = np.flatnonzero(bad & ~unwritten)
        if len(rest):
            findings += _misplaced(r, rest, g, w, inputs, causes, len(got))
    if not findings:
        return Verdict(True, f"all {len(got)} ranks hold the expected {len(want[0])} elements")
    return _verdict(findings)


def diagnose_flag(seen, unwritten: int = UNWRITTEN_WORD) -> Verdict:
    """Did the reader of a flag-published buffer see each round's data? `seen`: (rounds, n) words the reader
    copied; in round k (from 1) the writer wrote k into every word before setting the flag to k, so row k − 1
    should hold k everywhere. Words still `unwritten` were never copied. Details: rounds, stale_rounds,
    stale_fraction (stale rounds / rounds), stale_words.

    Example:
        >>> seen = np.array([[1, 1, 1, 1], [1, 1, 2, 2], [3, 3, 3, 3]])
        >>> v = diagnose_flag(seen)
        >>> v.ok, v.details["stale_rounds"]
        (False, 1)
        >>> print(v.message.split(":")[0])
        stale values after the flag in 1 of 3 rounds (2 of 12 words; first in round 2
    """
    seen = np.asarray(seen)
    if seen.ndim != 2 or not seen.size or not np.issubdtype(seen.dtype, np.integer):
        raise ValueError(f"seen: expected a (rounds, n) array of integer words, got shape {seen.shape} of {seen.dtype}")
    rounds, n = seen.shape
    expected = np.arange(1, rounds + 1, dtype=np.int64)[:, None]
    values = seen.astype(np.int64)
    skipped = values == unwritten
    stale, ahead = (values < expected) & ~skipped, (values > expected) & ~skipped
    stale_rows = np.flatnonzero(stale.any(axis=1))
    details = {"rounds": rounds, "stale_rounds": len(stale_rows), "stale_fraction": len(stale_rows) / rounds,
               "stale_words": int(stale.sum())}
    lines = []
    if len(stale_rows):
        k = stale_rows[0]
        old = int(np.bincount(values[k][stale[k]]).argmax())
        held = f"round {old}'s values" if old else "the initial zeros"
        lines.append(f"stale values after the flag in {len(stale_rows)} of {rounds} rounds ({int(stale.sum())} of "
                     f"{seen.size} words; first in round {k + 1}: {_ranges(np.flatnonzero(stale[k]))} still held "
                     f"{held}): the data store is not ordered before the flag (use pkit::signal / release), or the "
                     "reader's loads are not ordered after it (use pkit::wait_until / acquire)")
    if ahead.any():
        k = int(np.flatnonzero(ahead.any(axis=1))[0])
        lines.append(f"round {k + 1}: {_ranges(np.flatnonzero(ahead[k]))} held a later round's values: the writer "
                     "overwrote the data before the reader was done — does it wait for the reader's acknowledgement?")
    if skipped.any():
        k = int(np.flatnonzero(skipped.any(axis=1))[0])
        idx = np.flatnonzero(skipped[k])
        lines.append(f"round {k + 1}: {_ranges(idx)} {'were' if len(idx) > 1 else 'was'} never copied into `seen`: "
                     "does the reader's loop cover all n words in every round?")
    if not lines:
        return Verdict(True, f"no stale value in {rounds} rounds of {n} words: the flag published the data every "
                             "time", details)
    return Verdict(False, "\n".join(lines), details)


def diagnose_ring(outputs, inputs, poison=np.nan) -> Verdict:
    """Say what is wrong with an all-reduce's outputs: each rank's output should be the sum of every rank's input.

    `outputs`, `inputs`: one 1-D array per rank, of n elements, split into `size` chunks of n / size. Each wrong
    chunk of each rank is written as a whole-number combination of the inputs' chunks where one fits (least
    squares, rounded, then checked). That tells a missing contribution from one counted twice, or a sum that
    landed in the wrong chunk, and each of those has a likely cause in the ring kernel. Findings, per rank and
    chunk, by `kind`: 'unwritten', 'coefficients', 'other_chunk', 'mixed_chunks', 'wrong'.

    Example:
        >>> x = [np.array([1.0, 2, 3, 5, 7, 11, 13, 17]), np.array([4.0, 1, 6, 2, 9, 3, 8, 5])]
        >>> out = [x[0] + x[1], np.r_[2 * x[1][:4] + x[0][:4], (x[0] + x[1])[4:]]]
        >>> print(diagnose_ring(out, x))  # doctest: +NORMALIZE_WHITESPACE
        ✗ rank 1 chunk 0 (elements 0..3) counts the input of rank 1 twice: a step added where it should have
        copied — steps 0 .. size - 2 add, the rest copy: is the phase boundary (step < size - 1) off by one?
    """
    outputs, inputs = _per_rank(outputs, "outputs"), _per_rank(inputs, "inputs")
    size, n = len(inputs), len(inputs[0])
    if len(outputs) != size or any(len(a) != n for a in inputs + outputs):
        raise ValueError(f"outputs: expected {size} arrays of {n} elements like inputs, got "
                         f"{[len(a) for a in outputs]}")
    if n % size:
        raise ValueError(f"inputs: expected n divisible by the {size} ranks (one chunk each), got n = {n}")
    chunk = n // size
    parts = np.stack(inputs).astype(np.float64).reshape(size, size, chunk)  # [rank, chunk, element]
    want = parts.sum(axis=0)
    atol = 1e-5 * max(1.0, float(np.abs(parts).max())) * size
    basis = parts.reshape(size * size, chunk).T  # column q * size + c: rank q's chunk c
    findings = []
    for r, out in enumerate(outputs):
        got = out.astype(np.float64).reshape(size, chunk)
        for c in range(size):
            bad = np.flatnonzero(~np.isclose(got[c], want[c], rtol=1e-5, atol=atol))
            unwritten = c * chunk + np.flatnonzero(_is(got[c], poison))
            if len(unwritten):
                findings.append(_finding(r, "unwritten", unwritten, f"still {_verb(unwritten, 'hold')} the poison "
                                         f"value ({poison})", RING_UNWRITTEN, where=f"chunk {c} {_ranges(unwritten)}"))
            elif len(bad):
                coef = _combination(basis, got[c], atol, chunk >= size * size)
                where = f"chunk {c} (elements {c * chunk}..{(c + 1) * chunk - 1})"
                findings.append(_ring_finding(r, c, where, c * chunk + bad, coef, got[c][bad[0]], want[c][bad[0]],
                                              size))
    if not findings:
        return Verdict(True, f"every rank holds the sum of all {size} inputs ({n} elements)")
    return _verdict(findings)


RING_UNWRITTEN = ("no step wrote them, or a step read a chunk the previous rank had not written yet — check the chunk "
                  "index, and the barrier that ends each step")


def _combination(basis: np.ndarray, got: np.ndarray, atol: float, determined: bool) -> np.ndarray | None:
    """Whole-number coefficients c with basis @ c == got (within atol), as a (rank, chunk) matrix; None if none fit."""
    if not determined:
        return None
    coef = np.rint(np.linalg.lstsq(basis, got, rcond=None)[0])
    size = math.isqrt(len(coef))
    return coef.reshape(size, size) if np.allclose(basis @ coef, got, rtol=1e-5, atol=atol) else None


def _ring_finding(r: int, c: int, where: str, idx: np.ndarray, coef, got: float, want: float, size: int) -> dict:
    """Wrong elements `idx` of rank r's chunk c (`where`, in words), described by the inputs' chunks the chunk holds
    (coef[q, c']); `got` and `want` are the first wrong element's values."""
    if coef is None:
        return _finding(r, "wrong", idx, f"holds values that are no sum of inputs (element {idx[0]}: got {got:g}, "
                        f"expected {want:g})", "is every element summed exactly once per rank?", where=where)
    chunks = sorted(int(k) for k in np.flatnonzero(np.abs(coef).sum(axis=0)))
    if chunks == [c]:
        counts = coef[:, c].astype(int)
        by_count = {k: [q for q in range(size) if counts[q] == k] for k in sorted(set(counts)) if k != 1}
        terms = [("lacks the input of {ranks}" if k == 0 else "counts the input of {ranks} twice" if k == 2 else
                  f"counts the input of {{ranks}} {k} times").format(ranks=_ranks(qs)) for k, qs in by_count.items()]
        if (counts > 1).any() and (counts == 0).any():
            cause = ("a step read the wrong rank's buffer — is the peer index off by one (in.ring(-1) is the previous "
                     "rank)?")
        elif (counts > 1).any():
            cause = ("a step added where it should have copied — steps 0 .. size - 2 add, the rest copy: is the phase "
                     "boundary (step < size - 1) off by one?")
        else:
            cause = ("a partial sum was read before it was complete — do both phases use the same chunk index, and "
                     "does every step end with the barrier?")
        return _finding(r, "coefficients", idx, " and ".join(terms), cause, where=where)
    if len(chunks) == 1 and (coef[:, chunks[0]] == 1).all():
        return _finding(r, "other_chunk", idx, f"holds chunk {chunks[0]}'s sum",
                        f"the chunk index is off by {_words(_ring_offset(chunks[0] - c, size))}", where=where)
    return _finding(r, "mixed_chunks", idx, f"mixes inputs of chunks {chunks}",
                    "the chunk index differs between ranks or between the phases", where=where)


def _misplaced(r: int, idx: np.ndarray, got: np.ndarray, want: np.ndarray, inputs, causes: dict, size: int) -> list:
    """Findings for written-but-wrong elements `idx` of rank r, traced (with `inputs`) to the input elements they hold:
    the most common (rank, index) offset from the expected element makes one finding, the rest another."""
    findings = []
    if inputs is not None:
        got_rank, got_at = _locate(got[idx], inputs)
        want_rank, want_at = _locate(want[idx], inputs)
        traced = (got_rank >= 0) & (want_rank >= 0)
        if traced.any():
            offsets, counts = np.unique(np.stack([got_rank - want_rank, got_at - want_at])[:, traced], axis=1,
                                        return_counts=True)
            d_rank, d_at = (int(d) for d in offsets[:, counts.argmax()])
            same = traced & (got_rank - want_rank == d_rank) & (got_at - want_at == d_at)
            first = np.flatnonzero(same)[0]
            p, q, verb = int(got_rank[first]), int(want_rank[first]), _verb(idx[same], "hold")
            if d_rank:
                whose = f"rank {p}'s own" if p == r else f"rank {p}'s"
                shift = f" from {d_at} elements off" if d_at else ""
                off = _words(_ring_offset(d_rank, size))
                findings.append(_finding(r, "other_rank", idx[same], f"{verb} {whose} data{shift} where rank {q}'s was "
                                         "expected", causes["other_rank"].format(off=off)))
            else:
                findings.append(_finding(r, "shifted", idx[same], f"{verb} the values expected {abs(d_at)} "
                                         f"element{'s' * (abs(d_at) > 1)} {'further on' if d_at > 0 else 'earlier'}",
                                         causes["shifted"].format(off=_words(d_at))))
            idx = idx[~same]
    if len(idx):
        findings.append(_finding(r, "wrong", idx, _wrong(got, want, idx), causes["wrong"]))
    return findings


def _locate(values: np.ndarray, inputs: list) -> tuple[np.ndarray, np.ndarray]:
    """(rank, index) of the input element equal to each value; (-1, -1) where none is."""
    flat = np.concatenate(inputs)
    ranks = np.concatenate([np.full(len(a), q) for q, a in enumerate(inputs)])
    at = np.concatenate([np.arange(len(a)) for a in inputs])
    order = np.argsort(flat, kind="stable")
    pos = np.clip(np.searchsorted(flat[order], values), 0, len(flat) - 1)
    found = flat[order][pos] == values
    return np.where(found, ranks[order][pos], -1), np.where(found, at[order][pos], -1)


def _finding(rank: int, kind: str, idx: np.ndarray, what: str, cause: str, where: str | None = None) -> dict:
    where = where or _ranges(idx)
    return {"rank": rank, "kind": kind, "count": int(len(idx)), "elements": _spans(idx),
            "text": f"rank {rank} {where} {what}", "cause": cause}


def _verdict(findings: list, most: int = 6) -> Verdict:
    """One line per finding (at most `most`), each followed by its likely cause, or findings that share a cause
    listed together with the cause once after them."""
    shown, groups = findings[:most], {}
    for f in shown:
        groups.setdefault(f["cause"], []).append(f["text"])
    lines = []
    for cause, texts in groups.items():
        lines += [f"{texts[0]}: {cause}"] if len(texts) == 1 else [*texts, f"  likely cause of these {len(texts)}: "
                                                                           f"{cause}"]
    if len(findings) > most:
        lines.append(f"... and {len(findings) - most} more findings (Verdict.details['findings'])")
    return Verdict(False, "\n".join(lines), {"findings": findings})


def _per_rank(arrays, name: str) -> list[np.ndarray]:
    try:
        out = [np.asarray(a) for a in arrays]
    except TypeError:
        raise ValueError(f"{name}: expected one array per rank, got {type(arrays).__name__}") from None
    if not out or any(a.ndim != 1 or not a.size for a in out):
        raise ValueError(f"{name}: expected one non-empty 1-D array per rank, got shapes {[a.shape for a in out]}")
    return out


def _equal(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    same = a == b
    return same | (np.isnan(a) & np.isnan(b)) if np.issubdtype(a.dtype, np.floating) else same


def _is(a: np.ndarray, value) -> np.ndarray:
    return np.isnan(a) if np.isnan(value) else a == value


def _spans(idx: np.ndarray) -> list[tuple[int, int]]:
    """Sorted indices as (first, last) runs of consecutive indices."""
    breaks = np.flatnonzero(np.diff(idx) != 1)
    return [(int(a), int(b)) for a, b in zip(np.r_[idx[0], idx[breaks + 1]], np.r_[idx[breaks], idx[-1]])]


def _ranges(idx: np.ndarray, most: int = 3) -> str:
    """'elements 0..1023, 2048' for sorted indices; at most `most` runs named."""
    spans = _spans(idx)
    text = ", ".join(f"{a}..{b}" if b > a else f"{a}" for a, b in spans[:most])
    more = f" and {len(spans) - most} more runs" if len(spans) > most else ""
    return f"{'element' if len(idx) == 1 else 'elements'} {text}{more}"


def _ranks(qs: list) -> str:
    """'rank 1', 'ranks 1 and 2', 'ranks 1, 2 and 3'."""
    return f"rank {qs[0]}" if len(qs) == 1 else f"ranks {', '.join(map(str, qs[:-1]))} and {qs[-1]}"


def _verb(idx, verb: str) -> str:
    return verb if len(idx) > 1 else verb + "s"


def _wrong(got: np.ndarray, want: np.ndarray, idx: np.ndarray) -> str:
    i = idx[0]
    return f"{_verb(idx, 'hold')} wrong values (element {i}: got {got[i]:g}, expected {want[i]:g})"


def _ring_offset(d: int, size: int) -> int:
    """`d` modulo `size`, as the signed step around the ring with the smallest magnitude."""
    d %= size
    return d - size if d > size // 2 else d


def _words(d: int) -> str:
    return "one" if abs(d) == 1 else str(d)


# --- the checks: compile, run on a team, diagnose ------------------------------------------------------------

def check_addressing(source: str, team=None) -> Verdict:
    """Step 1, unified addressing. `source` defines `gather_pull(const u64* table, float* out, u64 n, int size)`,
    launched on every rank (8 blocks of 256 threads, n = 5000). It must write out[q·n + i] = element i of rank
    q's buffer, reading it through its address table[q]."""
    return _check(source, ("gather_pull",), team, _run_addressing)


def check_copy(source: str, team=None) -> Verdict:
    """Step 2, a peer copy. `source` defines `push_next(const u64* table, const float* src, u64 n, int rank,
    int size)`, launched on every rank with 32 blocks of 256 threads for n = 24676 floats (more than one per
    thread). It must copy src into the next rank's buffer, table[(rank + 1) % size]."""
    return _check(source, ("push_next",), team, _run_copy)


def check_flag(source: str, team=None, rounds: int = 1000) -> Verdict:
    """Step 3, a flag that publishes data. `source` defines `produce(u32* data, u32* flag, const u32* ack, u64 n,
    u32 rounds)` (one block on rank 0) and `consume(const u32* data, const u32* flag, u32* ack, u32* seen, u64 n,
    u32 rounds)` (one block on rank 1), as in pkit/kernels/lesson_flag.cu, for `rounds` rounds of 4096 words. The
    verdict says in how many rounds the reader saw stale data (details: stale_fraction)."""
    if not (isinstance(rounds, (int, np.integer)) and 1 <= rounds <= 100_000):
        raise ValueError(f"rounds: expected an integer in [1, 100000], got {rounds!r}")
    return _check(source, ("produce", "consume"), team, lambda t, p, c: _run_flag(t, p, c, int(rounds)))


def check_barrier(source: str, team=None, trials: int = 20) -> Verdict:
    """Step 4, a barrier. `source` defines `exchange(const u64* box, const u64* flags, const float* in, float* out,
    u64 n, u32 epoch, int rank, int size)`, one block of 256 threads per rank, n = 65536, a new epoch per trial. It
    must push `in` into slot `rank` of every rank's box, meet the others at a barrier, then copy its own box to
    `out`; every slot must hold its rank's data, in each of `trials` trials. Trial t holds rank t mod size back
    by LATE_START_NS, so a missing wait shows whatever the GPUs' own timing (on one shared GPU the ranks would
    otherwise run in step and hide it)."""
    _check_count("trials", trials)
    return _check(source, ("exchange",), team, lambda t, k: _run_barrier(t, k, int(trials)))


def check_ring(source: str, team=None, trials: int = 3) -> Verdict:
    """Step 5, a ring all-reduce. `source` defines `ring_step(const u64* inp, const u64* out, const u64* flags,
    u64 chunk, int step, int rank, int size)`, launched for steps 0 .. 2·size − 3 back to back, one block of 256
    threads per rank, chunk = 5000 floats. Each rank's out must end as the sum of every rank's inp (integer-valued
    floats, so sums are exact), in each of `trials` trials."""
    _check_count("trials", trials)
    return _check(source, ("ring_step",), team, lambda t, k: _run_ring(t, k, int(trials)))


def check_overlap(source: str, team=None, trials: int = 5) -> Verdict:
    """Step 6, compute on chunks as they land. `source` defines `consume_chunks(const float* rows, const u32* ready,
    float* out, u64 chunk, u32 epoch)`, launched with one block per chunk (16 chunks of 65536 floats) while
    lesson_overlap.cu's `send_chunks` pushes the previous rank's rows into `rows` on a side stream, releasing
    ready[k] = epoch after chunk k. out must be 2 · rows, in each of `trials` trials."""
    _check_count("trials", trials)
    return _check(source, ("consume_chunks",), team, lambda t, k: _run_overlap(t, k, int(trials)))


def _check_count(name: str, value) -> None:
    if not (isinstance(value, (int, np.integer)) and 1 <= value <= 1000):
        raise ValueError(f"{name}: expected an integer in [1, 1000], got {value!r}")


def _check(source: str, names: tuple, team, run: Callable) -> Verdict:
    """Compile `names` from `source`; run them with `run(team, *kernels)` when there is a team to run on."""
    if not isinstance(source, str) or not source.strip():
        raise ValueError(f"source: expected the kernel's CUDA source as a string, got {type(source).__name__}")
    if team is not None and (team.rank is not None or team.size < 2):
        raise ValueError(f"team: expected a one-process pkit.Team of at least 2 ranks, got {team!r}")
    live = team is not None or _gpu_count() >= 1
    try:
        kernels = [compile(source, name, arch=None if live else "sm_90a") for name in names]
    except CompileError as e:
        return Verdict(False, f"the source does not compile: {e}", {"compiled": False})
    except ValueError as e:  # a kernel the check launches is missing
        return Verdict(False, f"{e} (the check launches {', '.join(names)})", {"compiled": False})
    if not live:
        return Verdict(None, f"compiled {', '.join(names)} for sm_90a; not run: this machine has no GPU (with one, "
                             "two ranks share it; with two or more, each GPU is a rank)", {"compiled": True})
    import cupy as cp

    team = team or _default_team()
    try:
        for kernel in kernels:  # load before any launch: loading a module waits for the GPU's running kernels, and
            for device in set(team.devices):  # with ranks sharing a GPU those wait for the kernel being loaded
                kernel.on(device)
        return run(team, *kernels)
    except PeerTimeout as e:
        return Verdict(False, f"{e}\nA wait never saw its flag: does every rank signal each flag another rank waits "
                              "for, with the value it waits for?", {"timeout": True})
    except (cp.cuda.runtime.CUDARuntimeError, cp.cuda.driver.CUDADriverError) as e:
        return Verdict(False, f"the kernel failed on the GPU ({e}): an access out of bounds? The CUDA context of this "
                              "process is now unusable: restart it (or the notebook kernel)", {"crashed": True})


def _gpu_count() -> int:
    from .gpus import devices

    return len(devices())


@lru_cache(maxsize=1)
def _default_team():
    """Every GPU of the machine, one rank each, where there are two or more; else two ranks sharing GPU 0 (the
    lesson's kernels are small enough)."""
    from .team import default_team

    return default_team(shared_ranks=2)


def _unique_inputs(rng, size: int, n: int) -> list[np.ndarray]:
    """`size` arrays of `n` float32 values, all distinct across ranks (1 .. size·n, shuffled; exact in float32), so
    a wrong value can be traced to the element it came from."""
    values = (rng.permutation(size * n) + 1).astype(np.float32)
    return [values[q * n:(q + 1) * n] for q in range(size)]


def _put(array, host: list) -> None:
    import cupy as cp

    for r, values in enumerate(host):
        with cp.cuda.Device(array.team.devices[r]):
            array[r][:] = cp.asarray(values)


def _get(array) -> list[np.ndarray]:
    import cupy as cp

    return [cp.asnumpy(array[r]) for r in range(array.team.size)]


def _trials(trials: int, one: Callable[[int], Verdict], what: str) -> Verdict:
    """Run `one(t)` for t = 0 .. trials − 1; the first wrong verdict, with how many trials were wrong."""
    verdicts = [one(t) for t in range(trials)]
    wrong = [v for v in verdicts if not v.ok]
    if not wrong:
        return Verdict(True, f"{what} in all {trials} trials", {"trials": trials, "wrong_trials": 0})
    return Verdict(False, f"wrong in {len(wrong)} of {trials} trials; the first:\n{wrong[0].message}",
                   {**wrong[0].details, "trials": trials, "wrong_trials": len(wrong)})


def _run_addressing(team, kernel, n: int = 5000, blocks: int = 8) -> Verdict:
    size, rng = team.size, np.random.default_rng()
    inp, out = team.empty((n,)), team.empty((size * n,))
    inputs = _unique_inputs(rng, size, n)
    _put(inp, inputs)
    out.fill(np.nan)
    team.synchronize()
    team.launch(kernel, (blocks,), (THREADS,), lambda r: (inp.table(r), out[r], np.uint64(n), np.int32(size)))
    team.synchronize()
    return diagnose_copy(_get(out), [np.concatenate(inputs)] * size, inputs=inputs)


def _run_copy(team, kernel, n: int = 3 * 8192 + 100, blocks: int = 32) -> Verdict:
    size, rng = team.size, np.random.default_rng()
    inp, out = team.empty((n,)), team.empty((n,))
    inputs = _unique_inputs(rng, size, n)
    _put(inp, inputs)
    out.fill(np.nan)
    team.synchronize()
    team.launch(kernel, (blocks,), (THREADS,),
                lambda r: (out.table(r), inp[r], np.uint64(n), np.int32(r), np.int32(size)))
    team.synchronize()
    grid = (f"the kernel never wrote them — is the grid covering n? ({blocks} blocks × {THREADS} threads = "
            f"{blocks * THREADS} threads for n = {n}: loop with a grid stride)")
    return diagnose_copy(_get(out), [inputs[(r - 1) % size] for r in range(size)], inputs=inputs,
                         causes={"unwritten_tail": grid})


def _run_flag(team, produce, consume, rounds: int, n: int = 4096) -> Verdict:
    import cupy as cp

    data, flag, ack = team.zeros((n,), "uint32"), team.zeros((1,), "uint32"), team.zeros((1,), "uint32")
    seen = team.empty((rounds * n,), "uint32").fill(np.uint32(UNWRITTEN_WORD))
    team.synchronize()
    produce((1,), (THREADS,), (np.uint64(data.addresses[0][1]), np.uint64(flag.addresses[0][1]), ack[0], np.uint64(n),
                               np.uint32(rounds)), device=team.devices[0], stream=team.stream(0))
    consume((1,), (THREADS,), (data[1], flag[1], np.uint64(ack.addresses[1][0]), seen[1], np.uint64(n),
                               np.uint32(rounds)), device=team.devices[1], stream=team.stream(1))
    team.synchronize()
    return diagnose_flag(cp.asnumpy(seen[1]).reshape(rounds, n))


BARRIER_CAUSES = {"unwritten": "the rank read its box before those stores arrived — does it wait (pkit::wait_until) "
                               "for every rank's signal, and does every rank signal (pkit::signal) only after its "
                               "stores?"}


def _run_barrier(team, kernel, trials: int, n: int = 1 << 16) -> Verdict:
    late = compile("spin.cu", "spin_ns")
    size, rng = team.size, np.random.default_rng()
    box, out, inp = team.empty((size * n,)), team.empty((size * n,)), team.empty((n,))
    flags = team.zeros((size,), "uint32")

    def one(t: int) -> Verdict:
        inputs = _unique_inputs(rng, size, n)
        _put(inp, inputs)
        box.fill(np.nan)
        out.fill(np.nan)
        team.synchronize()
        held = t % size
        late((1,), (1,), (np.uint64(LATE_START_NS),), device=team.devices[held], stream=team.stream(held))
        team.launch(kernel, (1,), (THREADS,), lambda r: (box.table(r), flags.table(r), inp[r], out[r], np.uint64(n),
                                                         np.uint32(t + 1), np.int32(r), np.int32(size)))
        team.synchronize()
        return diagnose_copy(_get(out), [np.concatenate(inputs)] * size, inputs=inputs, causes=BARRIER_CAUSES)

    return _trials(trials, one, "every rank read every rank's slot after the barrier")


def _run_ring(team, kernel, trials: int, chunk: int = 5000) -> Verdict:
    size, rng = team.size, np.random.default_rng()
    inp, out = team.empty((size * chunk,)), team.empty((size * chunk,))
    flags = team.zeros((size + 1,), "uint32")

    def one(t: int) -> Verdict:
        inputs = [rng.integers(-1000, 1001, size * chunk).astype(np.float32) for _ in range(size)]
        _put(inp, inputs)
        out.fill(np.nan)
        team.synchronize()
        for step in range(2 * (size - 1)):
            team.launch(kernel, (1,), (THREADS,), lambda r, step=step: (inp.table(r), out.table(r), flags.table(r),
                                                                        np.uint64(chunk), np.int32(step), np.int32(r),
                                                                        np.int32(size)))
        team.synchronize()
        return diagnose_ring(_get(out), inputs)

    return _trials(trials, one, "every rank holds the sum of all inputs")


OVERLAP_CAUSES = {"unwritten": "they were computed from rows that had not landed — wait for the chunk's flag "
                               "(pkit::wait_until(ready + k, epoch)) before reading it"}


def _run_overlap(team, consume, trials: int, chunks: int = 16, chunk: int = 1 << 16) -> Verdict:
    import cupy as cp

    from .gpus import on_device

    send = compile("lesson_overlap.cu", "send_chunks")  # loaded by its first launch, before any consumer runs
    size, rng = team.size, np.random.default_rng()
    x, rows, out = (team.empty((chunks * chunk,)) for _ in range(3))
    ready = team.zeros((chunks,), "uint32")
    side = [on_device(d, lambda: cp.cuda.Stream(non_blocking=True)) for d in team.devices]

    def one(t: int) -> Verdict:
        inputs = _unique_inputs(rng, size, chunks * chunk)
        _put(x, inputs)
        rows.fill(np.nan)
        out.fill(np.nan)
        team.synchronize()
        for r in range(size):  # senders first, on side streams: a receiver never waits on work queued behind it
            nxt = (r + 1) % size
            send((1,), (THREADS,), (np.uint64(rows.addresses[r][nxt]), x[r], np.uint64(ready.addresses[r][nxt]),
                                    np.uint64(chunk), np.int32(chunks), np.uint32(t + 1)),
                 device=team.devices[r], stream=side[r])
        team.launch(consume, (chunks,), (THREADS,), lambda r: (rows[r], ready[r], out[r], np.uint64(chunk),
                                                               np.uint32(t + 1)))
        team.synchronize()
        want = [2 * inputs[(r - 1) % size] for r in range(size)]
        return diagnose_copy(_get(out), want, causes=OVERLAP_CAUSES)

    return _trials(trials, one, "every chunk was computed after it landed")


# --- the steps, solutions, recorded results and the overlap timeline --------------------------------------------

@dataclass(frozen=True)
class Step:
    """One step of the lesson: its key, title, the kernels a learner's source defines, and its check."""

    name: str
    title: str
    kernels: tuple[str, ...]
    check: Callable

    @property
    def solution(self) -> str:
        """The reference kernel source, pkit/kernels/lesson_<name>.cu."""
        return (KERNEL_DIR / f"lesson_{self.name}.cu").read_text()


STEPS = {s.name: s for s in (
    Step("addressing", "unified addressing and peer access", ("gather_pull",), check_addressing),
    Step("copy", "a first peer-copy kernel", ("push_next",), check_copy),
    Step("flag", "a flag needs release/acquire ordering", ("produce", "consume"), check_flag),
    Step("barrier", "signal/wait and a barrier", ("exchange",), check_barrier),
    Step("ring", "a ring all-reduce", ("ring_step",), check_ring),
    Step("overlap", "compute on chunks as they land", ("consume_chunks",), check_overlap),
)}


def solution(step: str) -> str:
    """The reference kernel source of `step` (a key of STEPS).

    >>> "push_next" in solution("copy")
    True
    """
    return lookup(STEPS, step, "step").solution


def recorded(experiment: str, machine: str):
    """(frame, where it was measured) of a recorded result (`pkit.results.load`), or (None, a line saying that
    nothing is recorded under that name).

    >>> frame, where = recorded("quickstart", "h200x2-nv18")
    >>> where.startswith("recorded on h200x2-nv18"), recorded("no_such_study", "h200x2-nv18")
    (True, (None, "nothing recorded as 'no_such_study' for 'h200x2-nv18'"))
    """
    from .results import describe, load

    try:
        run = load(experiment, machine)
    except PkitError:
        return None, f"nothing recorded as {experiment!r} for {machine!r}"
    return run.frame, f"recorded on {describe(run.provenance)}"


def draw_timeline(frame, ax=None):
    """Draw a `pkit.experiments.overlap.timeline` frame (rank, kind, start_us, end_us) as bars: one lane per rank
    and kind, copies in the copy engine's orange, GEMMs in blue; returns the axes.

    >>> import matplotlib; matplotlib.use("Agg"); import pandas as pd
    >>> ax = draw_timeline(pd.DataFrame({"rank": [0, 0], "kind": ["copy", "gemm"], "start_us": [0.0, 5.0],
    ...                                  "end_us": [4.0, 9.0]}))
    >>> [t.get_text() for t in ax.get_yticklabels()]
    ['GPU 0 copy', 'GPU 0 gemm']
    """
    from . import figures

    missing = {"rank", "kind", "start_us", "end_us"} - set(frame.columns)
    if missing:
        raise ValueError(f"frame: expected timeline's columns, missing {sorted(missing)}")
    lanes = list(frame.groupby(["rank", "kind"]))
    if ax is None:
        _, ax = figures.subplots(figsize=(7.0, 1.0 + 0.5 * len(lanes)))
    colors = {"copy": figures.ORANGE, "gemm": figures.BLUE}
    for i, ((_, kind), rows) in enumerate(lanes):
        ax.broken_barh(list(zip(rows["start_us"], rows["end_us"] - rows["start_us"])), (i - 0.4, 0.8),
                       color=colors.get(kind, figures.GREY))
    ax.set_yticks(range(len(lanes)), [f"GPU {rank} {kind}" for (rank, kind), _ in lanes])
    ax.set_xlabel("time since the rank's first event (µs)")
    ax.grid(axis="y", visible=False)
    return ax
