"""Problems 14-25 on CPU: reference and solutions/torch_alt.py under gloo, tiny size, every dtype.

One spawn per world size runs every problem on every rank and records what went wrong; the tests
then read those records. Some problems are also checked against a single-process float64 oracle
built from all ranks' inputs, so the reference itself is tested, not only its agreement with torch_alt.
"""
import importlib.util
import json
import os
import socket
import traceback
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from pkit.problem_kit import parse_dtype

PROBLEMS = Path(__file__).resolve().parents[1] / "problems"
NAMES = [
    "14_ulysses_all_to_all", "15_ring_attention", "16_halo_exchange_1d",
    "17_context_parallel_allgather_kv", "18_ddp_bucketed_all_reduce", "19_zero1_adam_step",
    "20_fsdp_unshard_linear", "21_global_grad_norm_clip", "22_distributed_sample_sort",
    "23_distributed_topk", "24_distributed_knn", "25_conv2d_halo_exchange",
]
WORLD_SIZES = [2, 4]
TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 2e-2}


def load(name, file="problem.py"):
    spec = importlib.util.spec_from_file_location(f"{name}.{Path(file).stem}", PROBLEMS / name / file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def as_tuple(out):
    return out if isinstance(out, tuple) else (out,)


def tensors(values):
    return [v for v in values if isinstance(v, torch.Tensor)]


# ----- float64 oracles: (all ranks' inputs, rank, world size) -> expected output of `rank` -----

def _causal_attention(q, k, v, q_pos):
    scores = q @ k.transpose(-1, -2) * q.shape[-1] ** -0.5
    scores = scores.masked_fill(q_pos[:, None] < torch.arange(k.shape[-2])[None, :], float("-inf"))
    return scores.softmax(-1) @ v


def oracle_ring_attention(inputs, rank, world_size):
    q, k, v = (torch.cat([x[i] for x in inputs], dim=-2).double() for i in range(3))
    block = inputs[0][0].shape[-2]
    rows = slice(rank * block, (rank + 1) * block)
    return _causal_attention(q[..., rows, :], k, v, torch.arange(q.shape[-2])[rows])


def oracle_context_parallel(inputs, rank, world_size):
    chunk = inputs[0][0].shape[-2] // 2
    owner = [(r, 0) for r in range(world_size)] + [(r, 1) for r in reversed(range(world_size))]

    def glob(i):
        return torch.cat([inputs[r][i][..., h * chunk:(h + 1) * chunk, :] for r, h in owner], -2).double()

    q, k, v = glob(0), glob(1), glob(2)
    group = q.shape[1] // k.shape[1]
    out = _causal_attention(q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1),
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
    return values.float(), indices


def oracle_knn(inputs, rank, world_size):
    db = torch.cat([d for d, _, _ in inputs]).double()
    queries, k = inputs[0][1].double(), inputs[0][2]
    dist2 = ((queries[:, None, :] - db[None, :, :]) ** 2).sum(-1)
    order = dist2.sort(dim=1, stable=True).indices[:, :k]  # stable: equal distances keep id order
    return dist2.gather(1, order).float(), order


ORACLES = {
    "15_ring_attention": oracle_ring_attention,
    "17_context_parallel_allgather_kv": oracle_context_parallel,
    "22_distributed_sample_sort": oracle_sample_sort,
    "23_distributed_topk": oracle_topk,
    "24_distributed_knn": oracle_knn,
}


# ----- checks run on every rank -----

def compare(got, want, what, tolerance):
    """Problems found comparing two outputs (tuples of tensors); an empty list when they agree.
    Floating outputs may differ by `tolerance` relative to the largest magnitude of `want`."""
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
                if err > tolerance:
                    errors.append(f"{what}[{i}]: relative error {err:.2e}")
        elif not torch.equal(a, b):
            errors.append(f"{what}[{i}]: values differ")
    return errors


def run(fn, inputs, what):
    """Call fn on the inputs; return its outputs and any contract violations (mutation, aliasing)."""
    before = [t.clone() for t in tensors(inputs)]
    out = as_tuple(fn(*inputs))
    errors = [f"{what}: input {i} modified" for i, (t, b) in enumerate(zip(tensors(inputs), before))
              if not torch.equal(t, b)]
    storages = {t.untyped_storage().data_ptr() for t in tensors(inputs) if t.numel()}
    errors += [f"{what}: output {i} aliases an input" for i, t in enumerate(out)
               if t.numel() and t.untyped_storage().data_ptr() in storages]
    return out, errors


def check_problem(name, rank, world_size):
    problem, alt = load(name), load(name, "solutions/torch_alt.py")
    errors = []
    for dtype in problem.META["dtypes"]:
        inputs = problem.make_inputs(rank, world_size, "tiny", dtype, seed=0)
        ref, problems = run(problem.reference, inputs, f"{dtype} reference")
        errors += problems
        got, problems = run(alt.solution, inputs, f"{dtype} torch_alt")
        tolerance = TOLERANCE.get(parse_dtype(dtype), 0.0)  # by the problem's dtype: it sets the error
        errors += problems + compare(got, ref, f"{dtype} torch_alt vs reference", tolerance)
        if name in ORACLES:
            everyone = [problem.make_inputs(r, world_size, "tiny", dtype, seed=0) for r in range(world_size)]
            want = tuple(t.to(r.dtype) for t, r in zip(as_tuple(ORACLES[name](everyone, rank, world_size)), ref))
            errors += compare(ref, want, f"{dtype} reference vs float64 oracle", tolerance)
    return errors


def worker(rank, world_size, port, out_dir):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world_size, timeout=timedelta(seconds=30))
    report = {}
    for name in NAMES:
        try:
            report[name] = check_problem(name, rank, world_size)
        except Exception:
            report[name] = [traceback.format_exc()]
    dist.destroy_process_group()
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(report))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module", params=WORLD_SIZES, ids=lambda w: f"w{w}")
def reports(request, tmp_path_factory):
    world_size = request.param
    out_dir = tmp_path_factory.mktemp(f"w{world_size}")
    mp.spawn(worker, args=(world_size, free_port(), str(out_dir)), nprocs=world_size)
    return [json.loads(Path(out_dir, f"rank{r}.json").read_text()) for r in range(world_size)]


@pytest.mark.parametrize("name", NAMES)
def test_reference_and_alt_agree_on_every_rank(reports, name):
    failures = {rank: report[name] for rank, report in enumerate(reports) if report[name]}
    assert not failures, "\n".join(f"rank {r}: {e}" for r, errs in failures.items() for e in errs)


@pytest.mark.parametrize("name", NAMES)
def test_meta_and_cost(name):
    problem = load(name)
    assert problem.META["name"] == name.split("_", 1)[1]
    assert problem.META["category"] in {"sequence", "data_parallel", "applications"}
    assert {"tiny", "large"} <= set(problem.SIZES)
    for world_size in problem.META["world_sizes"]:
        for size in problem.SIZES:
            for dtype in problem.META["dtypes"]:
                c = problem.cost(world_size, size, dtype)
                assert all(isinstance(v, int) and v >= 0 for v in c.values()), c
                assert c["hbm_bytes"] > 0 and c["link_bytes"] > 0, c


@pytest.mark.parametrize("name", NAMES)
def test_make_inputs_deterministic(name):
    problem = load(name)
    for dtype in problem.META["dtypes"]:
        a, b, c = (tensors(problem.make_inputs(1, 2, "tiny", dtype, seed)) for seed in (0, 0, 1))
        assert all(torch.equal(x, y) for x, y in zip(a, b))
        assert not all(torch.equal(x, y) for x, y in zip(a, c))
        assert a[0].dtype == parse_dtype(dtype)
