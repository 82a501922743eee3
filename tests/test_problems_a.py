"""Problems 01-13: reference vs. torch_alt at world size 2 on CPU (gloo), plus contract checks.

Each problem gets one spawn of two ranks that runs every dtype; every rank checks its own outputs.
For a few problems the reference is also compared with a single-process float64 computation.
"""
import importlib.util
import os
import socket
import warnings
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

from pkit.problem_kit import parse_dtype

PROBLEMS_DIR = Path(__file__).resolve().parents[1] / "problems"
PROBLEMS = [
    "01_all_reduce", "02_all_gather_uneven", "03_reduce_scatter", "04_all_to_all", "05_allgather_gemm",
    "06_gemm_reduce_scatter", "07_gemm_all_reduce", "08_tp_rmsnorm", "09_vocab_parallel_cross_entropy",
    "10_moe_dispatch", "11_moe_combine", "12_moe_dispatch_expert_gemm", "13_moe_load_balance_loss",
]
WORLD_SIZE = 2
TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 2e-2}


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"{path.parent.name}_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _problem(name):
    return _load(PROBLEMS_DIR / name / "problem.py")


def _as_tuple(out):
    return out if isinstance(out, tuple) else (out,)


def _assert_close(got, want, tol, what):
    """Floats: max |got - want| within tol * max |want|; integers: exact."""
    assert got.shape == want.shape, f"{what}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    if not want.is_floating_point():
        assert torch.equal(got, want.to(got.dtype)), f"{what}: integer values differ"
        return
    assert torch.isfinite(got).all(), f"{what}: non-finite values"
    err = (got.double() - want.double()).abs().max().item() if got.numel() else 0.0
    scale = max(want.double().abs().max().item() if want.numel() else 0.0, 1e-6)
    assert err <= tol * scale, f"{what}: max error {err:.3g} > {tol} * {scale:.3g}"


# Single-process float64 versions of the math: f(inputs of every rank, rank) -> this rank's output.
def _exact_all_reduce(all_inputs, rank):
    return sum(inputs[0].double() for inputs in all_inputs)


def _exact_gemm_all_reduce(all_inputs, rank):
    return sum(x.double() @ w.double().t() for x, w in all_inputs)


def _exact_cross_entropy(all_inputs, rank):
    logits = torch.cat([inputs[0].double() for inputs in all_inputs], dim=1)
    return F.cross_entropy(logits, all_inputs[0][1], reduction="none")


def _exact_load_balance_loss(all_inputs, rank):
    probs = torch.cat([logits.double() for logits, _ in all_inputs]).softmax(-1)
    ids = torch.cat([ids for _, ids in all_inputs])
    tokens, num_experts = probs.shape
    fraction = torch.bincount(ids.flatten(), minlength=num_experts).double() / ids.numel()
    return num_experts * (fraction * probs.mean(0)).sum()


EXACT = {
    "01_all_reduce": _exact_all_reduce,
    "07_gemm_all_reduce": _exact_gemm_all_reduce,
    "09_vocab_parallel_cross_entropy": _exact_cross_entropy,
    "13_moe_load_balance_loss": _exact_load_balance_loss,
}


def _check_rank(rank, world_size, name):
    problem = _problem(name)
    solution = _load(PROBLEMS_DIR / name / "solutions" / "torch_alt.py").solution
    for dtype in problem.META["dtypes"]:
        what = f"{name} rank {rank} {dtype}"
        tol = TOLERANCE[parse_dtype(dtype)]
        inputs = problem.make_inputs(rank, world_size, "tiny", dtype, seed=0)
        before = [v.clone() if torch.is_tensor(v) else v for v in inputs]
        ref = _as_tuple(problem.reference(*inputs))
        alt = _as_tuple(solution(*inputs))
        for i, (v, b) in enumerate(zip(inputs, before)):
            assert (torch.equal(v, b) if torch.is_tensor(v) else v == b), f"{what}: input {i} modified"
        tensors_in = [v for v in inputs if torch.is_tensor(v)]
        assert len(ref) == len(alt), f"{what}: {len(ref)} outputs vs {len(alt)}"
        for i, (r, a) in enumerate(zip(ref, alt)):
            assert r.dtype == a.dtype, f"{what} output {i}: dtype {a.dtype} != {r.dtype}"
            assert all(r.untyped_storage().data_ptr() != v.untyped_storage().data_ptr() for v in tensors_in), \
                f"{what} output {i}: reference output aliases an input"
            _assert_close(a, r, tol, f"{what} output {i} (torch_alt vs reference)")
        if name in EXACT:
            all_inputs = [problem.make_inputs(r, world_size, "tiny", dtype, seed=0) for r in range(world_size)]
            exact = EXACT[name](all_inputs, rank)
            _assert_close(ref[0].double(), exact, tol, f"{what} (reference vs float64)")


def _worker(rank, name, world_size, port):
    warnings.filterwarnings("ignore", category=FutureWarning)
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world_size, timeout=timedelta(seconds=60))
    try:
        _check_rank(rank, world_size, name)
    finally:
        dist.destroy_process_group()


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("name", PROBLEMS)
def test_reference_matches_torch_alt(name):
    mp.spawn(_worker, args=(name, WORLD_SIZE, _free_port()), nprocs=WORLD_SIZE)


@pytest.mark.parametrize("name", PROBLEMS)
def test_contract(name):
    problem = _problem(name)
    assert set(problem.META) >= {"name", "category", "models", "dtypes", "world_sizes", "description"}
    assert name.endswith(problem.META["name"])
    assert problem.META["category"] in {"collectives", "fused", "moe"}
    assert {"tiny", "large"} <= set(problem.SIZES)
    for size in ("tiny", "large"):
        for dtype in problem.META["dtypes"]:
            for world_size in problem.META["world_sizes"]:
                c = problem.cost(world_size, size, dtype)
                assert all(isinstance(v, int) and v >= 0 for v in c.values()), (size, dtype, world_size, c)
                assert c["link_bytes"] > 0 and c["hbm_bytes"] > 0, (size, dtype, world_size, c)


@pytest.mark.parametrize("name", PROBLEMS)
def test_make_inputs_deterministic(name):
    problem = _problem(name)

    def draw(seed):
        return problem.make_inputs(1, WORLD_SIZE, "tiny", "bfloat16", seed)

    def same(a, b):
        return all(torch.equal(x, y) if torch.is_tensor(x) else x == y for x, y in zip(a, b))

    assert same(draw(0), draw(0))
    assert not same(draw(0), draw(1))
