"""Fresh inputs for every timed call: a small seeded change of an input set, made just before the call.

The timed calls rotate over input sets built when the timed window opens. So that no call's answer can be
computed while the sets are built (or remembered from an earlier use of its set), the parent reveals a new
seed with each call (pkit.harness.reference.timed_phase), and the worker changes the set with it just before
the call, outside the timed sample, and undoes the change after it. The reference worker makes the same
change when it computes the outputs the timed calls are checked against (`Reference.expected`).

A change is a list of edits `(tensor, positions, values)`: `tensor` one of the inputs' tensors (contiguous),
`positions` its flat element indices, a `slice` (step 1) or a 1-D int64 tensor of distinct indices on its
device, `values` as many elements of its dtype. The seed is the same on every rank, so inputs every rank
holds alike (shared weights, queries, targets) change alike. By default (`default_edits`) each floating
tensor gets a block of `FRESH_ROWS` of its rows (vectors along the last dimension; elements of a 1-D tensor),
at a random place, overwritten by copies of other rows: the values stay those of the problem's own draw
(same dtype, range, per-row invariants such as a softmax row or top-k distinct ids); integer tensors
(indices, counts, routing) and plain values are left alone. A problem whose inputs need another change
defines `fresh_edits(inputs, gen)` in its problem.py, returning such a list drawn from the CPU generator
`gen`; `row_copies` and `negated_keys` build the usual ones (docs/problems.md).

Example:
    >>> import torch
    >>> x = torch.arange(12.0).view(6, 2)
    >>> change = Change(edits_for(None, (x,), seed=3))      # rows of x copied over others
    >>> int((x != torch.arange(12.0).view(6, 2)).any(1).sum())
    3
    >>> change.undo(); torch.equal(x, torch.arange(12.0).view(6, 2))
    True
"""
from __future__ import annotations

import torch

from .checks import leaves

FRESH_ROWS = 8
"""Rows of each floating input tensor a timed call's change copies over (at most half its rows). A few suffice:
a stale answer then fails the element-wise check of the kept calls wherever those rows reach the output."""


def row_count(t: torch.Tensor) -> int:
    """Rows of `t` as `row_copies` sees them: vectors along the last dimension, or elements when there is
    only one such vector."""
    rows = t.numel() // t.shape[-1] if t.dim() and t.shape[-1] else 0
    return rows if rows >= 2 else t.numel()


def _rows(t: torch.Tensor) -> torch.Tensor:
    """`t` as a (rows, row length) view (`row_count` rows)."""
    return t.view(row_count(t), -1)


def row_copies(tensors, gen: torch.Generator, count: int = FRESH_ROWS, one_source: bool = False) -> list:
    """Edits overwriting a block of `count` consecutive rows (at most half the rows), at a random place, with
    copies of another such block (each row of it a copy of another row), the same rows in every tensor of
    `tensors` (they must have the same `row_count`, e.g. a token dimension they share). `one_source`: every
    row of the block gets a copy of one row from outside it (a change that shifts sums and statistics over
    rows, not only values among them)."""
    tensors = list(tensors)
    rows = {row_count(t) for t in tensors}
    if len(rows) != 1:
        raise ValueError(f"tensors: row_copies needs tensors with the same number of rows, got {sorted(rows)}")
    return _block_copies(tensors, rows.pop(), count, one_source, torch.randint(0, 1 << 62, (2,), generator=gen))


def _block_copies(tensors: list, rows: int, count: int, one_source: bool, draws: torch.Tensor) -> list:
    """`row_copies` with its two random numbers already drawn (`draws`, large non-negative ints)."""
    count = min(int(count), rows // 2)
    if count < 1:
        return []
    first, second = draws.tolist()
    dst = first % (rows - count + 1)
    if one_source:
        src = (dst + count + second % (rows - count)) % rows
    else:
        src = (dst + 1 + second % (rows - count)) % (rows - count + 1)
    edits = []
    for t in tensors:
        view = _rows(t)
        width = view.shape[1]
        copies = view[src:src + 1].expand(count, width) if one_source else view[src:src + count]
        edits.append((t, slice(dst * width, (dst + count) * width), copies.reshape(-1).clone()))
    return edits


def negated_keys(keys: torch.Tensor, gen: torch.Generator, count: int = FRESH_ROWS) -> list:
    """An edit negating the largest of `keys` (1-D, all >= 1 and distinct over the ranks, as
    `pkit.problem_kit.distinct_keys` draws them) and up to `count` - 1 other random keys: the keys stay
    distinct (a negated key equals no positive key and no other negated one), and the largest moves, so a
    sort or top-k of them changes."""
    n = keys.numel()
    if n == 0 or count < 1:
        return []
    top = keys.argmax().reshape(1)
    others = torch.randint(0, n, (max(0, min(int(count), n) - 1),), generator=gen).to(keys.device)
    positions = torch.cat((top, others)).unique()
    return [(keys, positions, -keys.view(-1)[positions])]


def default_edits(inputs, gen: torch.Generator) -> list:
    """`row_copies` of every floating (or complex) contiguous tensor among `inputs`, each with its own rows."""
    chosen = [t for _, t in leaves(inputs, "input") if isinstance(t, torch.Tensor) and t.numel() >= 2
              and (t.dtype.is_floating_point or t.dtype.is_complex) and t.layout == torch.strided and t.is_contiguous()]
    draws = torch.randint(0, 1 << 62, (len(chosen), 2), generator=gen)
    return [e for t, d in zip(chosen, draws) for e in _block_copies([t], row_count(t), FRESH_ROWS, False, d)]


def edits_for(problem, inputs, seed: int) -> list:
    """The change of a timed call seeded by `seed` (the same on every rank): the problem's
    `fresh_edits(inputs, gen)` when it defines one (checked by `check_edits`), else `default_edits`."""
    gen = torch.Generator().manual_seed(int(seed))
    hook = getattr(problem, "fresh_edits", None)
    return check_edits(hook(inputs, gen), inputs) if callable(hook) else default_edits(inputs, gen)


def check_edits(edits, inputs) -> list:
    """`edits` as a list, after checking each edits one of `inputs`' tensors (contiguous) at distinct positions
    within it (a slice, or int64 indices on its device), with values of its dtype and device; ValueError naming
    what is wrong."""
    held = {id(t) for _, t in leaves(inputs, "input") if isinstance(t, torch.Tensor)}
    edits = list(edits)
    for n, edit in enumerate(edits):
        if not (isinstance(edit, tuple) and len(edit) == 3):
            raise ValueError(f"fresh_edits: edit {n} is not a (tensor, positions, values) tuple")
        t, positions, values = edit
        if not isinstance(t, torch.Tensor) or id(t) not in held or not t.is_contiguous():
            raise ValueError(f"fresh_edits: edit {n} does not change a contiguous tensor of the inputs")
        if isinstance(positions, slice):
            start, stop, step = positions.indices(t.numel())
            if step != 1 or (positions.start, positions.stop) != (start, stop):
                raise ValueError(f"fresh_edits: edit {n}'s slice must run in steps of 1 within {t.numel()} elements")
            size = max(0, stop - start)
        elif (isinstance(positions, torch.Tensor) and positions.dtype == torch.int64 and positions.dim() == 1
              and positions.device == t.device):
            size = positions.numel()
            if size and (int(positions.min()) < 0 or int(positions.max()) >= t.numel()
                         or positions.unique().numel() != size):
                raise ValueError(f"fresh_edits: edit {n}'s positions must be distinct indices below {t.numel()}")
        else:
            raise ValueError(f"fresh_edits: edit {n}'s positions must be a slice or a 1-D int64 tensor on {t.device}")
        if (not isinstance(values, torch.Tensor) or values.dtype != t.dtype or values.device != t.device
                or tuple(values.shape) != (size,)):
            raise ValueError(f"fresh_edits: edit {n}'s values must be {size} elements of {t.dtype} on {t.device}")
    return edits


class Change:
    """`edits` applied to their tensors at once (the values they replace kept); `undo` puts those back, in
    reverse order, so edits of the same elements undo right."""

    def __init__(self, edits: list):
        self.saved = []
        for t, positions, values in edits:
            flat = t.view(-1)
            old = flat[positions]  # a copy for index tensors, a view for slices
            self.saved.append((flat, positions, old.clone() if isinstance(positions, slice) else old))
            flat[positions] = values

    def undo(self) -> None:
        for flat, positions, old in reversed(self.saved):
            flat[positions] = old
        self.saved = []


class FreshSet:
    """One timed input set: its inputs, clean copies of those the reference updates in place (`inplace`
    paths), and the change of the call using it now."""

    def __init__(self, problem, inputs: tuple, inplace: set):
        self.problem, self.inputs, self.uses = problem, inputs, 0
        self.clean = [(t, t.clone()) for p, t in leaves(inputs, "input")
                      if p in inplace and isinstance(t, torch.Tensor)]
        self.change: Change | None = None

    def prepare(self, seed: int) -> tuple:
        """The inputs of the next call on this set, changed with `seed`; inputs updated in place by an earlier
        call are restored first."""
        self.revert()
        if self.uses:
            for leaf, clean in self.clean:
                leaf.copy_(clean)
        self.uses += 1
        self.change = Change(edits_for(self.problem, self.inputs, seed))
        return self.inputs

    def revert(self) -> None:
        """Undo the last call's change (after the call, outside the timed sample)."""
        if self.change is not None:
            self.change.undo()
            self.change = None
