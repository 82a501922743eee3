"""All-gather + GEMM schedules: kernels and argument structs on CPU, the studies' errors on machines with too few
GPUs; on every GPU of the machine and on 2, 3, 4 and 8 ranks sharing one GPU every schedule against float32 on fresh
random inputs, poisoned outputs, shapes whose tiles do not divide, every rank checked, repeated calls."""
import pandas as pd
import pytest

from pkit.ops import overlap as O


def test_pull_rows_compiles_with_the_host_layout(cache_dir):
    from pkit.compiler import KERNEL_DIR, compile_cubin

    text = (KERNEL_DIR / "overlap.cu").read_text() + "\n" + O.PULL_ROWS.layout_asserts() + "\n"
    module = compile_cubin(text, arch="sm_90a", name_expressions=["pull_rows"])
    assert module.lowered["pull_rows"].startswith("_Z")


def test_schedules_are_listed_with_what_they_spend_on_communication():
    table = O.list_schedules()
    assert table["name"].tolist() == list(O.SCHEDULES) + list(O.PARTIAL_SCHEDULES)
    assert table["description"].str.len().min() > 20
    assert set(table["sms_for_communication"]) == {"none", "NCCL's", "comm_sms"}


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


@pytest.mark.parametrize("schedule, options", [("serial", {}), ("ce_chunks", {}), ("ce_flags", {}),
                                               ("sm_pull", {"comm_sms": 3}), ("sm_pull", {"comm_sms": 32}),
                                               ("tma_pull", {})])
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
            torch.testing.assert_close(op.out(r).float().cpu(), want, rtol=2 ** -7, atol=1e-3 * op.k ** 0.5,
                                       msg=lambda m, r=r: f"rank {r}, call {call}: {m}")


def test_bad_arguments_name_the_argument(team):
    m = team.size * 128
    with pytest.raises(ValueError, match="m, chunk_rows: expected m to split"):
        O.AllGatherGemm(team, m=m + 1000, k=64, n_local=64, chunk_rows=128)
    with pytest.raises(ValueError, match="k, n_local"):
        O.AllGatherGemm(team, m=m, k=12, n_local=64, chunk_rows=128)
    op = O.AllGatherGemm(team, m=m, k=64, n_local=64, chunk_rows=128)
    with pytest.raises(ValueError, match="schedule: expected one of"):
        op.run("fused")
    with pytest.raises(ValueError, match="comm_sms: expected an integer"):
        op.run("sm_pull", comm_sms=0)


def test_variants_time_sm_pull_once_per_sm_count():
    from pkit.experiments import overlap as E

    assert E.variants(["ce_flags", "sm_pull"], [4, 8]) == [("ce_flags", {}), ("sm_pull", {"comm_sms": 4}),
                                                          ("sm_pull", {"comm_sms": 8})]
    with pytest.raises(ValueError, match="schedules: expected names from"):
        E.variants(["fused"], [4])


@pytest.mark.multigpu
def test_sweep_and_timeline_at_a_small_shape(two_gpus):
    from pkit.experiments import overlap as E

    team = two_gpus

    frame = E.sweep(team, n_locals=[512], m=1024, k=256, comm_sms=[4], chunk_rows=128, reps=3, warmup=1)
    assert frame["schedule"].tolist() == list(O.SCHEDULES) and frame["verified"].all()
    assert (frame["time_median_us"] > 0).all()
    for scatter in (True, False):
        partial = E.sweep_partial(team, k_locals=[256], m=512, n=512, scatter=scatter, reps=3, warmup=1)
        assert partial["schedule"].tolist() == list(O.PARTIAL_SCHEDULES) and partial["verified"].all()
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
    needs = (r"expected at least 2 distinct GPUs \(one GPU per rank: the serial schedules run NCCL\), this machine "
             rf"has {gpus}")
    for study in ("ag_gemm", "timeline", "torch_gemm_rs"):
        with pytest.raises(pkit.PkitError, match=f"gpus: {needs}"):
            E.measure(study)
    with pytest.raises(pkit.PkitError, match=f"nproc: {needs}"):
        E.torch_sweep([512])
    assert E.parameters(None, 10) == {"gpus": list(range(gpus)), "reps": 10}


def test_torchrun_reports_a_failed_module():
    from pkit.experiments.torchrun import torchrun

    with pytest.raises(ValueError, match="nproc: expected"):
        torchrun("pkit.experiments.torch_overlap", [], nproc=0)
    with pytest.raises(RuntimeError, match="pkit.no_such_module under torchrun failed"):
        torchrun("pkit.no_such_module", [], nproc=1, timeout_s=120)


@pytest.mark.multigpu
def test_torch_schedules_are_checked_and_timed():
    import pkit
    from pkit.experiments import overlap as E

    for pattern in ("ag_gemm", "gemm_rs"):  # one process per GPU of the machine; M = 1680 splits over 1 to 8
        frame = E.torch_sweep([512], pattern=pattern, m=1680, k=256, n=512, reps=3)
        assert frame["schedule"].tolist() == ["torch_serial", "torch_async_tp"] and frame["verified"].all()
        assert (frame["time_median_us"] > 0).all() and set(frame["gpus"]) == {len(pkit.devices())}
    with pytest.raises(ValueError, match="pattern: expected"):
        E.torch_sweep([512], pattern="gemm_ar")


@pytest.mark.parametrize("scatter", [True, False], ids=["gemm_rs", "gemm_ar"])
@pytest.mark.parametrize("schedule", list(O.PARTIAL_SCHEDULES))
def test_partial_products_sum_on_every_rank(team, schedule, scatter):
    import torch

    from pkit.experiments import overlap as E

    skip_nccl_on_a_shared_gpu(team, schedule)

    op = O.PartialGemm(team, m=team.size * 256, k_local=264, n=776, scatter=scatter)
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
