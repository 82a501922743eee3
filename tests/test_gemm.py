"""pkit's Hopper GEMM: argument checks and plans on CPU; on a GPU, C = A · Bᵀ against float32 for every kernel
variant (bf16 and FP8, every tile width, split-K, blocks alone and in pairs sharing B's or A's loads, consumers on
alternate tiles) at shapes whose tiles do not divide, with a poisoned output."""
import pytest

torch = pytest.importorskip("torch")

from pkit.ops import gemm as G  # noqa: E402
from pkit.ops import gemm_plans as P  # noqa: E402
from pkit.tolerance import bf16_gemm  # noqa: E402


PLANS = [P.Plan(w, s, st, c, alt, sa, r) for w, st, c, alt, sa, r in P.VARIANTS
         for s in ((1,) if alt else (1, 3))]  # each kernel, without and (where it runs it) with split-K
PAIRED = P.Plan(256, 1, 4, 2)  # blocks in pairs sharing B's loads
SHARING_A = P.Plan(128, 1, 6, 2, share_a=True)  # blocks in pairs sharing A's loads
ALTERNATE_SHARING_A = P.Plan(128, 1, 6, 2, True, True)  # alternate tiles in pairs sharing A's loads
SHORT = P.Plan(128, 1, 8, 1, True, rows=64)  # alternate 64-row tiles
SHORT_PAIRED = P.Plan(128, 1, 8, 2, True, rows=64)  # alternate 64-row tiles in pairs sharing B's loads
ALTERNATE = P.Plan(128, 1, 6, 1, True)  # consumers on alternate tiles


@pytest.fixture(scope="module")
def every_kernel(tmp_path_factory):
    """gemm.cu compiled for sm_90a with every variant's kernel in both input types, in one NVRTC run (the source is
    parsed once) into a fresh cubin cache."""
    from pkit.compiler import compile_cubin

    names = [G.kernel_name(P.Plan(w, 1, st, c, alt, sa, r), dtype) for w, st, c, alt, sa, r in P.VARIANTS
             for dtype in G.DTYPES]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PKIT_CACHE_DIR", str(tmp_path_factory.mktemp("cubin")))
        return compile_cubin("gemm.cu", arch="sm_90a", name_expressions=names)


@pytest.mark.parametrize("variant", P.VARIANTS, ids=str)
@pytest.mark.parametrize("dtype", G.DTYPES)
def test_every_variant_compiles_for_sm90a(every_kernel, variant, dtype):
    width, stages, cluster, alternate, share_a, rows = variant
    name = G.kernel_name(P.Plan(width, 1, stages, cluster, alternate, share_a, rows), dtype)
    assert every_kernel.lowered[name].startswith("_Z") and every_kernel.cubin


def test_plans_fill_the_sms_and_stay_in_bounds():
    """Many tiles: the widest, unsplit; few tiles: split-K brings the units near the SMs; never more splits than
    K slices (a unit with none would add nothing but its fixup)."""
    assert P.plan(8192, 8192, 8192, sms=132) == P.Plan(256, 1)
    few = P.plan(1024, 256, 8192, sms=132)
    assert few.splits > 1 and few.units(1024, 256) <= 132
    for m, n, k in [(128, 128, 64), (1000, 776, 1096), (8, 8, 8), (64, 4096, 128)]:
        for itemsize in (1, 2):
            p = P.plan(m, n, k, sms=132, itemsize=itemsize)
            assert p.block_n in P.TILE_WIDTHS and 1 <= p.splits <= max(1, -(-k // (P.SLICE_BYTES // itemsize)))
    assert all(p.cluster == 1 for p in P.plan_options(1024, 256, 8192, sms=1)), "a pair needs two SMs"


def test_pairs_count_the_tile_past_the_last_row_and_fill_the_sms_in_twos():
    """Pairs take row tiles two at a time: with an odd count the last pair's second block takes a tile past C (it
    writes nothing but occupies an SM), and a pair plan's waves are counted over the SMs that whole pairs fill."""
    assert P.Plan(256, 1, 4, 2).tiles(333, 512) == 4 * 2 and P.Plan(256, 1, 4).tiles(333, 512) == 3 * 2
    cheap_pairs = P.PlanRule(paired_slice=0.8)
    alone, paired = P.Plan(256, 1, 4), P.Plan(256, 1, 4, 2)
    assert cheap_pairs.cost(paired, 8192, 8192, 128, 132) < cheap_pairs.cost(alone, 8192, 8192, 128, 132)
    assert P.PlanRule().cost(paired, 131 * 128, 256, 128, 131) > P.PlanRule().cost(alone, 131 * 128, 256, 128, 131)
    assert P.plan(8192, 8192, 8192, 132, rule=cheap_pairs).cluster == 2
    assert SHARING_A.tiles(8 * 128, 3 * 128) == 8 * 4, "pairs sharing A take column tiles two at a time"
    assert SHORT_PAIRED.tiles(3 * 64, 128) == 4 and SHORT.tiles(3 * 64, 128) == 3, "64-row tiles"
    assert P.plan(1024, 1024, 8192, 132, rule=P.PlanRule(short_slice=0.5, alternate_overhead=0.0)).rows == 64
    assert P.plan(8192, 256, 8192, 132, rule=P.PlanRule(shared_a_slice=0.8)).share_a
    assert P.plan(8192, 8192, 8192, 132, rule=P.PlanRule()).cluster == 1, "ties go to blocks alone"


def test_alternate_tiles_pay_their_own_overhead_and_never_split():
    """Consumers on alternate tiles run whole 128-wide tiles with no split-K; a unit of theirs costs
    alternate_overhead slices where one shared by both consumers costs unit_overhead, so short K picks them."""
    options = P.plan_options(8192, 8192, 256, sms=132)
    assert {p.splits for p in options if p.alternate} == {1}
    assert {(p.block_n, p.cluster, p.share_a, p.rows) for p in options if p.alternate} == {
        (128, 1, False, 128), (128, 2, True, 128), (128, 1, False, 64), (128, 2, False, 64)}
    shared, alternate = P.Plan(128, 1, 6), ALTERNATE
    rule = P.PlanRule(narrow_slice=0.7, unit_overhead=6.0, alternate_overhead=1.0)
    waves = -(-shared.units(8192, 8192) // 132)
    assert rule.cost(shared, 8192, 8192, 4, 132) - rule.cost(alternate, 8192, 8192, 4, 132) == pytest.approx(
        waves * (6.0 - 1.0) * rule.narrow_slice)
    assert P.plan(8192, 8192, 256, 132, rule=rule).alternate
    assert not P.plan(8192, 8192, 8192, 132, rule=rule).alternate
    with pytest.raises(ValueError, match=r"splits in \[1, 16\] \(1 and no split tail with alternate tiles\)"):
        G._checked_plan(P.Plan(128, 2, 6, 1, True))
    with pytest.raises(ValueError, match=r"\(1 and no split tail with alternate tiles\)"):
        G._checked_plan(P.Plan(128, 1, 6, 1, True, split_tail=True))


def test_split_tails_cut_only_the_last_partial_wave():
    """4096 × 3584 in 128 × 256 tiles is 448 tiles: three whole waves on 132 SMs and 52 tiles left, each cut in two
    to fill the last wave; the unfitted rule never picks a split tail (its overhead is infinite), a rule that
    prices it at nothing does (with 128-wide slices at 0.6 of a 256-wide one's, so that 256-wide tiles win), and where the tiles fill whole waves or one wave at most nothing is left to split."""
    tail = P.Plan(256, 2, split_tail=True)
    assert tail.whole_tiles(4096, 3584, 132) == 396 and tail.units(4096, 3584, 132) == 396 + 52 * 2
    assert tail.whole_tiles(4096, 4096, 128) == 512 == tail.units(4096, 4096, 128), "four whole waves, no tail"
    assert tail.whole_tiles(1024, 2048, 132) == 0 and tail.units(1024, 2048, 132) == 64 * 2, "one wave: all split"
    paired = P.Plan(256, 2, 4, 2, split_tail=True)
    assert paired.whole_tiles(4096, 3584, 66) == 198 and paired.units(4096, 3584, 66) == (198 + 26 * 2) * 2
    with pytest.raises(ValueError, match="clusters: expected the clusters that run at once"):
        tail.units(4096, 3584)
    assert P.Plan(256, 2, 4, 1, split_tail=True) in P.plan_options(4096, 3584, 8192, 132)
    assert not any(p.split_tail for p in P.plan_options(1024, 2048, 8192, 132)), "one wave: plain split-K"
    assert not P.plan(4096, 3584, 8192, 132, rule=P.PlanRule(narrow_slice=0.6)).split_tail
    free = P.PlanRule(narrow_slice=0.6, tail_overhead=0.0)
    assert free.cost(tail, 4096, 3584, 128, 132) < free.cost(P.Plan(256, 1), 4096, 3584, 128, 132)
    assert free.cost(tail, 4096, 3584, 128, 132) == pytest.approx(
        3 * free.unit_cost(P.Plan(256, 1), 128, 1) + free.unit_cost(tail, 128, 2))
    assert P.plan(4096, 3584, 8192, 132, rule=free).split_tail


def test_shapes_and_work_struct_match_the_kernel(cache_dir):
    from pkit.compiler import KERNEL_DIR, compile_cubin

    text = "\n".join([(KERNEL_DIR / "gemm.cu").read_text(), P.SHAPE_ASSERTS, G.WORK.layout_asserts(), ""])
    assert compile_cubin(text, arch="sm_90a", name_expressions=[G.kernel_name(P.Plan(256, 1))]).cubin
    assert all(P.boxes(w, s, r) >= 1 and P.smem_bytes(w, s, r) <= 232448 for w, s, *_, r in P.VARIANTS)


@pytest.mark.parametrize("a, b, text", [
    (torch.zeros(4, 8), torch.zeros(4, 8), "a: expected a 2-D bfloat16 or float8_e4m3fn CUDA tensor"),
    (torch.zeros(4, 8, dtype=torch.bfloat16), torch.zeros(4, 8), "a: expected a 2-D bfloat16 or float8_e4m3fn CUDA tensor"),
])
def test_bad_arguments_name_the_argument(a, b, text):
    with pytest.raises(ValueError, match=text):
        G.gemm(a, b)


def _product(a, b):
    """A · Bᵀ in float32, computed on the CPU and returned on A's device: no cuBLAS kernel runs beside pkit's, so
    compute-sanitizer (scripts/sanitize.sh runs these tests) reports on pkit's kernels alone."""
    return (a.float().cpu() @ b.float().cpu().T).to(a.device)


def _poisoned_out(m, n):
    """C at the start of a larger NaN-poisoned buffer, and the buffer."""
    buffer = torch.full((m * n + 256 * n,), float("nan"), device="cuda", dtype=torch.bfloat16)
    return buffer[: m * n].view(m, n), buffer


@pytest.mark.gpu
@pytest.mark.parametrize("how", [None, *PLANS], ids=str)
@pytest.mark.parametrize("m, n, k", [(128, 256, 64), (1000, 776, 1096), (8, 8, 8), (333, 512, 4096)])
def test_gemm_matches_float32(m, n, k, how):
    """Every plan, on fresh inputs: the edge tiles' stores must stop at C's last row, and split-K's partials must
    add up (twice in a row: the arrival counts are left at zero for the next call)."""
    gen = torch.Generator(device="cuda").manual_seed(m * n + k)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=gen)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=gen)
    want = _product(a, b)
    for _ in range(2):
        out, buffer = _poisoned_out(m, n)
        G.gemm(a, b, out, how=how)
        torch.cuda.synchronize()
        # bf16 output rounding (2^-8 relative) plus fp32 accumulation-order differences over k terms
        torch.testing.assert_close(out.float(), want, **bf16_gemm(k))
        assert buffer[m * n:].isnan().all(), "the GEMM wrote past C"


@pytest.mark.gpu
@pytest.mark.parametrize("how", [None, *PLANS], ids=str)
@pytest.mark.parametrize("m, n, k", [(128, 256, 128), (1000, 776, 1104), (333, 512, 4096)])
def test_fp8_gemm_matches_float32_with_scales(m, n, k, how):
    """FP8 e4m3 inputs with per-tensor scales, as torch._scaled_mm: C = scale_a · scale_b · A · Bᵀ in bf16. Fast
    accumulation keeps fewer bits than fp32, so C must be within the accumulator's bound elementwise
    (pkit.tolerance.fp8_fast_accum_bound) and follow the float32 product at slope 1 (fp8_scale_matches); a scale
    applied twice or a K slice dropped fails both. (cuBLASLt is not called here: it refuses N = 776, and the
    sanitizer runs these tests on pkit's kernels alone.)"""
    from pkit.tolerance import fp8_fast_accum_bound, fp8_scale_matches

    gen = torch.Generator(device="cuda").manual_seed(m + n * k)
    a = torch.randn(m, k, device="cuda", generator=gen).to(torch.float8_e4m3fn)
    b = torch.randn(n, k, device="cuda", generator=gen).to(torch.float8_e4m3fn)
    scale_a, scale_b = 0.5 + torch.rand(1, device="cuda", generator=gen), 0.5 + torch.rand(1, device="cuda", generator=gen)
    want = _product(a, b) * (scale_a * scale_b)
    out, buffer = _poisoned_out(m, n)
    G.gemm(a, b, out, scale_a=scale_a, scale_b=scale_b, how=how)
    torch.cuda.synchronize()
    err = (out.float() - want).abs()
    assert torch.isfinite(out).all()
    assert (err <= fp8_fast_accum_bound(a, b, float(scale_a * scale_b), want)).all(), float(err.max())
    assert fp8_scale_matches(out, want)
    assert not fp8_scale_matches(out * 1.02, want), "the check must catch a 2% scale error"
    assert buffer[m * n:].isnan().all(), "the GEMM wrote past C"


@pytest.mark.gpu
def test_split_k_gemms_on_two_streams_keep_their_own_workspaces():
    """Two split-K GEMMs at once on two streams of one GPU (as ranks sharing it run them): each adds up its own
    partials."""
    import cupy as cp

    m, n, k = 256, 256, 4096
    pairs = [(_randn(m, k, seed=20 + i), _randn(n, k, seed=30 + i)) for i in range(2)]
    outs = [torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    torch.cuda.synchronize()
    streams = [cp.cuda.Stream(non_blocking=True) for _ in range(2)]
    for _ in range(3):
        for (a, b), out, stream in zip(pairs, outs, streams):
            with stream:
                G.gemm(a, b, out, how=P.Plan(128, 8))
    for s in streams:
        s.synchronize()
    for (a, b), out in zip(pairs, outs):
        torch.testing.assert_close(out.float(), _product(a, b), **bf16_gemm(k))


@pytest.mark.gpu
@pytest.mark.parametrize("kwargs, text", [
    (dict(m=64, n=64, k=12), "b: expected N × K with K = 12"),
    (dict(m=64, n=60, k=64), "b: expected a number of rows N that is a multiple of 8"),
    (dict(m=64, n=64, k=64, how=P.Plan(96, 1)),
     r"how: expected a Plan whose \(block_n, stages, cluster, alternate, share_a, rows\) is one of"),
    (dict(m=64, n=64, k=64, scale_a=1.0), "scale_a, scale_b: expected both for float8_e4m3fn inputs and neither"),
])
def test_gpu_argument_errors(kwargs, text):
    m, n, k = kwargs.pop("m"), kwargs.pop("n"), kwargs.pop("k")
    a = torch.zeros(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.zeros(n, k, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=text):
        G.gemm(a, b, **kwargs)


@pytest.mark.gpu
def test_fp8_argument_errors():
    a = torch.zeros(64, 64, device="cuda").to(torch.float8_e4m3fn)
    with pytest.raises(ValueError, match="scale_a, scale_b: expected both"):
        G.gemm(a, a)
    with pytest.raises(ValueError, match="scale_a: expected a one-element float32 tensor"):
        G.gemm(a, a, scale_a=torch.ones(2, device="cuda"), scale_b=torch.ones(1, device="cuda"))
    with pytest.raises(ValueError, match="b: expected torch.float8_e4m3fn as a is"):
        G.gemm(a, torch.zeros(64, 64, device="cuda", dtype=torch.bfloat16))


def test_rows_ready_struct_matches_the_kernel(cache_dir):
    from pkit.compiler import KERNEL_DIR, compile_cubin

    text = (KERNEL_DIR / "gemm.cu").read_text() + "\n" + G.ROWS_READY.layout_asserts() + "\n"
    assert compile_cubin(text, arch="sm_90a", name_expressions=[G.kernel_name(P.Plan(256, 1))]).cubin


def _randn(*shape, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, device="cuda", dtype=torch.bfloat16, generator=gen)


@pytest.mark.gpu
@pytest.mark.parametrize("blocks", [1, 2, 7, None])
@pytest.mark.parametrize("how", [None, P.Plan(128, 3), PAIRED, P.Plan(128, 3, 6, 2), SHARING_A, ALTERNATE,
                                 ALTERNATE_SHARING_A, SHORT, SHORT_PAIRED], ids=str)
def test_persistent_blocks_cover_every_tile(blocks, how):
    """However few the blocks (pairs: an odd count runs one fewer), every tile is written, 7 row tiles of C
    included (a pair's last block takes the tile past the last row)."""
    a, b = _randn(850, 520, seed=1), _randn(776, 520, seed=2)
    if how is not None and blocks is not None and blocks < how.cluster:
        with pytest.raises(ValueError, match="blocks: expected at least 2 for a plan in clusters of 2"):
            G.gemm(a, b, blocks=blocks, how=how)
        return
    out = G.gemm(a, b, blocks=blocks, how=how)
    torch.cuda.synchronize()
    torch.testing.assert_close(out.float(), _product(a, b), **bf16_gemm(520))


@pytest.mark.gpu
@pytest.mark.parametrize("blocks, how", [(5, P.Plan(256, 3, split_tail=True)), (6, P.Plan(128, 2, 6, 2, split_tail=True)),
                                         (6, P.Plan(128, 4, 6, 2, share_a=True, split_tail=True)),
                                         (9, P.Plan(256, 2, 3, 1, split_tail=True))], ids=str)
def test_a_split_tail_writes_every_tile_call_after_call(blocks, how):
    """The whole waves run a tile a unit, the last partial wave's tiles are split and summed in the workspace; a
    second call on other inputs reads none of the first's partials or arrival counts."""
    m, n, k = 850, 776, 1000
    tiles = how.tiles(m, n) // how.cluster
    assert how.whole_tiles(m, n, blocks // how.cluster) not in (0, tiles), "the case has whole waves and a tail"
    for seed in (40, 50):
        a, b = _randn(m, k, seed=seed), _randn(n, k, seed=seed + 1)
        out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        G.gemm(a, b, out, blocks=blocks, how=how)
        torch.cuda.synchronize()
        torch.testing.assert_close(out.float(), _product(a, b), **bf16_gemm(k))


@pytest.mark.gpu
def test_pairs_run_as_many_as_fit_at_once():
    """A pair plan launches whole clusters, no more than the GPU runs at once."""
    import pkit

    sms = pkit.devices()[0].sms
    resident = G.resident_clusters(PAIRED, "bfloat16", 0)
    assert 1 <= resident <= sms // 2
    assert G.launch_blocks(PAIRED, 8192, 8192, sms, "bfloat16", 0) == 2 * resident
    assert G.launch_blocks(PAIRED, 8192, 8192, 7, "bfloat16", 0) == 6


@pytest.mark.gpu
@pytest.mark.parametrize("how", [None, PAIRED, SHARING_A, ALTERNATE, ALTERNATE_SHARING_A, SHORT_PAIRED], ids=str)
def test_rows_are_read_only_after_their_flag(how):
    """A arrives 256 rows at a time on a side stream (a copy, then a flag write); the GEMM, launched first and
    given all but 8 SMs, must wait for each part and still multiply the right rows."""
    import cupy as cp

    from pkit.driver import stream_write_value32

    m, n, k, rows_per_flag = 1024, 512, 768, 256
    source, b = _randn(m, k, seed=3), _randn(n, k, seed=4)
    a = torch.full_like(source, float("nan"))
    flags = cp.zeros(m // rows_per_flag, dtype=cp.uint32)
    sms = __import__("pkit").devices()[0].sms
    out = G.gemm(a, b, blocks=sms - 8, ready=flags.data.ptr, epoch=7, rows_per_flag=rows_per_flag, first_row=512,
                 how=how)
    side = cp.cuda.Stream(non_blocking=True)
    with side:
        for f in [2, 3, 0, 1]:  # the GEMM starts at row 512: those parts come first
            rows = slice(f * rows_per_flag, (f + 1) * rows_per_flag)
            cp.cuda.runtime.memcpyAsync(a[rows].data_ptr(), source[rows].data_ptr(), rows_per_flag * k * 2,
                                        cp.cuda.runtime.memcpyDeviceToDevice, side.ptr)
            stream_write_value32(side.ptr, flags.data.ptr + 4 * f, 7)
    torch.cuda.synchronize()
    side.synchronize()
    torch.testing.assert_close(out.float(), _product(source, b), **bf16_gemm(k))


@pytest.mark.gpu
def test_a_flag_that_never_comes_raises_peer_timeout_in_its_own_process():
    import os
    import subprocess
    import sys
    import textwrap
    from pathlib import Path

    script = textwrap.dedent("""
        import cupy as cp, torch, pkit, pkit.launch as L
        from pkit.ops.gemm import gemm
        L.set_wait_timeout(0.3)
        a = torch.zeros(256, 64, device="cuda", dtype=torch.bfloat16); b = torch.zeros(256, 64, device="cuda", dtype=torch.bfloat16)
        flags = cp.zeros(2, dtype=cp.uint32)
        gemm(a, b, ready=flags.data.ptr, epoch=1, rows_per_flag=128)
        try:
            L.synchronize([0])
        except pkit.PeerTimeout as e:
            print("TIMEOUT", e.kernel, round(e.waited_s, 2))
    """)
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(root)})
    assert "TIMEOUT" in out.stdout, out.stdout + out.stderr
    assert 0.3 <= float(out.stdout.split()[-1]) < 2.0


def test_tile_targets_struct_matches_the_kernel(cache_dir):
    from pkit.compiler import KERNEL_DIR, compile_cubin

    text = (KERNEL_DIR / "gemm.cu").read_text() + "\n" + G.TILE_TARGETS_ASSERTS + "\n" + G.A_SOURCES_ASSERTS + "\n"
    assert compile_cubin(text, arch="sm_90a", name_expressions=[G.kernel_name(P.Plan(256, 1))]).cubin
    with pytest.raises(ValueError, match="targets: expected 1 to 8"):
        G.tile_targets([], n=64)
    with pytest.raises(ValueError, match="rows_per_target: expected 0 or a positive multiple of 128"):
        G.tile_targets([(0, 64)], n=64, rows_per_target=100)


@pytest.mark.gpu
@pytest.mark.parametrize("how", [None, PAIRED, SHARING_A, ALTERNATE, ALTERNATE_SHARING_A, SHORT_PAIRED], ids=str)
def test_tiles_added_into_every_target_or_scattered_by_rows(how):
    m, n, k = 512, 776, 520
    a, b = _randn(m, k, seed=5), _randn(n, k, seed=6)
    want = _product(a, b)
    tol = dict(rtol=2 ** -6, atol=2e-3 * k ** 0.5)  # two bf16 roundings: the product's, then the sum's
    both = [torch.zeros(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    targets = G.tile_targets([(t.data_ptr(), m) for t in both], n=n)
    G.gemm(a, b, add_into=targets, how=how)
    G.gemm(a, b, add_into=targets, how=how)  # adds again: every target holds 2 · A · Bᵀ
    torch.cuda.synchronize()
    for t in both:
        torch.testing.assert_close(t.float(), 2 * want, **tol)
    halves = [torch.full((m // 2, n), 1.0, device="cuda", dtype=torch.bfloat16) for _ in range(2)]
    G.gemm(a, b, add_into=G.tile_targets([(t.data_ptr(), m // 2) for t in halves], n=n, rows_per_target=m // 2),
           how=how)
    torch.cuda.synchronize()
    torch.testing.assert_close(torch.cat(halves).float(), want + 1, **tol)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3fn"])
def test_gemm_rates_checks_each_and_compares_them(dtype):
    from pkit.experiments import overlap as E
    from pkit.experiments.overlap.gemm import IMPLEMENTATIONS

    frame = E.gemm_rates([(256, 512, 272), (1024, 256, 2048)], dtype=dtype, reps=3, warmup=1)
    assert frame["implementation"].tolist() == list(IMPLEMENTATIONS[dtype]) * 2 and frame["verified"].all()
    assert frame.loc[frame["implementation"] == "cublas", "ratio_to_cublas"].tolist() == [1.0, 1.0]
    with pytest.raises(ValueError, match="study: expected one of"):
        E.measure("fused")


@pytest.mark.gpu
def test_plan_sweep_times_every_plan_and_marks_the_chosen_one():
    from pkit.experiments.overlap.gemm import SPLIT_GRID, plan_sweep

    frame = plan_sweep([(1024, 256, 1024)], dtypes=["bfloat16"], reps=2, warmup=1)
    assert frame["verified"].all() and frame["chosen"].sum() == 1
    sms = __import__("pkit").devices()[0].sms
    assert len(frame) == len(P.plan_options(1024, 256, 1024, sms, splits=SPLIT_GRID))
    assert set(zip(frame["block_n"], frame["stages"], frame["cluster"], frame["alternate"],
                   frame["share_a"], frame["rows"])) == set(P.VARIANTS)
    assert frame["ratio_to_best"].max() == 1.0


@pytest.mark.gpu
@pytest.mark.parametrize("how", [None, PAIRED, SHARING_A, ALTERNATE, ALTERNATE_SHARING_A, SHORT_PAIRED], ids=str)
def test_rows_of_a_read_from_several_sources(how):
    """A's three row blocks live in three separate tensors: the GEMM reads each where it lies (in pairs, the block
    past the third row block loads its partner's rows, never a fourth source's)."""
    m, n, k, rows = 384, 776, 520, 128
    parts = [_randn(rows, k, seed=10 + q) for q in range(3)]
    b = _randn(n, k, seed=13)
    shape_only = torch.empty(m, k, device="cuda", dtype=torch.bfloat16)
    sources = G.a_sources(tuple((p.data_ptr(), rows) for p in parts), k, rows)
    out = G.gemm(shape_only, b, a_from=sources, how=how)
    torch.cuda.synchronize()
    torch.testing.assert_close(out.float(), _product(torch.cat(parts), b), **bf16_gemm(k))
    with pytest.raises(ValueError, match="rows_per_source: expected a positive multiple of 128"):
        G.a_sources(((parts[0].data_ptr(), rows),), k, 100)
