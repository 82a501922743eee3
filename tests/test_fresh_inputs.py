"""Each timed call's inputs are made fresh just before the call (pkit.harness.fresh), on CPU.

For every problem under problems/, at W = 2 and 4 (gloo, tiny size), in every dtype it declares, and for
several change seeds: the change alters the reference's output beyond the harness's tolerance on some rank
(so an answer computed before the change, e.g. while the sets were built, fails the kept calls' check); it
is undone exactly; inputs every rank holds alike (shared weights, queries, targets) stay alike; and the
problems' own invariants hold (13: topk_ids the top-k of the logits; 22, 23: keys distinct over the ranks).
Then the pieces: row copies, negated keys, the checks on a problem's own edits, and a set whose inputs the
reference updates in place. The hostile candidate that precomputes answers is in tests/test_harness_hostile.py.
"""
from __future__ import annotations

import hashlib

import pytest
import torch
import torch.distributed as dist
from problem_ranks import rank_reports

from pkit.harness import checks, fresh
from pkit.harness.problems import default_root, discover, load_module

pytestmark = pytest.mark.heavy

PROBLEMS = {p.name: p for p in discover()}
WORLD_SIZES = (2, 4)
FRESH_SEEDS = (11, 12, 13, 14)


def digest(t) -> str | None:
    """A hash of a tensor's bytes (None for other values)."""
    if not isinstance(t, torch.Tensor):
        return None
    return hashlib.sha256(t.detach().contiguous().view(-1).view(torch.uint8).numpy().tobytes()).hexdigest()


def invariant_errors(name: str, inputs) -> list[str]:
    """What is wrong with the changed inputs of problem `name` against its own invariants (a collective)."""
    if name == "13_moe_load_balance_loss":
        logits, ids = inputs
        top = logits.float().topk(ids.shape[1], dim=-1).indices
        return [] if torch.equal(top.sort(1).values, ids.sort(1).values) else ["topk_ids are not the logits' top-k"]
    if name in ("22_distributed_sample_sort", "23_distributed_topk"):
        keys = inputs[0]
        everyone = [torch.empty_like(keys) for _ in range(dist.get_world_size())]
        dist.all_gather(everyone, keys)
        total = torch.cat(everyone)
        return [] if total.unique().numel() == total.numel() else ["keys are no longer distinct over the ranks"]
    return []


def check_problem(name: str, rank: int, world_size: int) -> dict:
    """Per dtype: per seed whether the change altered the output beyond tolerance on this rank, the inputs'
    digests before and after the change, whether it was undone exactly, and invariant errors."""
    problem = load_module(default_root() / name / "problem.py", f"pkit_test_fresh_{name}")
    summands = world_size if problem.META.get("rank_sums") else 1
    report = {}
    for dtype in problem.META["dtypes"]:
        inputs = problem.make_inputs(rank, world_size, "tiny", dtype, seed=5)
        clean = checks.clone_tree(inputs)
        remembered = problem.reference(*inputs)
        the_set = fresh.FreshSet(problem, inputs, inplace=set())
        row = {"before": [digest(t) for _, t in checks.leaves(inputs)], "after": {}, "altered": {}, "errors": []}
        for seed in FRESH_SEEDS:
            changed = the_set.prepare(seed)
            row["after"][seed] = [digest(t) for _, t in checks.leaves(changed)]
            row["errors"] += invariant_errors(name, changed)
            expected = problem.reference(*changed)
            row["altered"][seed] = not checks.compare(expected, remembered, summands=summands).ok
            the_set.revert()
            if not all(checks.same_values(a, b) for (_, a), (_, b) in zip(checks.leaves(inputs), checks.leaves(clean))
                       if isinstance(a, torch.Tensor)):
                row["errors"].append(f"seed {seed}: the change was not undone exactly")
        report[dtype] = row
    return report


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    return rank_reports(tmp_path_factory, check_problem, PROBLEMS, "fresh")


RUNS = [(w, name) for w in WORLD_SIZES for name, p in PROBLEMS.items() if w in p.world_sizes]


@pytest.mark.parametrize("world_size, name", RUNS, ids=[f"w{w}-{name}" for w, name in RUNS])
def test_every_call_change_alters_the_output_and_keeps_the_inputs_valid(reports, world_size, name):
    per_rank = [report[name] for report in reports(world_size)]
    assert not [r["errors"] for r in per_rank if "errors" in r], per_rank  # a check that raised
    for dtype in per_rank[0]:
        rows = [r[dtype] for r in per_rank]
        assert not [e for row in rows for e in row["errors"]], (dtype, [row["errors"] for row in rows])
        for seed in map(str, FRESH_SEEDS):
            assert any(row["altered"][seed] for row in rows), (
                f"{dtype}, seed {seed}: an answer from before the change passes on every rank")
            for leaf, before in enumerate(zip(*(row["before"] for row in rows))):
                after = [row["after"][seed][leaf] for row in rows]
                if before[0] is not None and len(set(before)) == 1:
                    assert len(set(after)) == 1, f"{dtype}, seed {seed}: input {leaf}, alike on every rank, differs"


# --- the pieces -----------------------------------------------------------------------------------------------

def test_row_copies_overwrite_distinct_rows_with_other_rows_alike_in_every_tensor():
    gen = torch.Generator().manual_seed(0)
    a, b = torch.arange(40.0).view(20, 2), torch.arange(20).view(20, 1) * 10
    was_a, was_b = a.clone(), b.clone()
    change = fresh.Change(fresh.row_copies((a, b), gen, count=5))
    moved = (a != was_a).any(1)
    assert 1 <= int(moved.sum()) <= 5 and torch.equal(moved, (b != was_b).any(1))
    for row in moved.nonzero().flatten().tolist():  # each changed row is a copy of another row, in both tensors
        source = int(a[row, 0]) // 2
        assert source != row and torch.equal(a[row], was_a[source]) and int(b[row]) == int(was_b[source])
    change.undo()
    assert torch.equal(a, was_a) and torch.equal(b, was_b)
    with pytest.raises(ValueError, match="same number of rows"):
        fresh.row_copies((a, torch.zeros(7)), gen)


def test_one_source_copies_one_row_many_times_and_tiny_tensors_stay():
    gen = torch.Generator().manual_seed(1)
    x = torch.arange(64.0).view(32, 2)
    fresh.Change(fresh.row_copies((x,), gen, count=8, one_source=True))
    counts = torch.unique(x, dim=0, return_counts=True)[1]
    assert int(counts.max()) >= 4
    assert fresh.row_copies((torch.ones(1),), gen) == [] and fresh.row_copies((torch.ones(1, 5),), gen) != []


def test_negated_keys_move_the_largest_and_stay_distinct():
    keys = torch.randperm(100) + 1
    fresh.Change(fresh.negated_keys(keys, torch.Generator().manual_seed(2), count=6))
    assert int(keys.max()) < 100 and keys.unique().numel() == 100 and 1 <= int((keys < 0).sum()) <= 6


def test_the_default_changes_floating_contiguous_tensors_only():
    ints, floats, strided = torch.arange(16), torch.randn(16, 4), torch.randn(4, 16).t()
    inputs = (ints, [floats, strided], 3.0)
    edits = fresh.default_edits(inputs, torch.Generator().manual_seed(3))
    assert [t is floats for t, _, _ in edits] == [True]


class HookProblem:
    """A problem whose `fresh_edits` is `edit(first input)`."""

    def __init__(self, edit):
        self.fresh_edits = lambda inputs, gen: edit(inputs[0])


BAD_EDITS = {
    "another tensor": lambda t: [(torch.zeros(8), torch.tensor([1]), torch.ones(1))],
    "int32 positions": lambda t: [(t, torch.tensor([1], dtype=torch.int32), torch.ones(1))],
    "values of another dtype": lambda t: [(t, torch.tensor([1]), torch.ones(1, dtype=torch.float64))],
    "repeated positions": lambda t: [(t, torch.tensor([1, 1]), torch.ones(2))],
    "positions past the end": lambda t: [(t, torch.tensor([8]), torch.ones(1))],
    "not a triple": lambda t: [(t, torch.tensor([1]))],
}


def test_a_problem_hook_replaces_the_default():
    x = torch.zeros(8)
    fresh.Change(fresh.edits_for(HookProblem(lambda t: [(t, torch.tensor([1, 2]), torch.ones(2))]), (x,), seed=0))
    assert x.tolist() == [0, 1, 1, 0, 0, 0, 0, 0]


@pytest.mark.parametrize("why", BAD_EDITS)
def test_a_problem_hooks_edits_are_checked(why):
    with pytest.raises(ValueError, match="fresh_edits"):
        fresh.edits_for(HookProblem(BAD_EDITS[why]), (torch.zeros(8),), seed=0)


def test_a_set_updated_in_place_is_restored_before_its_next_change():
    grads, scale = [torch.arange(8.0), torch.ones(4)], 0.5
    the_set = fresh.FreshSet(None, (grads, scale), inplace={"input[0][0]", "input[0][1]"})
    first = [g.clone() for g in the_set.prepare(7)[0]]
    for g in grads:
        g.mul_(scale)  # what an in-place reference does to its inputs
    the_set.revert()
    again = the_set.prepare(7)[0]  # same seed: the same change of the clean set
    assert all(torch.equal(a, b) for a, b in zip(again, first))
    the_set.revert()
    assert torch.equal(grads[0], torch.arange(8.0)) and torch.equal(grads[1], torch.ones(4))
