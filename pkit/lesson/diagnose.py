"""What is wrong with a lesson kernel's outputs, in plain NumPy (runs and is tested anywhere, no GPU).

`diagnose_copy` (steps 1, 2, 4 and 6: each rank's output against the expected one, traced to the input elements
it holds), `diagnose_flag` (step 3: stale rounds behind a flag) and `diagnose_ring` (step 5: each chunk of an
all-reduce as a combination of the inputs' chunks) each return a `Verdict` naming the rank, the elements and a
likely cause.

Example:
    >>> want = [np.arange(8, dtype=np.float32)] * 2
    >>> got = [want[0], np.r_[want[1][:4], [np.nan] * 4].astype(np.float32)]
    >>> print(diagnose_copy(got, want))
    ✗ rank 1 elements 4..7 still hold the poison value (nan): the kernel never wrote them — is the grid covering n?
"""
from __future__ import annotations

import math

import numpy as np

from .verdict import Verdict, finding, from_findings, ranges

UNWRITTEN_WORD = 0xFFFFFFFF  # what check_flag's `seen` holds where the reader never copied a word

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
            findings.append(finding(r, kind, idx, f"still {_verb(idx, 'hold')} the poison value ({poison})",
                                    causes[kind]))
        rest = np.flatnonzero(bad & ~unwritten)
        if len(rest):
            findings += _misplaced(r, rest, g, w, inputs, causes, len(got))
    if not findings:
        return Verdict(True, f"all {len(got)} ranks hold the expected {len(want[0])} elements")
    return from_findings(findings)


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
                     f"{seen.size} words; first in round {k + 1}: {ranges(np.flatnonzero(stale[k]))} still held "
                     f"{held}): the data store is not ordered before the flag (use pkit::signal / release), or the "
                     "reader's loads are not ordered after it (use pkit::wait_until / acquire)")
    if ahead.any():
        k = int(np.flatnonzero(ahead.any(axis=1))[0])
        lines.append(f"round {k + 1}: {ranges(np.flatnonzero(ahead[k]))} held a later round's values: the writer "
                     "overwrote the data before the reader was done — does it wait for the reader's acknowledgement?")
    if skipped.any():
        k = int(np.flatnonzero(skipped.any(axis=1))[0])
        idx = np.flatnonzero(skipped[k])
        lines.append(f"round {k + 1}: {ranges(idx)} {'were' if len(idx) > 1 else 'was'} never copied into `seen`: "
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
                findings.append(finding(r, "unwritten", unwritten, f"still {_verb(unwritten, 'hold')} the poison "
                                        f"value ({poison})", RING_UNWRITTEN, where=f"chunk {c} {ranges(unwritten)}"))
            elif len(bad):
                coef = _combination(basis, got[c], atol, chunk >= size * size)
                where = f"chunk {c} (elements {c * chunk}..{(c + 1) * chunk - 1})"
                findings.append(_ring_finding(r, c, where, c * chunk + bad, coef, got[c][bad[0]], want[c][bad[0]],
                                              size))
    if not findings:
        return Verdict(True, f"every rank holds the sum of all {size} inputs ({n} elements)")
    return from_findings(findings)


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
        return finding(r, "wrong", idx, f"holds values that are no sum of inputs (element {idx[0]}: got {got:g}, "
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
        return finding(r, "coefficients", idx, " and ".join(terms), cause, where=where)
    if len(chunks) == 1 and (coef[:, chunks[0]] == 1).all():
        return finding(r, "other_chunk", idx, f"holds chunk {chunks[0]}'s sum",
                       f"the chunk index is off by {_words(_ring_offset(chunks[0] - c, size))}", where=where)
    return finding(r, "mixed_chunks", idx, f"mixes inputs of chunks {chunks}",
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
                findings.append(finding(r, "other_rank", idx[same], f"{verb} {whose} data{shift} where rank {q}'s was "
                                        "expected", causes["other_rank"].format(off=off)))
            else:
                findings.append(finding(r, "shifted", idx[same], f"{verb} the values expected {abs(d_at)} "
                                        f"element{'s' * (abs(d_at) > 1)} {'further on' if d_at > 0 else 'earlier'}",
                                        causes["shifted"].format(off=_words(d_at))))
            idx = idx[~same]
    if len(idx):
        findings.append(finding(r, "wrong", idx, _wrong(got, want, idx), causes["wrong"]))
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

