"""Is one rank's candidate output right? Compare it with the reference output and look for tricks.

Outputs are a tensor or nested tuples/lists/dicts of tensors and plain values. Tensors must match the
reference in structure, device, dtype and shape, and element-wise within dtype-based tolerances
(`|got - expected| <= atol + rtol * |expected|`, NaN equal to NaN); integer and bool tensors must match
exactly. Flags name what else went wrong (see `pkit.harness.records.FLAGS`); `mutated_input` fails the
check, since the contract forbids modifying inputs.

Example:
    >>> import torch
    >>> from pkit.harness.checks import compare
    >>> x = torch.ones(4)
    >>> c = compare(x * 2, torch.zeros(4), ref_inputs=(x,), sol_inputs=(x,), pristine=(x,))
    >>> c.ok, c.flags, c.mismatch_fraction
    (False, ['all_zero'], 1.0)
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import torch

TOLERANCES = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-4, 1e-4),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (2e-2, 2e-2),
    torch.float8_e4m3fn: (1.25e-1, 1.25e-1),
    torch.float8_e5m2: (2.5e-1, 2.5e-1),
    torch.complex128: (1e-7, 1e-7),
    torch.complex64: (1e-4, 1e-4),
}
"""(atol, rtol) per floating dtype of the reference output; other dtypes compare exactly."""


def tolerance(dtype: torch.dtype, atol: float | None = None, rtol: float | None = None) -> tuple[float, float]:
    """(atol, rtol) for outputs of `dtype`; explicit `atol`/`rtol` override the table."""
    default = TOLERANCES.get(dtype, (0.0, 0.0))
    return (default[0] if atol is None else atol, default[1] if rtol is None else rtol)


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


def compare(ref_out, sol_out, *, ref_inputs, sol_inputs, pristine, atol: float | None = None,
            rtol: float | None = None) -> RankCheck:
    """Check `sol_out` against `ref_out`; inputs let it spot aliasing, copied inputs and mutation.

    `ref_inputs`/`sol_inputs` are the copies the reference and the candidate were called with (after the
    call); `pristine` is an untouched copy of the same inputs.
    """
    tally = _Tally()
    ref_leaves, sol_leaves = leaves(ref_out), leaves(sol_out)
    same_layout = [p for p, _ in ref_leaves] == [p for p, _ in sol_leaves] and all(
        isinstance(r, torch.Tensor) == isinstance(s, torch.Tensor) for (_, r), (_, s) in zip(ref_leaves, sol_leaves))
    if not same_layout:
        tally.fail("wrong_structure", f"output structure: expected {describe(ref_out)}, got {describe(sol_out)}")
    else:
        ref_in = _tensors(ref_inputs)
        sol_in, clean = _tensors(sol_inputs), _tensors(pristine)
        for (path, r), (_, s) in zip(ref_leaves, sol_leaves):
            if isinstance(r, torch.Tensor):
                _compare_tensor(path, r, s, tally, atol, rtol)
                _trick_flags(r, s, ref_in, sol_in, clean, tally)
            else:
                _compare_value(path, r, s, tally, atol, rtol)
    _check_mutation(sol_inputs, pristine, tally)
    return RankCheck(
        ok=not tally.notes, max_abs_err=tally.max_abs, max_rel_err=tally.max_rel,
        mismatch_fraction=(tally.bad / tally.total) if tally.total else 0.0, first_bad_index=tally.first,
        note="; ".join(tally.notes)[:1000] or None, flags=sorted(tally.flags))


def _tensors(obj) -> list[torch.Tensor]:
    return [leaf for _, leaf in leaves(obj) if isinstance(leaf, torch.Tensor)]


def _compare_tensor(path: str, r: torch.Tensor, s: torch.Tensor, tally: _Tally, atol, rtol) -> None:
    for flag, got, want in (("wrong_device", s.device, r.device), ("wrong_dtype", s.dtype, r.dtype),
                            ("wrong_shape", tuple(s.shape), tuple(r.shape))):
        if got != want:
            tally.fail(flag, f"{path}: {flag.removeprefix('wrong_')} {got}, expected {want}", max(r.numel(), 1))
            return
    if r.numel() == 0:
        return
    a_tol, r_tol = tolerance(r.dtype, atol, rtol)
    if r.dtype.is_complex:
        r, s = torch.view_as_real(r.resolve_conj()), torch.view_as_real(s.resolve_conj())
    if r.dtype.is_floating_point:
        got, want = s.detach().to(torch.float64), r.detach().to(torch.float64)
        close = torch.isclose(got, want, rtol=r_tol, atol=a_tol, equal_nan=True)
        finite = torch.isfinite(got) & torch.isfinite(want)
        diff = torch.where(finite, (got - want).abs(), torch.zeros((), dtype=got.dtype, device=got.device))
        if bool((~torch.isfinite(got) & torch.isfinite(want)).any()):
            tally.flags.add("non_finite")
    else:
        got, want = s.detach(), r.detach()
        close = got == want
        diff = (got.to(torch.float64) - want.to(torch.float64)).abs()
    tally.total += r.numel()
    tally.max_abs = max(tally.max_abs, float(diff.max()))
    tally.max_rel = max(tally.max_rel, float((diff / want.abs().to(torch.float64).clamp_min(max(a_tol, 1e-30))).max()))
    bad = int((~close).sum())
    if bad:
        tally.bad += bad
        flat = int(torch.argmax((~close).flatten().to(torch.uint8)))
        index = _unravel(flat, r.shape)
        if tally.first is None:
            tally.first = index
        at = tuple(index)
        tally.notes.append(f"{path}: {bad} of {r.numel()} elements differ beyond atol={a_tol:g} rtol={r_tol:g}; "
                           f"first at {list(index)}: got {s[at].item()!r}, expected {r[at].item()!r}")


def _compare_value(path: str, r, s, tally: _Tally, atol, rtol) -> None:
    tally.total += 1
    if isinstance(r, float) and isinstance(s, (int, float)):
        a_tol, r_tol = tolerance(torch.float64, atol, rtol)
        same = math.isclose(s, r, rel_tol=r_tol, abs_tol=a_tol) or (math.isnan(r) and math.isnan(s))
    else:
        same = type(s) is type(r) and s == r
    if not same:
        tally.bad += 1
        tally.notes.append(f"{path}: got {s!r}, expected {r!r}")


def _trick_flags(r: torch.Tensor, s: torch.Tensor, ref_in, sol_in, clean, tally: _Tally) -> None:
    if s.numel() == 0:
        return
    storage = s.untyped_storage().data_ptr()
    if any(t.numel() and t.untyped_storage().data_ptr() == storage for t in sol_in):
        ref_storage = r.untyped_storage().data_ptr()
        if not any(t.numel() and t.untyped_storage().data_ptr() == ref_storage for t in ref_in):
            tally.flags.add("aliases_input")
    if not bool(s.any()) and bool(r.any()):
        tally.flags.add("all_zero")
    for t in clean:
        if _same(s, t) and not _same(r, t):
            tally.flags.add("equals_input")
            break


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same shape, dtype, device and values (NaN equal to NaN)."""
    if a.shape != b.shape or a.dtype != b.dtype or a.device != b.device:
        return False
    if torch.equal(a, b):
        return True
    return a.dtype.is_floating_point and bool(torch.isclose(a, b, rtol=0, atol=0, equal_nan=True).all())


def _check_mutation(sol_inputs, pristine, tally: _Tally) -> None:
    for (path, now), (_, before) in zip(leaves(sol_inputs, "input"), leaves(pristine, "input")):
        if isinstance(before, torch.Tensor) and not (isinstance(now, torch.Tensor) and _same(now, before)):
            tally.flags.add("mutated_input")
            tally.notes.append(f"{path} was modified by the candidate (inputs are read-only)")


def _unravel(flat: int, shape) -> list[int]:
    index = []
    for dim in reversed(tuple(shape)):
        flat, i = divmod(flat, dim)
        index.append(i)
    return index[::-1]
