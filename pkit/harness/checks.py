"""Is one rank's candidate output right? Compare it with the reference output and look for tricks.

Runs in the evaluating process on what the workers saved (pkit.harness.snapshot), never inside a
candidate's process. Outputs are a tensor or nested tuples/lists/dicts of tensors and plain values. Tensors
must be plain `torch.Tensor`s (a subclass fails with `tensor_subclass`) and match the reference in
structure, device, dtype and shape, and element-wise within the dtype's tolerances (`pkit.tolerance`:
`|got - expected| <= atol + rtol * |expected|`, NaN equal to NaN; fp8 compared in float32, complex as
(real, imag) pairs, sparse tensors densified); integer and bool tensors must match exactly. Inputs the
reference updates in place (its contract) must match the reference's updated inputs (`inplace_result`);
every other input, tensor or not, must come back unchanged (`mutated_input`). Flags name what else went
wrong (see `pkit.harness.records.FLAGS`).

Example:
    >>> import torch
    >>> from pkit.harness.checks import compare
    >>> x = torch.ones(4)
    >>> c = compare(x * 2, torch.zeros(4), pristine=(x,), sol_inputs=(x,))
    >>> c.ok, c.flags, c.mismatch_fraction
    (False, ['all_zero'], 1.0)
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import torch

from ..tolerance import tolerance
from .snapshot import Snapshot, decode, encode


def leaves(obj, path: str = "out") -> list[tuple[str, object]]:
    """(path, leaf) pairs of a nested output or input, e.g. ('out[1]', tensor); dict keys sorted."""
    if isinstance(obj, (tuple, list)):
        return [leaf for i, child in enumerate(obj) for leaf in leaves(child, f"{path}[{i}]")]
    if isinstance(obj, dict):
        return [leaf for k in sorted(obj, key=str) for leaf in leaves(obj[k], f"{path}[{k!r}]")]
    return [(path, obj)]


def describe(obj) -> str:
    """A short structure description such as 'tuple(Tensor[4, 8] bfloat16, int)'."""
    if isinstance(obj, torch.Tensor):
        return f"Tensor{list(obj.shape)} {str(obj.dtype).removeprefix('torch.')}"
    if isinstance(obj, (tuple, list)):
        return f"{type(obj).__name__}({', '.join(describe(c) for c in obj)})"
    if isinstance(obj, dict):
        return "dict(" + ", ".join(f"{k}: {describe(obj[k])}" for k in sorted(obj, key=str)) + ")"
    return type(obj).__name__


def clone_tree(obj):
    """A copy of nested inputs in which every tensor is a fresh clone; other values are shared."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, (tuple, list)):
        return type(obj)(clone_tree(c) for c in obj)
    if isinstance(obj, dict):
        return {k: clone_tree(v) for k, v in obj.items()}
    return obj


@dataclass
class RankCheck:
    """The verdict on one rank's output: errors (abs; rel to max(|expected|, atol)), where it first broke."""

    ok: bool
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    mismatch_fraction: float | None = None
    first_bad_index: list | None = None
    note: str | None = None
    flags: list = field(default_factory=list)

    def to_dict(self, rank: int) -> dict:
        return {"rank": rank, **asdict(self)}


@dataclass
class _Tally:
    bad: int = 0
    total: int = 0
    max_abs: float = 0.0
    max_rel: float = 0.0
    first: list | None = None
    notes: list = field(default_factory=list)
    flags: set = field(default_factory=set)

    def fail(self, flag: str | None, note: str, elements: int = 1) -> None:
        if flag:
            self.flags.add(flag)
        self.notes.append(note)
        self.bad += elements
        self.total += elements


def aliased_paths(out, inputs) -> list[str]:
    """Paths of output tensors that share storage with an input tensor (in the process that made them)."""
    def storage(t):
        try:
            return t.untyped_storage().data_ptr() if t.numel() else None
        except (RuntimeError, NotImplementedError):
            return None
    held = {storage(t) for _, t in leaves(inputs, "input") if isinstance(t, torch.Tensor)} - {None}
    return [p for p, t in leaves(out) if isinstance(t, torch.Tensor) and storage(t) in held]


def _snap(value, root: str) -> Snapshot:
    """A Snapshot of a value: decoded from a worker's file already, or made from live objects (tests)."""
    if value is None or isinstance(value, Snapshot):
        return value
    return decode(encode(value), root)


COMPARE_CHUNK = 1 << 22  # elements per pass of _compare_tensor


def compare(ref_out, sol_out, *, pristine=None, ref_inputs=None, sol_inputs=None, inplace=(),
            ref_aliases=None, sol_aliases=None, atol: float | None = None, rtol: float | None = None,
            summands: int = 1) -> RankCheck:
    """Check `sol_out` against `ref_out` (Snapshots, or live values); inputs let it spot mutation and tricks.

    `pristine` holds the inputs before any call; `ref_inputs`/`sol_inputs` the reference's and the
    candidate's inputs after their calls; `inplace` the input paths ('input[0]') the reference updates in
    place. `ref_aliases`/`sol_aliases` list output paths that shared storage with an input (as the worker
    saw them; computed here for live values). `summands` > 1: the floating outputs (and in-place updates) are
    sums of that many terms rounded in their dtype, such as sums over the ranks
    (`pkit.tolerance.rank_sum_factor`).
    """
    if sol_aliases is None and sol_inputs is not None and not isinstance(sol_out, Snapshot):
        sol_aliases = aliased_paths(sol_out, sol_inputs)
    if ref_aliases is None and ref_inputs is not None and not isinstance(ref_out, Snapshot):
        ref_aliases = aliased_paths(ref_out, ref_inputs)
    ref, sol = _snap(ref_out, "out"), _snap(sol_out, "out")
    clean, ref_in, sol_in = _snap(pristine, "input"), _snap(ref_inputs, "input"), _snap(sol_inputs, "input")
    tally = _Tally()
    for path, kind in sol.subclasses.items():
        tally.fail("tensor_subclass", f"{path}: a {kind}, expected a plain torch.Tensor")
    ref_leaves, sol_leaves = leaves(ref.value), leaves(sol.value)
    same_layout = [p for p, _ in ref_leaves] == [p for p, _ in sol_leaves] and all(
        isinstance(r, torch.Tensor) == isinstance(s, torch.Tensor) for (_, r), (_, s) in zip(ref_leaves, sol_leaves))
    if not same_layout:
        tally.fail("wrong_structure", f"output structure: expected {describe(ref.value)}, got {describe(sol.value)}")
    else:
        clean_tensors = [t for _, t in leaves(clean.value)] if clean is not None else []
        for (path, r), (_, s) in zip(ref_leaves, sol_leaves):
            if isinstance(r, torch.Tensor):
                devices = (sol.devices.get(path), ref.devices.get(path))
                if _compare_tensor(path, r, s, devices, tally, atol, rtol, summands):
                    _trick_flags(path, r, s, clean_tensors, set(ref_aliases or ()), set(sol_aliases or ()), tally)
            else:
                _compare_value(path, r, s, tally, atol, rtol)
    if clean is not None and sol_in is not None:
        _check_inputs(clean, ref_in, sol_in, set(inplace), tally, atol, rtol, summands)
    return RankCheck(
        ok=not tally.notes, max_abs_err=tally.max_abs, max_rel_err=tally.max_rel,
        mismatch_fraction=(tally.bad / tally.total) if tally.total else 0.0, first_bad_index=tally.first,
        note="; ".join(tally.notes)[:1000] or None, flags=sorted(tally.flags))


def comparable(t: torch.Tensor) -> torch.Tensor:
    """`t` in a form arithmetic works on: dense, fp8 widened to float32, complex as (real, imag) pairs."""
    t = t.detach()
    if t.layout != torch.strided:
        t = t.to_dense()
    if t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2) or str(t.dtype).startswith("torch.float8"):
        t = t.to(torch.float32)
    if t.dtype.is_complex:
        t = torch.view_as_real(t.resolve_conj())
    return t


def _compare_tensor(path: str, r: torch.Tensor, s: torch.Tensor, devices, tally: _Tally, atol, rtol,
                    summands: int = 1) -> bool:
    """Compare values into `tally`; False when kind (device, dtype, shape, layout) already differs."""
    for flag, got, want in (("wrong_device", devices[0], devices[1]), ("wrong_dtype", s.dtype, r.dtype),
                            ("wrong_shape", tuple(s.shape), tuple(r.shape)), ("wrong_layout", s.layout, r.layout)):
        if got != want:
            tally.fail(flag, f"{path}: {flag.removeprefix('wrong_')} {got}, expected {want}", max(r.numel(), 1))
            return False
    if r.numel() == 0:
        return True
    a_tol, r_tol = tolerance(r.dtype, atol, rtol, summands)
    want, got = comparable(r), comparable(s)
    shape, want, got = want.shape, want.reshape(-1), got.reshape(-1)
    floating = want.dtype.is_floating_point
    # float32 holds every narrower float exactly and resolves any tolerance of theirs; float64 and integers go wide
    work = torch.float32 if floating and want.dtype != torch.float64 else torch.float64
    bad, first = 0, None
    for start in range(0, want.numel(), COMPARE_CHUNK):  # a chunk at a time: bounded memory, cache-sized passes
        w_chunk, g_chunk = want[start:start + COMPARE_CHUNK], got[start:start + COMPARE_CHUNK]
        w, g = w_chunk.to(work), g_chunk.to(work)
        if floating:
            close = torch.isclose(g, w, rtol=r_tol, atol=a_tol, equal_nan=True)
            finite_w, finite_g = torch.isfinite(w), torch.isfinite(g)
            diff = torch.where(finite_w & finite_g, (g - w).abs(), torch.zeros((), dtype=work))
            if bool((finite_w & ~finite_g).any()):
                tally.flags.add("non_finite")
        else:
            close = w_chunk == g_chunk
            diff = (g - w).abs()
        tally.max_abs = max(tally.max_abs, float(diff.max()))
        tally.max_rel = max(tally.max_rel, float((diff / w.abs().clamp_min(max(a_tol, 1e-30))).max()))
        wrong = int((~close).sum())
        if wrong and first is None:
            first = start + int(torch.argmax((~close).to(torch.uint8)))
        bad += wrong
    tally.total += want.numel()
    if bad:
        tally.bad += bad
        index = _unravel(first, shape)
        if tally.first is None:
            tally.first = index
        tally.notes.append(f"{path}: {bad} of {want.numel()} elements differ beyond atol={a_tol:g} rtol={r_tol:g}; "
                           f"first at {list(index)}: got {float(got[first])!r}, expected {float(want[first])!r}")
    return True


FINGERPRINT_CHUNKS = 16


def chunk_rows(t: torch.Tensor) -> torch.Tensor:
    """`t`'s elements (as `comparable`; integers and bools as float64) in FINGERPRINT_CHUNKS rows of equal length,
    zero-padded. Floating elements keep their dtype: `_chunk_stats` sums them in float64 without a float64 copy."""
    flat = comparable(t).reshape(-1)
    if not flat.dtype.is_floating_point:
        flat = flat.to(torch.float64)
    width = -(-flat.numel() // FINGERPRINT_CHUNKS)
    if flat.numel() < FINGERPRINT_CHUNKS * width:
        flat = torch.nn.functional.pad(flat, (0, FINGERPRINT_CHUNKS * width - flat.numel()))
    return flat.view(FINGERPRINT_CHUNKS, width)


def _chunk_stats(t: torch.Tensor) -> tuple[list, list, list]:
    """Per chunk of `chunk_rows(t)`: its sum in float64 (NaNs left out), its NaN count and the float64 sum of its
    magnitudes, computed on `t`'s device and copied to the host at once. Two reductions where every chunk's sum is
    finite (no NaN to leave out or count); where one is not, the NaN-aware ones, an elementwise pass each."""
    rows = chunk_rows(t)
    wide = torch.float64
    sums, magnitudes = torch.stack((rows.sum(1, dtype=wide),
                                    torch.linalg.vector_norm(rows, 1, dim=1, dtype=wide))).tolist()
    if all(map(math.isfinite, sums)):
        return sums, [0] * len(sums), magnitudes
    sums, nans, magnitudes = torch.stack((rows.nansum(1, dtype=wide), rows.isnan().sum(1).to(wide),
                                          rows.abs().nansum(1, dtype=wide))).tolist()
    return sums, [int(n) for n in nans], magnitudes


def fingerprint(out) -> list:
    """A short summary of an output that a wrong answer can hardly match: per tensor leaf, the float64 sums
    and NaN counts of 16 consecutive chunks of its elements (computed on the tensor's device); other leaves
    by repr. JSON-able; see `FingerprintCheck`."""
    return fingerprint_check(out)["want"]


def fingerprint_check(expected, atol: float | None = None, rtol: float | None = None, summands: int = 1) -> dict:
    """What `FingerprintCheck` needs to know about a right answer `expected` (on any device; JSON-able and
    small, so a reference worker can compute it beside its output and send it): per leaf its path, its
    fingerprint (`want`, as `fingerprint`) and, per chunk, how far the chunk sum of an output within tolerance can
    be from it.

    Element-wise |g - w| <= atol + rtol*|w| implies, per chunk, |sum g - sum w| <= sum(atol + rtol*|w|).
    """
    paths, want, bounds = [], [], []
    for path, leaf in leaves(expected):
        paths.append(path)
        if isinstance(leaf, torch.Tensor):
            a_tol, r_tol = tolerance(leaf.dtype, atol, rtol, summands)
            sums, nans, magnitudes = _chunk_stats(leaf)
            want.append({"n": leaf.numel(), "sums": sums, "nans": nans})
            elements = leaf.numel() * (2 if leaf.is_complex() else 1)  # as `comparable`
            width = -(-elements // FINGERPRINT_CHUNKS)
            counts = [min(max(elements - c * width, 0), width) for c in range(FINGERPRINT_CHUNKS)]
            bounds.append([(a_tol * n + r_tol * m) * (1 + 1e-9) + 1e-12 for n, m in zip(counts, magnitudes)])
        else:
            want.append(repr(leaf)[:200])
            bounds.append(None)
    return {"paths": paths, "want": want, "bounds": bounds}


class FingerprintCheck:
    """Can a fingerprint (`fingerprint`) belong to an output within tolerance of the right answer described by
    `fingerprint_check(expected, atol, rtol)`? A right answer never fails this; a wrong one fails unless its
    errors cancel chunk by chunk.

    Example:
        >>> right = torch.arange(64, dtype=torch.float32)
        >>> check = FingerprintCheck(fingerprint_check(right))
        >>> check.mismatch(fingerprint(right + 1e-7)) is None, check.mismatch(fingerprint(torch.zeros(64))) is None
        (True, False)
    """

    def __init__(self, summary: dict):
        self.paths, self.want, self.bounds = summary["paths"], summary["want"], summary["bounds"]

    def mismatch(self, got) -> str | None:
        """Why `got` cannot be the fingerprint of a right answer (None: it can)."""
        if not isinstance(got, list) or len(got) != len(self.want):
            return f"a fingerprint of {len(got) if isinstance(got, list) else '?'} leaves, expected {len(self.want)}"
        for path, w, g, bounds in zip(self.paths, self.want, got, self.bounds):
            if bounds is None:
                if g != w:
                    return f"{path}: {g!r}, expected {w!r}"
                continue
            if not isinstance(g, dict) or g.get("n") != w["n"] or len(g.get("sums") or ()) != len(w["sums"]):
                return f"{path}: a fingerprint of another shape"
            for c, bound in enumerate(bounds):
                sum_g, sum_w = g["sums"][c], w["sums"][c]
                if (g["nans"][c] != w["nans"][c] or not isinstance(sum_g, (int, float))
                        or (not math.isfinite(sum_g) and math.isfinite(sum_w))
                        or abs(sum_g - sum_w) > bound):
                    return (f"{path}: chunk {c + 1}/{FINGERPRINT_CHUNKS} of the output sums to {sum_g!r}, expected "
                            f"{sum_w!r} ± {bound:.3g}")
        return None


def _compare_value(path: str, r, s, tally: _Tally, atol, rtol) -> None:
    tally.total += 1
    if isinstance(r, float) and isinstance(s, (int, float)) and not isinstance(s, bool):
        a_tol, r_tol = tolerance(torch.float64, atol, rtol)
        same = math.isclose(s, r, rel_tol=r_tol, abs_tol=a_tol) or (math.isnan(r) and math.isnan(s))
    else:
        same = type(s) is type(r) and s == r
    if not same:
        tally.bad += 1
        tally.notes.append(f"{path}: got {s!r}, expected {r!r}")


def _trick_flags(path: str, r: torch.Tensor, s: torch.Tensor, clean, ref_aliases, sol_aliases, tally: _Tally) -> None:
    if s.numel() == 0:
        return
    if path in sol_aliases and path not in ref_aliases:
        tally.flags.add("aliases_input")
    if not bool(comparable(s).ne(0).any()) and bool(comparable(r).ne(0).any()):
        tally.flags.add("all_zero")
    for t in clean:
        if isinstance(t, torch.Tensor) and same_values(s, t) and not same_values(r, t):
            tally.flags.add("equals_input")
            break


def same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same shape, dtype, layout and values (NaN equal to NaN)."""
    if a.shape != b.shape or a.dtype != b.dtype or a.layout != b.layout:
        return False
    a, b = comparable(a), comparable(b)
    if torch.equal(a, b):
        return True
    if not a.dtype.is_floating_point:
        return False
    a, b = a.reshape(-1), b.reshape(-1)
    for start in range(0, a.numel(), COMPARE_CHUNK):  # NaN equals NaN; stop at the first chunk that differs
        x, y = a[start:start + COMPARE_CHUNK], b[start:start + COMPARE_CHUNK]
        if bool(((x != y) & ~(x.isnan() & y.isnan())).any()):
            return False
    return True


def _check_inputs(clean: Snapshot, ref_in: Snapshot | None, sol_in: Snapshot, inplace: set, tally: _Tally,
                  atol, rtol, summands: int = 1) -> None:
    """Inputs in `inplace` must match the reference's updated values; all others must be unchanged."""
    before = dict(leaves(clean.value, "input"))
    after = dict(leaves(sol_in.value, "input"))
    expected = dict(leaves(ref_in.value, "input")) if ref_in is not None else {}
    if list(before) != list(after):
        tally.fail("mutated_input", f"the inputs' structure changed: {describe(clean.value)} became "
                                    f"{describe(sol_in.value)} (inputs are read-only)")
        return
    for path, was in before.items():
        now = after[path]
        if path in inplace and path in expected:
            want = expected[path]
            if isinstance(want, torch.Tensor) and isinstance(now, torch.Tensor):
                sub = _Tally()
                if not _compare_tensor(path, want, now, ("", ""), sub, atol, rtol, summands) or sub.notes:
                    tally.fail("inplace_result", f"{path} (updated in place by the reference) differs: "
                                                 + "; ".join(sub.notes)[:300])
            elif not (type(now) is type(want) and now == want):
                tally.fail("inplace_result",
                           f"{path} (updated in place by the reference): got {now!r}, expected {want!r}")
        elif isinstance(was, torch.Tensor):
            if not (isinstance(now, torch.Tensor) and same_values(now, was)):
                tally.fail("mutated_input", f"{path} was modified by the candidate (inputs are read-only)")
        elif not (type(now) is type(was) and now == was):
            tally.fail("mutated_input", f"{path} was modified by the candidate: {was!r} became {now!r}")


def _unravel(flat: int, shape) -> list[int]:
    index = []
    for dim in reversed(tuple(shape)):
        flat, i = divmod(flat, dim)
        index.append(i)
    return index[::-1]
