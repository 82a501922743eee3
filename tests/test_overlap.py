"""Overlap schedules: the registry (every schedule a method of its op, one GEMM, words and look per name, figures
drawing each pattern's schedules apart), kernels and argument structs on CPU, the studies' errors on machines with
too few GPUs; on every GPU of the machine and on 2, 3, 4 and 8 ranks sharing one GPU every schedule against float32
on fresh random inputs, poisoned outputs, shapes whose tiles do not divide, every rank checked, repeated calls."""
import re
from pathlib import Path

import pandas as pd
import pytest

from pkit.ops import overlap as O
from pkit.ops.overlap_patterns import GEMMS, OPTIONS, PATTERNS, TORCH, gemm_of, schedules
from pkit.ops.transfers import MECHANISMS as PEER_MECHANISMS
from pkit.tolerance import bf16_gemm

ROOT = Path(__file__).resolve().parents[1]
# every AG+GEMM schedule, sm_pull on 3 SMs and on 32
AG_VARIANTS = [(s.name, options) for s in PATTERNS["ag_gemm"].schedules for options in s.variants(comm_sms=[3, 32])]
PARTIAL = [(p.name, s) for p in PATTERNS.values() if p.op_class == "PartialGemm" for s in p.names]


def test_pull_rows_compiles_with_the_host_layout(cache_dir):
    from pkit.compiler import KERNEL_DIR, compile_cubin

    text = (KERNEL_DIR / "overlap.cu").read_text() + "\n" + O.PULL_ROWS.layout_asserts() + "\n"
    module = compile_cubin(text, arch="sm_90a", name_expressions=["pull_rows"])
    assert module.lowered["pull_rows"].startswith("_Z")


def test_schedules_are_listed_with_what_they_spend_on_communication():
    table = O.list_schedules()
    assert list(zip(table["pattern"], table["name"])) == [(p.name, s.name) for p in PATTERNS.values()
                                                          for s in p.schedules]
    assert table["description"].str.len().min() > 20
    assert set(table["sms_for_communication"]) == {"none", "NCCL's", "comm_sms"}
    assert table.set_index(["pattern", "name"]).loc[("ag_gemm", "sm_pull"), "options"] == "comm_sms=[16]"


def test_every_schedule_is_a_method_of_its_patterns_op():
    from types import SimpleNamespace

    for pattern in PATTERNS.values():
        own = O.op_class(pattern).pattern  # PartialGemm's follows its `scatter`, which the pattern's op_options set
        assert (own.fget(SimpleNamespace(**pattern.op_options)) if isinstance(own, property) else own) == pattern.name
        for s in pattern.schedules:
            assert callable(getattr(O.op_class(pattern), s.name, None)), f"{pattern.op_class} has no method {s.name}"
            assert s.gemm in GEMMS and s.transfer in {"nccl", *PEER_MECHANISMS}
            assert s.communication in ("none", "NCCL's", *s.options)
    assert "comm_sms" in OPTIONS and PATTERNS["ag_gemm"].schedule("sm_pull").variants() == [{"comm_sms": 16}]
    assert PATTERNS["gemm_rs"].schedule("tma_add").variants() == [{}]
    names = PATTERNS["gemm_ar"].names
    elsewhere = next(name for name in schedules() if name not in names)  # another pattern's schedule
    with pytest.raises(ValueError, match=rf"schedule: expected one of {re.escape(str(list(names)))} \(gemm_ar\)"):
        PATTERNS["gemm_ar"].schedule(elsewhere)


def test_a_name_shared_by_patterns_is_one_schedule():
    """serial and tma_add appear in several patterns: each time the same GEMM, transfer, words and look."""
    every = [s for p in PATTERNS.values() for s in p.schedules] + list(TORCH)
    for s in every:
        first = schedules()[s.name]
        assert (s.gemm, s.transfer, s.communication, s.label, s.look) == (
            first.gemm, first.transfer, first.communication, first.label, first.look), s.name
    assert gemm_of("serial") == gemm_of("ce_chunks") == "cublas" and gemm_of("tma_pull") == "pkit_gemm"
    with pytest.raises(ValueError, match="schedule: expected one of"):
        gemm_of("fused")


def test_patterns_say_their_cost_flops_collective_and_swept_size():
    from pkit.roofline import floor

    ag, rs, ar = PATTERNS["ag_gemm"], PATTERNS["gemm_rs"], PATTERNS["gemm_ar"]
    assert ag.flops(8192, 4096, 1024, 2) == 2 * 8192 * 4096 * 1024  # every GPU multiplies all M rows
    assert rs.flops(8192, 4096, 1024, 2) == ar.flops(8192, 4096, 1024, 2) == 8192 * 4096 * 1024  # K split in two
    assert floor(ar.cost(8192, 1024, 8192, 2)).link_s == 2 * floor(rs.cost(8192, 1024, 8192, 2)).link_s
    frame = pd.DataFrame({"n": [1024, 8192], "k": [8192, 1024], "gpus": [2, 2]})
    assert ag.inner(frame).tolist() == [1024, 8192] and rs.inner(frame).tolist() == [4096, 512]
    # the serial schedules' collective, by the name NCCL's recorded times carry (the overlap model looks it up)
    recorded = set(pd.read_csv(ROOT / "results/h200x2-nv18/collectives_pkit_nccl.csv")["op"])
    assert {p.nccl_op for p in PATTERNS.values()} <= recorded
    import torch
    import torch.distributed._symmetric_memory  # noqa: F401  (registers torch.ops.symm_mem)

    assert all(callable(getattr(torch.ops.symm_mem, p.torch_fused)) for p in PATTERNS.values() if p.torch_fused)


def test_figures_draw_each_patterns_schedules_apart_and_name_them():
    from pkit import figures
    from pkit.ops.transfers import MECHANISMS

    for s in schedules().values():
        if s.name in MECHANISMS:  # drawn as the transfer mechanism it is named after, which has its own look
            assert s.look is None and not s.label
        else:
            assert s.look and figures.label(s.name) == s.label and figures.COLORS[s.name] == figures.HUES[s.look.hue]
            assert figures.marker(s.name) == s.look.marker and (figures.LINESTYLES.get(s.name) == "--") == s.look.dashed
    for p in PATTERNS.values():
        assert figures.label(p.name) == p.title
        names = list(p.names) + ([s.name for s in TORCH] if p.torch_fused else [])
        assert len(set(figures.colors_for(names).values())) == len(names), f"{p.name}: two schedules share a colour"
        assert len({figures.marker(n) for n in names}) == len(names), f"{p.name}: two schedules share a marker"


def test_docs_recipe_names_files_that_exist_and_lists_every_schedule():
    """docs/overlap.md says which files a new schedule touches, and its tables list the registry's schedules."""
    text = (ROOT / "docs/overlap.md").read_text()
    recipe = text.split("## Adding a schedule", 1)[1].split("\n## ", 1)[0]
    paths = set(re.findall(r"`((?:pkit|tests|docs)/[\w/.]+)`", recipe))
    assert {"pkit/ops/overlap.py", "pkit/ops/overlap_patterns.py", "docs/overlap.md"} <= paths
    assert all((ROOT / path).exists() for path in paths), sorted(p for p in paths if not (ROOT / p).exists())
    documented = set(re.findall(r"^\| `(\w+)` \|", text, flags=re.M))
    assert documented == {s for p in PATTERNS.values() for s in p.names}


def test_no_other_module_keeps_a_list_of_schedules():
    """Two or more of the schedules not named after anything else, spelled out together, outside the registry."""
    import ast

    from pkit.ops.transfers import MECHANISMS

    own = {n for n in schedules() if n not in MECHANISMS and n != "serial"}
    found = []
    for path in sorted((ROOT / "pkit").rglob("*.py")) + [ROOT / "tests/synthetic_results.py"]:
        if path.name == "overlap_patterns.py":  # the registry
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            items = node.keys if isinstance(node, ast.Dict) else getattr(node, "elts", [])
            names = {i.value for i in items if isinstance(i, ast.Constant) and i.value in own}
            if isinstance(node, (ast.Dict, ast.List, ast.Tuple, ast.Set)) and len(names) >= 2:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, f"hand-kept schedule lists (read pkit.ops.overlap_patterns instead): {found}"


def skip_nccl_on_a_shared_gpu(team, schedule: str) -> None:
    if team.shares_gpus and schedule == "serial":
        pytest.skip("serial runs NCCL, which takes one GPU per rank")


def _fill(op, seed):
    import torch

    gen = torch.Generator(device="cpu").manual_seed(seed)
    shards = [torch.randn(op.shard_rows, op.k, generator=gen).bfloat16() for _ in range(op.team.size)]
    weights = [torch.randn(op.n_local, op.k, generator=gen).bfloat16() for _ in range(op.team.size)]
    for r in range(op.team.size):
        with torch.cuda.device(op.team.devices[r]):
            op.shard(r).copy_(shards[r])
            op.weight(r).copy_(weights[r])
            op.out(r).fill_(float("nan"))
            others = [q for q in range(op.team.size) if q != r]
            for q in others:  # poison the rows that must arrive from peers
                op.gathered.torch(r)[q * op.shard_rows:(q + 1) * op.shard_rows].fill_(float("nan"))
    op.team.synchronize()
    return torch.cat(shards).float(), weights


@pytest.mark.parametrize("schedule, options", AG_VARIANTS)
def test_schedule_matches_float32_on_every_rank(team, schedule, options):
    import torch

    skip_nccl_on_a_shared_gpu(team, schedule)
    op = O.AllGatherGemm(team, m=team.size * 384, k=520, n_local=776, chunk_rows=128)  # 3 chunks per rank
    for call in range(3):  # fresh inputs each call: a stale flag or chunk from the last call shows
        a, weights = _fill(op, seed=call)
        op.run(schedule, **options)
        team.synchronize()
        for r in range(team.size):
            want = a @ weights[r].float().T
            torch.testing.assert_close(op.out(r).float().cpu(), want, **bf16_gemm(op.k),
                                       msg=lambda m, r=r: f"rank {r}, call {call}: {m}")


def test_bad_arguments_name_the_argument(team):
    m = team.size * 128
    with pytest.raises(ValueError, match="m, chunk_rows: expected m to split"):
        O.AllGatherGemm(team, m=m + 1000, k=64, n_local=64, chunk_rows=128)
    with pytest.raises(ValueError, match="k, n_local"):
        O.AllGatherGemm(team, m=m, k=12, n_local=64, chunk_rows=128)
    op = O.AllGatherGemm(team, m=m, k=64, n_local=64, chunk_rows=128)
    names = PATTERNS["ag_gemm"].names
    with pytest.raises(ValueError, match=rf"schedule: expected one of {re.escape(str(list(names)))} \(ag_gemm\)"):
        op.run("fused")
    with pytest.raises(ValueError, match="comm_sms: expected an integer"):
        op.run("sm_pull", comm_sms=0)


def test_variants_time_each_schedule_once_per_point_of_its_option_grid():
    from pkit.experiments import overlap as E

    assert E.variants(["ce_flags", "sm_pull"], comm_sms=[4, 8]) == [("ce_flags", {}), ("sm_pull", {"comm_sms": 4}),
                                                                   ("sm_pull", {"comm_sms": 8})]
    assert E.variants(["sm_pull"]) == [("sm_pull", {"comm_sms": 16})]  # the registry's grid
    assert E.variants(["tma_add"], "gemm_ar") == [("tma_add", {})]
    with pytest.raises(ValueError, match="schedules: expected names from"):
        E.variants(["fused"], comm_sms=[4])
    with pytest.raises(ValueError, match="schedules: expected names from"):
        E.variants(["sm_pull"], "gemm_rs")
    with pytest.raises(ValueError, match=r"grids: expected options of ag_gemm's schedules \['comm_sms'\]"):
        E.variants(["sm_pull"], chunks=[2])


@pytest.mark.multigpu
def test_sweep_and_timeline_at_a_small_shape(two_gpus):
    from pkit.experiments import overlap as E

    team = two_gpus

    frame = E.sweep(team, n_locals=[512], m=1024, k=256, comm_sms=[4], chunk_rows=128, reps=3, warmup=1)
    assert frame["schedule"].tolist() == list(PATTERNS["ag_gemm"].names) and frame["verified"].all()
    assert (frame["time_median_us"] > 0).all()
    for scatter in (True, False):
        partial = E.sweep_partial(team, k_locals=[256], m=512, n=512, scatter=scatter, reps=3, warmup=1)
        assert partial["schedule"].tolist() == list(PATTERNS["gemm_rs"].names) and partial["verified"].all()
    bounds = E.with_bounds(pd.concat([frame, partial]))
    assert bounds["bound_us"].gt(0).all() and set(bounds["pattern"]) == {"ag_gemm", "gemm_ar"}
    line = E.timeline(team, n_local=512, m=1024, k=256, chunk_rows=128)
    for r in range(team.size):
        mine = line[line["rank"] == r]
        assert sorted(mine[mine["kind"] == "copy"]["row"]) == [q * 128 for q in range(8) if q // 4 != r]
        assert len(mine[mine["kind"] == "gemm"]) == 1 + 4 and (mine["end_us"] >= mine["start_us"]).all()


@pytest.mark.parametrize("gpus", [0, 1])
def test_studies_need_two_gpus_and_say_so(gpus_here, gpus):
    """The studies' default is every GPU of the machine; with fewer than two, one clear error naming the argument."""
    import pkit
    from pkit.experiments import overlap as E

    gpus_here(gpus)
    nccl = (r"expected at least 2 distinct GPUs \(2 GPUs with peer access, one per rank \(NCCL\)\), this machine "
            rf"has {gpus}")
    peer = rf"expected at least 2 distinct GPUs \(2 GPUs with peer access\), this machine has {gpus}"
    for study, needs in (("ag_gemm", nccl), ("timeline", peer), ("torch_gemm_rs", nccl)):
        with pytest.raises(pkit.PkitError, match=f"gpus: {needs}"):
            E.measure(study)
    with pytest.raises(pkit.PkitError, match=f"nproc: {nccl}"):
        E.torch_sweep([512])
    assert E.parameters(None, 10) == {"gpus": list(range(gpus)), "reps": 10}


def test_torchrun_reports_a_failed_module():
    from pkit.experiments.torchrun import torchrun

    with pytest.raises(ValueError, match="nproc: expected"):
        torchrun("pkit.experiments.overlap.pytorch", [], nproc=0)
    with pytest.raises(RuntimeError, match="pkit.no_such_module under torchrun failed"):
        torchrun("pkit.no_such_module", [], nproc=1, timeout_s=120)


@pytest.mark.multigpu
def test_torch_schedules_are_checked_and_timed():
    import pkit
    from pkit.experiments import overlap as E

    for pattern in E.TORCH_PATTERNS:  # one process per GPU of the machine; M = 1680 splits over 1 to 8
        frame = E.torch_sweep([512], pattern=pattern, m=1680, k=256, n=512, reps=3)
        assert frame["schedule"].tolist() == [s.name for s in TORCH] and frame["verified"].all()
        assert (frame["time_median_us"] > 0).all() and set(frame["gpus"]) == {len(pkit.devices())}
    with pytest.raises(ValueError, match="pattern: expected"):
        E.torch_sweep([512], pattern="gemm_ar")


@pytest.mark.parametrize("pattern, schedule", PARTIAL)
def test_partial_products_sum_on_every_rank(team, pattern, schedule):
    import torch

    from pkit.experiments import overlap as E

    skip_nccl_on_a_shared_gpu(team, schedule)

    op = O.make(PATTERNS[pattern], team, m=team.size * 256, k_local=264, n=776)
    scatter = op.scatter
    for call in range(2):
        gen = torch.Generator(device="cpu").manual_seed(call)
        lhs = [torch.randn(op.m, op.k_local, generator=gen).bfloat16() for _ in range(team.size)]
        rhs = [torch.randn(op.n, op.k_local, generator=gen).bfloat16() for _ in range(team.size)]
        for r in range(team.size):
            with torch.cuda.device(team.devices[r]):
                op.lhs(r).copy_(lhs[r])
                op.weight(r).copy_(rhs[r])
                op.out(r).fill_(float("nan"))
        team.synchronize()
        op.run(schedule)
        team.synchronize()
        parts = [x.float() @ w.float().T for x, w in zip(lhs, rhs)]
        total, scale = sum(parts), sum(p.abs() for p in parts)
        for r in range(team.size):
            rows = slice(r * op.out_rows, (r + 1) * op.out_rows) if scatter else slice(None)
            # each partial rounded to bf16, then summed in bf16: errors relative to the partials, which may cancel
            ok, err = E.bf16_match(op.out(r).cpu(), total[rows], op.k_local, roundings=2, scale=scale[rows])
            assert ok, f"rank {r}, call {call}: largest error {err}"


def test_bf16_match_accepts_rounding_and_rejects_wrong_or_poisoned_outputs():
    import torch

    from pkit.experiments.overlap import bf16_match

    want = torch.randn(64, 64, generator=torch.Generator().manual_seed(0)) * 8
    assert bf16_match(want.bfloat16(), want, terms=64) == (True, float((want.bfloat16().float() - want).abs().max()))
    wrong = want.clone()
    wrong[3, 5] += 1.0
    assert not bf16_match(wrong.bfloat16(), want, terms=64)[0]
    poisoned = want.bfloat16()
    poisoned[0, 0] = float("nan")
    assert not bf16_match(poisoned, want, terms=64)[0]
