"""Every problem under problems/: reference vs. every shipped solution (solutions/*.py: torch_alt.py and the
pkit_*.py ones, whose pkit.dist calls run torch.distributed on CPU tensors) on CPU (gloo), plus contract checks.

The problems are discovered (`pkit.harness.problems.discover`), so a new folder holding a problem.py is
tested without editing this file. One spawn per world size runs every problem on every rank at the tiny
size, for every dtype the problem declares (bfloat16 included: gloo runs every collective the references
use in bf16 on the CPU, no dtype is switched), and records what went wrong and the dtypes of the
reference's outputs; the tests read those records. Solutions are judged by the harness's own check
(`pkit.harness.checks.compare`: element-wise, tolerance by each output's dtype). Some problems are also
checked against a single-process float64 oracle built from all ranks' inputs (`ORACLES`), so the reference
itself is tested, not only its agreement with torch_alt.
"""
import copy

import pytest
import torch
import torch.nn.functional as F
from problem_ranks import rank_reports

from pkit import roofline
from pkit.experiments.roofline_gap.projection import TRAFFIC
from pkit.harness import checks
from pkit.harness.problems import CATEGORIES, default_root, discover, load_module
from pkit.problem_kit import parse_dtype
from pkit.tolerance import tolerance

pytestmark = pytest.mark.heavy

PROBLEMS_DIR = default_root()
PROBLEMS = {p.name: p for p in discover(PROBLEMS_DIR)}
WORLD_SIZES = (2, 4)  # each problem runs at those of these it declares in META["world_sizes"]
META_KEYS = {"name", "category", "models", "dtypes", "dtype_reason", "world_sizes", "traffic", "description"}
FLOAT32_OUTPUTS = {  # outputs that are float32 whatever the problem's dtype, because the field computes them so
    "09_vocab_parallel_cross_entropy": {0: "the per-token loss (Megatron upcasts the logits)"},
    "13_moe_load_balance_loss": {0: "the auxiliary loss over fp32 routing statistics"},
    "21_global_grad_norm_clip": {0: "the global norm (clip_grad_norm_ accumulates in fp32)"},
}


def load_problem(name):
    """The problem.py module of problem `name` (a folder under problems/)."""
    return load_module(PROBLEMS_DIR / name / "problem.py", f"pkit_test_problem_{name}")


def load_solutions(name):
    """{file name: `solution` function} of every solutions/*.py of problem `name` (torch_alt.py among them)."""
    files = sorted((PROBLEMS_DIR / name / "solutions").glob("*.py"))
    return {f.name: load_module(f, f"pkit_test_solution_{name}_{f.stem}").solution for f in files}


def as_tuple(out):
    """A function's outputs as a tuple (a single tensor becomes a 1-tuple)."""
    return out if isinstance(out, tuple) else (out,)


def tensors(values):
    """The tensors among `values`, in order."""
    return [v for v in values if torch.is_tensor(v)]


def same_value(x, y):
    """Whether two inputs are equal (tensors: same dtype, shape and elements; others: ==)."""
    if torch.is_tensor(x) or torch.is_tensor(y):
        return torch.is_tensor(x) and torch.is_tensor(y) and x.dtype == y.dtype and torch.equal(x, y)
    return x == y


def same_values(a, b):
    """Whether two input lists are equal, element by element."""
    return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))


# ----- float64 oracles: (every rank's inputs, rank, world size) -> the expected output(s) of `rank` -----

def oracle_all_reduce(inputs, rank, world_size):
    return sum(grad.double() for grad, in inputs)


def oracle_gemm_all_reduce(inputs, rank, world_size):
    return sum(x.double() @ w.double().t() for x, w in inputs)


def oracle_cross_entropy(inputs, rank, world_size):
    logits = torch.cat([x[0].double() for x in inputs], dim=1)
    return F.cross_entropy(logits, inputs[0][1], reduction="none")


def oracle_load_balance_loss(inputs, rank, world_size):
    probs = torch.cat([logits.double() for logits, _ in inputs]).softmax(-1)
    ids = torch.cat([ids for _, ids in inputs])
    fraction = torch.bincount(ids.flatten(), minlength=probs.shape[1]).double() / ids.numel()
    return probs.shape[1] * (fraction * probs.mean(0)).sum()


def causal_attention(q, k, v, q_pos):
    """Softmax attention where query at position q_pos[i] sees keys 0..q_pos[i]."""
    scores = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
    scores = scores.masked_fill(q_pos[:, None] < torch.arange(k.shape[-2])[None, :], float("-inf"))
    return scores.softmax(-1) @ v


def oracle_ring_attention(inputs, rank, world_size):
    q, k, v = (torch.cat([x[i] for x in inputs], dim=-2).double() for i in range(3))
    block = inputs[0][0].shape[-2]
    rows = slice(rank * block, (rank + 1) * block)
    return causal_attention(q[..., rows, :], k, v, torch.arange(q.shape[-2])[rows])


def oracle_context_parallel(inputs, rank, world_size):
    chunk = inputs[0][0].shape[-2] // 2
    owner = [(r, 0) for r in range(world_size)] + [(r, 1) for r in reversed(range(world_size))]

    def whole(i):
        return torch.cat([inputs[r][i][..., h * chunk:(h + 1) * chunk, :] for r, h in owner], -2).double()

    q, k, v = whole(0), whole(1), whole(2)
    group = q.shape[1] // k.shape[1]
    out = causal_attention(q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1),
                           torch.arange(q.shape[-2]))
    mine = [owner.index((rank, 0)), owner.index((rank, 1))]
    return torch.cat([out[..., j * chunk:(j + 1) * chunk, :] for j in mine], dim=-2)


def oracle_sample_sort(inputs, rank, world_size):
    s = inputs[0][1]
    samples = []
    for keys, _ in inputs:
        local = keys.sort().values
        samples.append(local[[(2 * j + 1) * local.numel() // (2 * s) for j in range(s)]])
    splitters = torch.cat(samples).sort().values[[(i + 1) * s for i in range(world_size - 1)]]
    everything = torch.cat([keys for keys, _ in inputs]).sort().values
    keep = torch.ones_like(everything, dtype=torch.bool)
    if rank > 0:
        keep &= everything > splitters[rank - 1]
    if rank < world_size - 1:
        keep &= everything <= splitters[rank]
    return everything[keep]


def oracle_topk(inputs, rank, world_size):
    values, indices = torch.cat([x for x, _ in inputs]).double().topk(inputs[0][1])
    return values, indices


def oracle_knn(inputs, rank, world_size):
    db = torch.cat([d for d, _, _ in inputs]).double()
    queries, k = inputs[0][1].double(), inputs[0][2]
    dist2 = ((queries[:, None, :] - db[None, :, :]) ** 2).sum(-1)
    order = dist2.sort(dim=1, stable=True).indices[:, :k]  # stable: equal distances keep id order
    return dist2.gather(1, order), order


ORACLES = {
    "01_all_reduce": oracle_all_reduce,
    "07_gemm_all_reduce": oracle_gemm_all_reduce,
    "09_vocab_parallel_cross_entropy": oracle_cross_entropy,
    "13_moe_load_balance_loss": oracle_load_balance_loss,
    "15_ring_attention": oracle_ring_attention,
    "17_context_parallel_allgather_kv": oracle_context_parallel,
    "22_distributed_sample_sort": oracle_sample_sort,
    "23_distributed_topk": oracle_topk,
    "24_distributed_knn": oracle_knn,
}


# ----- checks run on every rank, inside the spawned processes -----

def compare(got, want, what):
    """What differs between two output tuples (an empty list when they agree).

    Floating outputs may differ by their dtype's relative tolerance (`pkit.tolerance`) relative to the largest
    magnitude in `want`; others are exact.
    """
    if len(got) != len(want):
        return [f"{what}: {len(got)} outputs, expected {len(want)}"]
    errors = []
    for i, (a, b) in enumerate(zip(got, want)):
        if a.shape != b.shape or a.dtype != b.dtype:
            errors.append(f"{what}[{i}]: {a.dtype}{tuple(a.shape)} vs {b.dtype}{tuple(b.shape)}")
        elif a.is_floating_point():
            if not torch.isfinite(a).all():
                errors.append(f"{what}[{i}]: not finite")
            elif a.numel():
                err = ((a.double() - b.double()).abs().max() / b.double().abs().max().clamp_min(1e-30)).item()
                rtol = tolerance(b.dtype)[1]
                if err > rtol:
                    errors.append(f"{what}[{i}]: relative error {err:.2e} > {rtol}")
        elif not torch.equal(a, b):
            errors.append(f"{what}[{i}]: values differ")
    return errors


def run_checked(fn, inputs, what):
    """Call fn on the inputs; return its outputs and its contract violations (inputs modified, aliased)."""
    before = [v.clone() if torch.is_tensor(v) else copy.deepcopy(v) for v in inputs]
    out = as_tuple(fn(*inputs))
    errors = [f"{what}: input {i} modified" for i, (v, b) in enumerate(zip(inputs, before))
              if not same_value(v, b)]
    storages = {t.untyped_storage().data_ptr() for t in tensors(inputs) if t.numel()}
    errors += [f"{what}: output {i} is not a tensor" for i, t in enumerate(out) if not torch.is_tensor(t)]
    errors += [f"{what}: output {i} aliases an input" for i, t in enumerate(out)
               if torch.is_tensor(t) and t.numel() and t.untyped_storage().data_ptr() in storages]
    return out, errors


def harness_errors(got, want, what):
    """What the harness's check (`pkit.harness.checks.compare`, |got - want| <= atol + rtol |want| element-wise,
    atol and rtol by each output's dtype) finds wrong with `got` against `want` (an empty list when it passes)."""
    verdict = checks.compare(want, got)
    return [] if verdict.ok else [f"{what} (harness check): {verdict.note}"]


def vacuous_outputs(ref):
    """Indices of floating outputs for which an all-zero answer would pass the harness check: outputs so small
    against their dtype's atol that the check would not see a wrong answer."""
    return [i for i, r in enumerate(ref) if r.is_floating_point() and r.numel()
            and checks.compare((r,), (torch.zeros_like(r),)).ok]


def oracle_errors(name, problem, ref, dtype, rank, world_size):
    """Differences between the reference's outputs and the float64 oracle (none if `name` has no oracle)."""
    if name not in ORACLES:
        return []
    everyone = [problem.make_inputs(r, world_size, "tiny", dtype, seed=0) for r in range(world_size)]
    want = as_tuple(ORACLES[name](everyone, rank, world_size))
    if len(want) != len(ref):
        return [f"{dtype} oracle gives {len(want)} outputs, the reference {len(ref)}"]
    want = tuple(w.to(r.dtype) for w, r in zip(want, ref))
    return compare(ref, want, f"{dtype} reference vs float64 oracle")


def check_problem(name, rank, world_size):
    """{"errors": everything wrong with problem `name` on this rank, for every dtype it declares, "outputs": the
    dtype names of the reference's outputs per dtype}."""
    problem, solutions = load_problem(name), load_solutions(name)
    errors, output_dtypes = [], {}
    if "torch_alt.py" not in solutions:
        errors.append("solutions/torch_alt.py is missing")
    for dtype in problem.META["dtypes"]:
        inputs = problem.make_inputs(rank, world_size, "tiny", dtype, seed=0)
        ref, ref_errors = run_checked(problem.reference, inputs, f"{dtype} reference")
        errors += ref_errors
        for file, solution in solutions.items():
            got, sol_errors = run_checked(solution, inputs, f"{dtype} {file}")
            errors += sol_errors + harness_errors(got, ref, f"{dtype} {file} vs reference")
        errors += [f"{dtype} reference output {i}: all zeros pass the harness check at {dtype}'s tolerance"
                   for i in vacuous_outputs(ref)]
        errors += oracle_errors(name, problem, ref, dtype, rank, world_size)
        output_dtypes[dtype] = [str(t.dtype).removeprefix("torch.") for t in ref]
    return {"errors": errors, "outputs": output_dtypes}


def names_at(world_size):
    """The discovered problems that declare `world_size`."""
    return [name for name, p in PROBLEMS.items() if world_size in p.world_sizes]


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    """reports(world_size): each rank's {problem name: {"errors", "outputs"}}, from one spawn per world size."""
    return rank_reports(tmp_path_factory, check_problem, PROBLEMS, "w")


# ----- tests -----

RUNS = [(w, name) for w in WORLD_SIZES for name in names_at(w)]


@pytest.mark.parametrize("world_size, name", RUNS, ids=[f"w{w}-{name}" for w, name in RUNS])
def test_reference_and_every_solution_agree_on_every_rank(reports, world_size, name):
    """On every rank and dtype: every shipped solution matches the reference, none touches its inputs, oracles
    agree."""
    per_rank = reports(world_size)
    missing = [rank for rank, report in enumerate(per_rank) if name not in report]
    assert not missing, f"ranks {missing} did not report on {name}"
    failures = [f"rank {rank}: {e}" for rank, report in enumerate(per_rank) for e in report[name]["errors"]]
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("world_size, name", RUNS, ids=[f"w{w}-{name}" for w, name in RUNS])
def test_reference_outputs_are_in_the_problem_dtype(reports, world_size, name):
    """Run under gloo, a problem's reference returns every floating output (and every output of the problem's
    own dtype, e.g. int64 keys) in the dtype it ran in, bf16 included; the only exceptions are the outputs in
    FLOAT32_OUTPUTS, which the field computes in fp32 (losses, norms) and which stay float32 in every dtype."""
    keep_fp32 = FLOAT32_OUTPUTS.get(name, {})
    for rank, report in enumerate(reports(world_size)):
        assert set(report[name].get("outputs", ())) == set(PROBLEMS[name].dtypes), f"rank {rank} ran no reference"
        for dtype, outputs in report[name]["outputs"].items():
            for i, got in enumerate(outputs):
                floating = getattr(torch, got).is_floating_point
                if i in keep_fp32:
                    assert got == "float32", (rank, dtype, i, got, keep_fp32[i])
                elif floating or got == dtype:
                    assert got == dtype, f"rank {rank}: {dtype} reference output {i} is {got}"


@pytest.mark.parametrize("name", PROBLEMS)
def test_meta_and_cost(name):
    """META names the folder and has every key; the cost model gives non-negative ints everywhere (sync_steps
    included)."""
    problem = load_problem(name)
    assert set(problem.META) >= META_KEYS, f"META lacks {META_KEYS - set(problem.META)}"
    assert problem.META["name"] == name.split("_", 1)[1]
    assert problem.META["category"] in CATEGORIES
    assert problem.META["traffic"] in TRAFFIC  # how the projection spreads its link bytes over NVLink and NICs
    assert {"tiny", "large"} <= set(problem.SIZES)
    for world_size in problem.META["world_sizes"]:
        for size in problem.SIZES:
            for dtype in problem.META["dtypes"]:
                c = problem.cost(world_size, size, dtype)
                assert set(c) == {"flops", "hbm_bytes", "link_bytes", "sync_steps"}, c
                assert all(isinstance(v, int) and v >= 0 for v in c.values()), (world_size, size, dtype, c)
                assert c["sync_steps"] >= 1, (world_size, size, dtype, c)
                assert c["hbm_bytes"] > 0 and c["link_bytes"] > 0, (world_size, size, dtype, c)


def test_allgather_gemm_cost_is_the_rooflines_pattern():
    """05's cost is pkit.roofline.ag_gemm_cost at its shapes, and its HBM bytes are the least a fused kernel
    moves: this rank's slice of x read once, its weight shard read once, its output written once (the gathered
    rows arrive over the link and are counted there only)."""
    problem = load_problem("05_allgather_gemm")
    for world_size in problem.META["world_sizes"]:
        for size, s in problem.SIZES.items():
            for dtype in problem.META["dtypes"]:
                t, k, n, b = s["tokens"], s["in_features"], s["out_features"] // world_size, parse_dtype(dtype).itemsize
                pattern = roofline.ag_gemm_cost(m=t, k=k, n_local=n, n_gpus=world_size, itemsize=b)
                got = problem.cost(world_size, size, dtype)
                assert got == {key: int(v) for key, v in pattern.items()}, (world_size, size, dtype)
                assert got["hbm_bytes"] == b * (t // world_size * k + n * k + t * n)
                assert got["link_bytes"] == b * (world_size - 1) * (t // world_size) * k


@pytest.mark.parametrize("name", PROBLEMS)
def test_make_inputs_deterministic(name):
    """The same seed gives the same inputs, another seed others; the first tensor has the asked dtype."""
    problem = load_problem(name)
    for dtype in problem.META["dtypes"]:
        a, b, c = (problem.make_inputs(1, 2, "tiny", dtype, seed) for seed in (0, 0, 1))
        assert same_values(a, b), dtype
        assert not same_values(a, c), dtype
        assert tensors(a)[0].dtype == parse_dtype(dtype)


def test_every_oracle_belongs_to_a_problem():
    assert set(ORACLES) <= set(PROBLEMS), f"oracles for problems that no longer exist: {set(ORACLES) - set(PROBLEMS)}"


def test_discovery_picks_up_a_new_problem(tmp_path):
    """A problem folder copied under a fresh root is discovered with no list to edit."""
    source = PROBLEMS_DIR / next(iter(PROBLEMS)) / "problem.py"
    (tmp_path / "99_new_problem").mkdir()
    (tmp_path / "99_new_problem" / "problem.py").write_text(source.read_text())
    assert [p.name for p in discover(tmp_path)] == ["99_new_problem"]


def test_the_problems_table_fits_100_columns_and_wide_has_every_column(tmp_path, monkeypatch, capsys):
    """`pkit problems` for a terminal: no repeated or empty column, what every row shares said once under it."""
    from pkit.harness.cli import TABLE_WIDTH, main
    from pkit.studies import FIGURES_MACHINE  # the default --machine

    monkeypatch.setenv("PKIT_RESULTS", str(tmp_path))  # no measured ceilings: their columns are empty
    assert main(["problems"]) == 0
    lines = capsys.readouterr().out.splitlines()
    rows = 2 + sum(len(p.sizes) for p in PROBLEMS.values())
    assert max(map(len, lines[:rows])) <= TABLE_WIDTH == 100  # the notes under it hold a path
    header = " ".join(lines[:2])
    assert "datasheet" not in header and "measured" not in header and "world_size" not in header
    assert " ".join(lines[rows:]).split() == (f"every row's world_size: 2 every row's measured_ceilings: none: "
                                              f"{tmp_path / FIGURES_MACHINE / 'ceilings.csv'} not recorded left out to "
                                              "fit 100 columns: category (--wide: every column)").split()
    assert main(["problems", "--wide"]) == 0
    wide = capsys.readouterr().out.splitlines()
    assert all(c in wide[0] for c in ("roofline_datasheet_ms", "roofline_measured_bound", "measured_ceilings"))
