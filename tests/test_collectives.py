"""Collectives: busbw formulas and argument checks on CPU, the sweeps' errors on machines with too few GPUs; every
op, mechanism and dtype (and a rooted op's roots) against float64 on every GPU of the machine and on 2, 3, 4 and 8
ranks sharing one GPU."""
import re
from types import SimpleNamespace

import numpy as np
import pytest

import pkit
from pkit.bf16 import from_bf16_bits, to_bf16_bits
from pkit.ops import collectives as C

TOLERANCE = {"float32": 1e-5, "bfloat16": 1e-2}  # relative to the largest reference magnitude
UNKNOWN = "no-such-op"  # never an op: a registry name is a Python identifier (CollectiveOp refuses others)
ROOTED = [name for name, op in C.COLLECTIVES.items() if op.rooted]


def test_bus_bandwidth_factors_follow_nccl_tests():
    assert C.bus_bandwidth_factor("all_reduce", 2) == 1.0
    assert C.bus_bandwidth_factor("all_reduce", 8) == pytest.approx(1.75)
    for op in ("all_gather", "reduce_scatter", "all_to_all"):
        assert C.bus_bandwidth_factor(op, 4) == pytest.approx(0.75)
    algbw, busbw = C.bandwidths("all_reduce", 2 * 10**9, 8, 0.01)
    assert (algbw, busbw) == pytest.approx((200.0, 350.0))
    with pytest.raises(ValueError, match="op: expected"):
        C.bus_bandwidth_factor(UNKNOWN, 2)
    with pytest.raises(ValueError, match="ranks"):
        C.bus_bandwidth_factor("all_gather", 0)
    with pytest.raises(ValueError, match="seconds"):
        C.bandwidths("all_gather", 1, 2, 0)


# Answers of the code before the collective registry (commit d83555f), printed by running it once: the
# registry must keep every mechanism choice, variant list, per-peer size and bandwidth as they were.
SIZES = [1 << p for p in range(4, 32)]  # 16 B .. 2 GiB
CHOICES = {  # (op, single_process): choose(op, size, 'auto', ...) over SIZES, as word*repeats
    ('all_reduce', True): 'll*17 sm*7 ce*4',
    ('all_reduce', False): 'll*17 sm*11',
    ('all_gather', True): 'll*16 sm*12',
    ('all_gather', False): 'll*16 sm*12',
    ('reduce_scatter', True): 'll*16 sm*8 ce*4',
    ('reduce_scatter', False): 'll*16 sm*12',
    ('all_to_all', True): 'll*16 sm*12',
    ('all_to_all', False): 'll*16 sm*12',
}
EXPLICIT = ('sm', 'll', 'ce')  # choose(op, size, m, ...) was m at every size, for every op and both modes
VARIANTS = {  # op: _variants(op, size, ranks) names over SIZES for ranks 2, 4, 8, as names*repeats
    'all_reduce': ['pkit_sm_one_shot+pkit_sm_two_shot+pkit_ll+pkit_ce+nccl*17 pkit_sm_one_shot+pkit_sm_two_shot+pkit_ce+nccl*11', 'pkit_sm_one_shot+pkit_sm_two_shot+pkit_ll+pkit_ce+nccl*17 pkit_sm_one_shot+pkit_sm_two_shot+pkit_ce+nccl*11', 'pkit_sm_one_shot+pkit_sm_two_shot+pkit_ll+pkit_ce+nccl*17 pkit_sm_one_shot+pkit_sm_two_shot+pkit_ce+nccl*11'],
    'all_gather': ['pkit_sm+pkit_ll+pkit_ce+nccl*18 pkit_sm+pkit_ce+nccl*10', 'pkit_sm+pkit_ll+pkit_ce+nccl*19 pkit_sm+pkit_ce+nccl*9', 'pkit_sm+pkit_ll+pkit_ce+nccl*20 pkit_sm+pkit_ce+nccl*8'],
    'reduce_scatter': ['pkit_sm+pkit_ll+pkit_ce+nccl*18 pkit_sm+pkit_ce+nccl*10', 'pkit_sm+pkit_ll+pkit_ce+nccl*19 pkit_sm+pkit_ce+nccl*9', 'pkit_sm+pkit_ll+pkit_ce+nccl*20 pkit_sm+pkit_ce+nccl*8'],
    'all_to_all': ['pkit_sm+pkit_ll+pkit_ce+nccl*18 pkit_sm+pkit_ce+nccl*10', 'pkit_sm+pkit_ll+pkit_ce+nccl*19 pkit_sm+pkit_ce+nccl*9', 'pkit_sm+pkit_ll+pkit_ce+nccl*20 pkit_sm+pkit_ce+nccl*8'],
}
PER_PEER = {  # op: per_peer_bytes(op, size, ranks) over SIZES[::9] for ranks 2, 4, 8
    'all_reduce': [[16, 8192, 4194304, 2147483648], [16, 8192, 4194304, 2147483648], [16, 8192, 4194304, 2147483648]],
    'all_gather': [[8, 4096, 2097152, 1073741824], [4, 2048, 1048576, 536870912], [2, 1024, 524288, 268435456]],
    'reduce_scatter': [[8, 4096, 2097152, 1073741824], [4, 2048, 1048576, 536870912], [2, 1024, 524288, 268435456]],
    'all_to_all': [[8, 4096, 2097152, 1073741824], [4, 2048, 1048576, 536870912], [2, 1024, 524288, 268435456]],
}
FACTORS = {  # op: bus_bandwidth_factor(op, ranks) for ranks 1, 2, 4, 8
    'all_reduce': [0.0, 1.0, 1.5, 1.75],
    'all_gather': [0.0, 0.5, 0.75, 0.875],
    'reduce_scatter': [0.0, 0.5, 0.75, 0.875],
    'all_to_all': [0.0, 0.5, 0.75, 0.875],
}
BANDWIDTHS = {  # op: bandwidths(op, size, 8 ranks, 1 ms) over SIZES[::9]
    'all_reduce': [(1.6e-05, 2.8e-05), (0.008192, 0.014336), (4.194304, 7.340032), (2147.483648, 3758.096384)],
    'all_gather': [(1.6e-05, 1.4e-05), (0.008192, 0.007168), (4.194304, 3.670016), (2147.483648, 1879.048192)],
    'reduce_scatter': [(1.6e-05, 1.4e-05), (0.008192, 0.007168), (4.194304, 3.670016), (2147.483648, 1879.048192)],
    'all_to_all': [(1.6e-05, 1.4e-05), (0.008192, 0.007168), (4.194304, 3.670016), (2147.483648, 1879.048192)],
}


def _runs(text):
    """'a*2 b*1' -> ['a', 'a', 'b']."""
    return [word for run in text.split() for word in [run.rpartition("*")[0]] * int(run.rpartition("*")[2])]


def test_choices_are_those_recorded_before_the_registry():
    for (op, single_process), recorded in CHOICES.items():
        assert [C.choose(op, s, "auto", single_process=single_process) for s in SIZES] == _runs(recorded), op
        for m in EXPLICIT:
            assert {C.choose(op, s, m, single_process=single_process) for s in SIZES} == {m}, (op, m)


def test_variants_sizes_and_bandwidths_are_those_recorded_before_the_registry():
    from pkit.experiments.collectives import _variants

    for op, recorded in VARIANTS.items():
        for ranks, series in zip((2, 4, 8), recorded):
            assert ["+".join(name for name, _ in _variants(op, s, ranks)) for s in SIZES] == _runs(series), op
    for op, recorded in PER_PEER.items():
        assert [[C.per_peer_bytes(op, s, n) for s in SIZES[::9]] for n in (2, 4, 8)] == recorded, op
    for op, recorded in FACTORS.items():
        assert [C.bus_bandwidth_factor(op, n) for n in (1, 2, 4, 8)] == recorded, op
    for op, recorded in BANDWIDTHS.items():
        assert [C.bandwidths(op, s, 8, 1e-3) for s in SIZES[::9]] == recorded, op

def test_ll_block_size_widens_past_two_packs_per_thread():
    small = C.LL_PACKS_PER_THREAD * C.LL_THREADS * 132  # packs that 132 blocks of LL_THREADS carry, two each
    assert C.ll_threads(1, 132) == C.ll_threads(small, 132) == C.LL_THREADS
    assert C.ll_threads(small + 1, 132) == C.LL_THREADS_WIDE
    assert C.ll_threads(small, 66) == C.LL_THREADS_WIDE


def test_ll_staging_holds_whole_groups_of_packs():
    lines = C._ll_lines_per_sender()
    assert lines == 2 * C.LL_MAX_BYTES // 16
    assert all(lines % (2 << g) == 0 for g in C.LL_GROUP_SHIFT.values())
    assert set(C.LL_GROUP_SHIFT) == {C.LL_THREADS, C.LL_THREADS_WIDE}


def test_mechanism_choice():
    assert C.choose("all_gather", 1 << 30, "auto") == "sm"
    assert C.choose("all_to_all", 512 << 20, "auto") == "sm"
    assert C.choose("all_reduce", 64 << 10, "auto") == "ll"
    limit = C.collective("reduce_scatter").ll_auto_max_bytes
    assert C.choose("reduce_scatter", limit, "auto") == "ll"
    assert C.choose("reduce_scatter", limit + 16, "auto") == "sm"
    assert C.choose("all_to_all", 1 << 10, "auto") == "ll"
    assert C.choose("all_gather", 4 << 20, "auto") == "sm"
    assert C.choose("reduce_scatter", 512 << 20, "auto") == "ce"
    assert C.choose("reduce_scatter", 512 << 20, "auto", single_process=False) == "sm"
    assert C.choose("all_gather", 1 << 30, "auto") == "sm"
    assert C.choose("all_reduce", 1 << 30, "auto") == "ce"
    assert C.choose("all_reduce", 1 << 30, "auto", single_process=False) == "sm"
    assert C.choose("all_reduce", 4 << 20, "auto") == "sm"
    assert C.choose("all_gather", 1 << 30, "ce") == "ce"
    with pytest.raises(ValueError, match="mechanism: expected"):
        C.choose("all_gather", 1, "tma")
    with pytest.raises(ValueError, match=re.escape(f"op: expected one of {list(C.COLLECTIVES)}, got {UNKNOWN!r}")):
        C.choose(UNKNOWN, 1, "auto")


def test_a_registered_op_reaches_buffers_bandwidths_variants_launches_and_listing(monkeypatch):
    """One entry is all a new op needs on the host side: a stand-in 'copy' (every rank keeps its own buffer, an
    'sm' kernel of that name) gets buffers, bandwidths, variants, a listing row and launches."""
    from pkit.experiments import collectives as E

    copy = C.CollectiveOp("copy", "every rank keeps its own buffer", lambda inputs, r, root=0: inputs[r], lambda n: 0.0,
                          "nothing", kernels={"sm": ("copy",)}, mechanisms=("sm",))
    monkeypatch.setitem(C.COLLECTIVES, "copy", copy)
    assert C.collective("copy") is copy and "copy" in C.list_collectives()["name"].tolist()
    assert C.bandwidths("copy", 2 * 10**9, 2, 1.0) == (2.0, 0.0) and C.per_peer_bytes("copy", 64, 2) == 64
    assert C.choose("copy", 1 << 30, "auto") == "sm" and "copy" in C.kernel_names("sm")
    with pytest.raises(ValueError, match=r"mechanism: expected one of \['auto', 'sm'\], got 'll'"):
        C.choose("copy", 16, "ll")
    host = SimpleNamespace(size=2, empty=lambda shape, dtype: np.zeros((2, *shape), dtype))
    out, inp = E._empty_buffers(host, "copy", 1024, "float32")
    assert out.shape == inp.shape == (2, 256)
    variants = E._variants("copy", 1024, 2)
    assert [name for name, _ in variants] == ["pkit_sm"]  # no NCCL baseline for this op
    team, launches = _Team(), []
    coll = C.Collectives(team)
    coll._launch = lambda name, i, o, n16, root: launches.append((name, n16))
    variants[0][1](coll, None, _array(team, 256), _array(team, 256))
    assert launches == [("copy", 256 * 4 // 16)]  # one piece: the whole buffer


@pytest.mark.parametrize("op", ROOTED)
def test_a_rooted_op_takes_a_rank_of_the_team_as_its_root(op):
    """A root outside the team, or a root given to an op without one, is refused before anything is launched; the
    root reaches the kernel's arguments."""
    team, launches = _Team(), []
    coll = C.Collectives(team)
    coll._launch = lambda name, i, o, n16, root=0: launches.append((name, root))
    x, y = _array(team, 1024), _array(team, 1024)
    for root in (2, -1):
        with pytest.raises(ValueError, match=rf"^root: expected a rank of the team, 0 to 1, got {root}$"):
            getattr(coll, op)(y, x, root=root)
        with pytest.raises(ValueError, match=rf"^root: expected a rank of the team, 0 to 1, got {root}$"):
            coll.run(op, y, x, root=root, mechanism="sm")
    with pytest.raises(ValueError, match=r"^root: expected None \(all_gather has no root\), got 0$"):
        coll.run("all_gather", _array(team, 2048), x, root=0)
    getattr(coll, op)(y, x, root=1, mechanism="sm")
    coll.run(op, y, x, mechanism="sm")
    assert [root for _, root in launches] == [1, 0]  # the root given, then the default


def test_entries_name_the_mechanisms_auto_may_pick():
    with pytest.raises(ValueError, match=r"mechanisms: copy needs \['sm', 'll'\]"):
        C.CollectiveOp("copy", "", None, None, "", {}, mechanisms=("sm",), ll_auto_max_bytes=1024)


@pytest.mark.parametrize("gpus", [0, 1])
def test_sweeps_need_two_gpus_and_say_so(gpus_here, gpus):
    """The sweeps' default is every GPU of the machine; with fewer than NCCL's two, one clear error before any GPU
    is touched, not a hang."""
    from pkit.experiments import collectives as E

    gpus_here(gpus)
    needs = (rf"expected at least 2 distinct GPUs \(2 GPUs with peer access, one per rank \(NCCL\)\), this machine "
             rf"has {gpus}; run on a machine with 2 or more GPUs \(this one has {gpus}\), or replay recorded results")
    for call, arg in ((E.sweep, "devices"), (E.latency_sweep, "devices"), (E.torch_baselines, "nproc"),
                      (E.graph_latency, "nproc"), (E.latency_torch, "nproc")):
        with pytest.raises(pkit.PkitError, match=f"{arg}: {needs}"):
            call()
    with pytest.raises(pkit.PkitError, match=r"devices: expected at least 2 distinct GPUs .*got \[0, 0\]"):
        E.sweep(devices=[0, 0])


def test_sweep_sizes_split_over_every_gpu_of_the_machine(gpus_here):
    from pkit.experiments import collectives as E
    from pkit.experiments.torchrun import gpu_processes

    gpus_here(8)
    with pytest.raises(ValueError, match=r"sizes: expected positive multiples of 128 bytes \(16 per rank\)"):
        E.sweep(sizes=[1 << 16, 1000])
    assert gpu_processes(None, "collectives_torch") == 8 and gpu_processes(3, "collectives_torch") == 3
    with pytest.raises(ValueError, match="nproc: expected at least 2 processes .*got 1; pass nproc=None"):
        E.torch_baselines(nproc=1)


class _Team(pkit.Team):
    """pkit.Team on the CPU, two ranks on GPUs 0 and 1 that are never touched: argument checks run before
    anything touches a GPU."""

    def __init__(self, rank=None):  # not Team.__init__, which would look for the GPUs
        self.size, self.rank, self.devices, self._rank_streams = 2, rank, (0, 1), {}


@pytest.mark.parametrize("ranks", [1, 2, 3, 4, 8])
def test_grids_of_ranks_sharing_a_gpu_fit_on_it_together(gpus_here, ranks):
    """Ranks sharing one GPU each take an equal part of its SMs, so every sharing rank's blocks are resident at once
    (Team.launch refuses a grid that is not), whatever the size; one rank per GPU takes all of them."""
    gpus_here(2)
    shared = _Team()
    shared.size, shared.devices, shared._rank_streams = ranks, (0,) * ranks, {r: None for r in range(ranks)}
    coll = C.Collectives(shared)
    assert coll._sms == 132 // ranks
    assert coll._grid(1 << 30, 512) * ranks <= 132 and coll._grid(1, 512) == 1
    assert C.Collectives(_Team())._sms == 132  # ranks 0 and 1 on GPUs of their own


def _array(team, count, dtype="float32"):
    storage = np.dtype(np.uint16) if dtype == "bfloat16" else np.dtype(dtype)
    return SimpleNamespace(team=team, shape=(count,), dtype=dtype, storage_dtype=storage, nbytes=count * storage.itemsize)


def test_collective_arguments_are_checked_before_any_launch():
    team = _Team()
    coll = C.Collectives(team)
    x, y = _array(team, 1024), _array(team, 1024)
    cases = [
        (lambda: coll.all_reduce(x, x), "out: expected a buffer other than inp"),
        (lambda: coll.all_reduce(y, _array(_Team(), 1024)), "inp: expected a SymmetricArray of this team"),
        (lambda: coll.all_reduce(_array(team, 1000), x), "out: expected 1024 elements"),
        (lambda: coll.all_reduce(_array(team, 1024, "bfloat16"), x), "out: expected dtype float32"),
        (lambda: coll.all_reduce(_array(team, 1024, "int32"), _array(team, 1024, "int32")), "reductions support"),
        (lambda: coll.all_reduce(y, x, mechanism="tma"), "mechanism: expected one of"),
        (lambda: coll.all_reduce(y, x, algorithm="ring"), "algorithm: expected"),
        (lambda: coll.all_reduce(y, x, algorithm="two_shot", mechanism="ll"), "mechanism 'll' runs 'one_shot'"),
        (lambda: coll.all_reduce(_array(team, 1 << 19), _array(team, 1 << 19), mechanism="ll"), "'ll' sends at most"),
        (lambda: coll.all_to_all(_array(team, 1001), _array(team, 1001)), "do not split into 2 shares"),
        (lambda: coll.all_gather(_array(team, 2000), _array(team, 1001)), "expected 2002 elements"),
        (lambda: coll.reduce_scatter(_array(team, 512), _array(team, 1000)), "expected 1024 elements"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message):
            call()
    one_per_gpu = _Team(rank=0)
    with pytest.raises(pkit.PkitError, match="one process driving every GPU"):
        C.Collectives(one_per_gpu).all_reduce(_array(one_per_gpu, 1024), _array(one_per_gpu, 1024), mechanism="ce")


@pytest.mark.parametrize("source, kernels, call, field", [
    ("collectives.cu", C.SM_KERNELS, C.SM_CALL, "n16"), ("ll_collectives.cu", C.LL_KERNELS, C.LL_CALL, "n16"),
    ("staged_collectives.cu", pkit.dist.STAGED_KERNELS, pkit.dist.STAGED_CALL, "share16")])
def test_kernels_instantiate_and_their_argument_struct_matches_the_host_layout(source, kernels, call, field,
                                                                              cache_dir):
    """Every name expression compiles to a kernel of the cubin, and the C++ struct has KernelArgs' layout."""
    from pkit.compiler import KERNEL_DIR, compile_cubin, cubin_symbols

    text = (KERNEL_DIR / source).read_text() + "\n" + call.layout_asserts() + "\n"
    module = compile_cubin(text, arch="sm_90a", name_expressions=kernels)
    assert set(module.lowered) == set(kernels) and len(set(module.lowered.values())) == len(kernels)
    assert set(module.lowered.values()) <= cubin_symbols(module.cubin)
    from pkit.kernel_args import OFFSETOF_KNOWN

    try:  # the GPU image's NVRTC 13.0 lacks __builtin_offsetof: there only the size is checked
        compile_cubin(f"{OFFSETOF_KNOWN}\n#error offsets checked\n#endif\n#endif\n", arch="sm_90a")
        pytest.skip("this NVRTC has no __builtin_offsetof: field offsets are not checked here")
    except pkit.CompileError as e:
        assert "offsets checked" in str(e)
    shifted = call.layout_asserts().replace(f"== {call.dtype.fields[field][1]},", "== 1,", 1)
    with pytest.raises(pkit.CompileError, match=f"{field}: offset differs"):
        compile_cubin((KERNEL_DIR / source).read_text() + "\n" + shifted, arch="sm_90a")


def test_kernel_args_pack_every_field_in_place():
    packed = C.LL_CALL.pack(inp=1, out=2, n16=3, bases=4, cap_lines=5, state=6, shift=7, rank=8, size=9, root=10)
    assert len(packed.raw) == C.LL_CALL.dtype.itemsize == 64
    assert list(C.LL_CALL.unpack(packed).values()) == list(range(1, 11))
    assert packed.ptr == __import__("ctypes").addressof(packed.buffer)
    with pytest.raises(ValueError, match=r"missing \['size'\], unexpected \['extra'\]"):
        C.SM_CALL.pack(inp=1, out=2, n16=3, flags=4, rank=0, root=0, extra=1)


def test_ll_epochs_alternate_parity_and_skip_zero_across_the_wrap():
    epoch, seen = 0xFFFFFFFE - 3, []
    for _ in range(8):
        epoch = C.next_epoch(epoch)
        seen.append(epoch)
    assert 0 not in seen and seen[3] == 1
    assert all((a ^ b) & 1 for a, b in zip(seen, seen[1:]))
    assert C.next_epoch(0) == 1


def test_copy_engine_pipeline_steps_cover_the_buffer_and_end_small():
    from pkit.ops.copy_engine import steps

    rng = np.random.default_rng()
    for _ in range(500):
        nbytes = int(rng.integers(1, 1 << 14)) * 16
        largest = int(rng.choice([16, 1 << 10, 1 << 16]))
        smallest = min(largest, int(rng.choice([16, 256, 1 << 12])))
        plan = steps(nbytes, largest, smallest)
        assert plan[0][0] == 0 and sum(size for _, size in plan) == nbytes
        assert all(a + n == b for (a, n), (b, _) in zip(plan, plan[1:]))
        assert all(0 < size <= largest and size % 16 == 0 for _, size in plan)
        assert plan[-1][1] <= max(smallest, 16)
    assert [size >> 20 for _, size in steps(256 << 20, 64 << 20, 2 << 20)] == [64, 64, 64, 32, 16, 8, 4, 2, 2]


def test_bf16_rounding_matches_round_to_nearest_even():
    x = np.array([1.0, 1.00390625, 1.01171875, -2.5, 65504.0, np.inf], dtype=np.float32)
    assert from_bf16_bits(to_bf16_bits(x)).tolist() == [1.0, 1.0, 1.015625, -2.5, 65536.0, np.inf]
    assert np.isnan(from_bf16_bits(to_bf16_bits(np.array([np.nan], dtype=np.float32))))[0]


def _fill(array, values_by_rank):
    """Write float32 values (converted to the array's dtype) into each rank's buffer."""
    for r, v in enumerate(values_by_rank):
        array[r].set(to_bf16_bits(v) if array.dtype == "bfloat16" else v.astype(array.storage_dtype))


def _read(array, r):
    import cupy as cp

    raw = cp.asnumpy(array[r])
    return from_bf16_bits(raw).astype(np.float64) if array.dtype == "bfloat16" else raw.astype(np.float64)


def _inputs(team, dtype, count):
    rng = np.random.default_rng()
    values = [rng.standard_normal(count).astype(np.float32) for _ in range(team.size)]
    if dtype == "bfloat16":  # the reference sees exactly what the GPUs hold
        values = [from_bf16_bits(to_bf16_bits(v)) for v in values]
    inp = team.empty((count,), dtype)
    _fill(inp, values)
    return inp, [v.astype(np.float64) for v in values]


def _assert_close(got, want, dtype, what):
    assert np.all(np.isfinite(got)), f"{what}: non-finite output (poison left?)"
    scale = max(1.0, float(np.max(np.abs(want))))
    err = float(np.max(np.abs(got - want))) / scale
    assert err <= TOLERANCE[dtype], f"{what}: max error {err:.2e} × {scale:.2f}"


def _check_rank(out, r, want, dtype, what):
    """Rank r's output against its expected one, or, where the op leaves it alone (`want` None), still all poison."""
    if want is None:
        assert np.isnan(_read(out, r)).all(), f"{what}: written, though the op leaves this rank's output alone"
    else:
        _assert_close(_read(out, r), want, dtype, what)


def _expected(op, x, n, root=None):
    """Every rank's expected output (float64) of `op` over the ranks' inputs `x`, at `root` for a rooted op (default
    0, as Collectives'); None for a rank whose output the call leaves alone."""
    return [C.collective(op).reference(x, r, root or 0) for r in range(n)]


LARGEST = 3 << 20  # elements per rank of the two-rank tests' largest calls


def _count(base: int, ranks: int, up: bool = True) -> int:
    """`base` elements rounded up (or down, `up=False`: to stay within a size limit) to split into `ranks` shares of
    whole 16-byte packs of either dtype (8 bf16)."""
    quantum = 8 * ranks
    return (-(-base // quantum) if up else base // quantum) * quantum


def _cases():
    """(op, keyword arguments of Collectives.run): every form of every registered op (`CollectiveOp.forms`), then
    auto."""
    return [(op.name, form) for op in C.COLLECTIVES.values() for form in [*op.forms(), {"mechanism": "auto"}]]


def _case_id(value):
    return "-".join(value.values()) if isinstance(value, dict) else value


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("count", [8 * 1000 + 16, 200_000 + 16])  # 200,016: wide LL blocks
@pytest.mark.parametrize("op, options", _cases(), ids=_case_id)
def test_collective_against_float64(team, op, options, dtype, count):
    """Every placement, 2 to 8 ranks: two sizes (rounded up to whole shares of the team)."""
    _check_collective(team, op, options, dtype, _count(count, team.size))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("count", [64, LARGEST])
@pytest.mark.parametrize("op, options", _cases(), ids=_case_id)
def test_collective_against_float64_at_the_edge_sizes(pair, op, options, dtype, count):
    """Two ranks: the smallest whole shares, and a size past the LL limit of every op."""
    _check_collective(pair, op, options, dtype, count)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("root_at", ["first", "middle", "last"])
@pytest.mark.parametrize("op, options", [c for c in _cases() if c[0] in ROOTED], ids=_case_id)
def test_rooted_collective_against_float64_at_every_root(team, op, options, dtype, root_at):
    """NCCL's semantics, 2 to 8 ranks, the root first, in the middle or last: ncclBroadcast copies the root's
    buffer into every rank's output (the root's own included); ncclReduce writes the sum into the root's output
    only and leaves every other rank's output as it was (here: its poison)."""
    n = team.size
    root = {"first": 0, "middle": n // 2, "last": n - 1}[root_at]
    _check_collective(team, op, {**options, "root": root}, dtype, _count(8 * 1000 + 16, n))


def _check_collective(team, op, options, dtype, count):
    """One call of `op` over `count` elements (nccl-tests' S) on fresh random inputs into poisoned outputs, every
    rank's output against float64 (or, where a rooted op leaves it alone, still poisoned); a mechanism that cannot
    send this much must refuse it."""
    coll = C.Collectives(team, ce_chunk_bytes=64 << 10, ce_slots=2)  # many chunks: the slots wrap around
    n = team.size
    in_count, out_count = C.collective(op).counts(count, n)
    inp, x = _inputs(team, dtype, in_count)
    poison = np.uint16(0x7FC0) if dtype == "bfloat16" else np.float32(np.nan)
    out = team.empty((out_count,), dtype).fill(poison)
    sent = C.per_peer_bytes(op, count * inp.storage_dtype.itemsize, n)
    if not C.fits(options["mechanism"], sent):
        with pytest.raises(ValueError, match="'ll' sends at most"):
            coll.run(op, out, inp, **options)
        return
    coll.run(op, out, inp, **options)  # ranks sharing a GPU: grids within their share of its SMs, all resident
    want = _expected(op, x, n, options.get("root"))
    team.synchronize()
    for r in range(n):
        _check_rank(out, r, want[r], dtype, f"{op} {options} {dtype} n={count} rank {r}")


def test_sizes_that_do_not_split_get_a_clear_error(team):
    coll, n = C.Collectives(team), team.size
    odd = team.empty((1001,), "float32")  # 7 · 11 · 13: no team of 2 to 8 ranks splits it
    with pytest.raises(ValueError, match=f"do not split into {n} shares"):
        coll.all_to_all(team.empty((1001,), "float32"), odd)
    with pytest.raises(ValueError, match="not a multiple of 16"):
        coll.all_reduce(team.empty((1001,), "float32"), odd, algorithm="one_shot")
    with pytest.raises(ValueError, match=f"expected {1001 * n} elements"):
        coll.all_gather(team.empty((1000 * n,), "float32"), odd)
    with pytest.raises(ValueError, match="reductions support"):
        coll.all_reduce(team.empty((1024,), "int32"), team.empty((1024,), "int32"))


@pytest.mark.parametrize("op", [name for name, op in C.COLLECTIVES.items() if "ll" in op.mechanisms])
@pytest.mark.parametrize("count", [1 << 15, 1 << 18])  # small and wide LL blocks (each line layout)
def test_ll_calls_queued_back_to_back_each_see_their_own_inputs(team, op, count):
    """Eight LL calls enqueued without a sync in between (a rooted op's root moving on each call): a packet read from
    the wrong epoch shows up."""
    _queued_ll_calls(team, [op] * 8, count)


@pytest.mark.parametrize("count", [1 << 15, 1 << 18])
def test_ll_calls_of_every_op_interleaved_each_see_their_own_inputs(team, count):
    """Every LL op in turn, three rounds, queued without a sync: ops whose data flows one way (rooted) between ops
    where every rank hears from every peer, so a rank running ahead would overwrite a staging half still unread."""
    _queued_ll_calls(team, [name for name, op in C.COLLECTIVES.items() if "ll" in op.mechanisms] * 3, count)


def _queued_ll_calls(team, ops, count):
    """LL calls of `ops` in order, on fresh inputs into poisoned outputs, queued back to back, then every rank
    checked; call k of a rooted op runs at root k mod the team size."""
    coll = C.Collectives(team)
    n = team.size
    calls = []
    for k, op in enumerate(ops):
        entry = C.collective(op)
        in_count, out_count = entry.counts(_count(count, n, up=False), n)  # within LL's 1 MiB per peer
        inp, x = _inputs(team, "float32", in_count)
        out = team.empty((out_count,), "float32").fill(np.float32(np.nan))
        root = {"root": k % n} if entry.rooted else {}
        calls.append((op, out, inp, root, _expected(op, x, n, root.get("root"))))
    team.synchronize()
    for op, out, inp, root, _ in calls:
        coll.run(op, out, inp, mechanism="ll", **root)
    team.synchronize()
    for k, (op, out, _, root, want) in enumerate(calls):
        for r in range(n):
            _check_rank(out, r, want[r], "float32", f"call {k} ({op} {root}) rank {r}")


def test_thousand_back_to_back_all_reduces(team):
    coll, count = C.Collectives(team), _count(1 << 14, team.size)  # two-shot's shares split evenly
    inp, x = _inputs(team, "float32", count)
    outs = [team.empty((count,), "float32") for _ in range(2)]
    forms = C.collective("all_reduce").forms()
    for i in range(1000):
        coll.all_reduce(outs[i % 2], inp, **forms[i % len(forms)])
    team.synchronize()
    for r in range(team.size):
        _assert_close(_read(outs[1], r), np.sum(x, axis=0), "float32", f"rank {r}")


@pytest.mark.multigpu
@pytest.mark.parametrize("mechanism", ["sm", "ll"])
def test_calls_replayed_from_cuda_graphs_see_fresh_inputs(two_gpus, mechanism):
    """Two all-reduces captured per GPU, replayed three times with new inputs written between replays: an epoch
    or flag baked into the graph would let a replay read the last replay's packets."""
    import cupy as cp

    from pkit.gpus import on_device
    from pkit.timing import _capture

    team = two_gpus  # one capture stream per GPU
    coll, n = C.Collectives(team), 1 << 12
    x, y = team.empty((n,), "float32"), team.empty((n,), "float32")
    coll.all_reduce(y, x, mechanism=mechanism)  # modules load before the capture
    team.synchronize()
    streams = {d: on_device(d, lambda: cp.cuda.Stream(non_blocking=True)) for d in team.devices}
    try:
        for d in team.devices:
            on_device(d, streams[d].use)
        graphs = _capture(team.devices, streams, lambda: [coll.all_reduce(y, x, mechanism=mechanism) for _ in range(2)])
        rng = np.random.default_rng()
        for replay in range(3):
            host = [rng.standard_normal(n, dtype=np.float32) for _ in range(team.size)]
            for r, d in enumerate(team.devices):
                with cp.cuda.Device(d):
                    x[r].set(host[r], stream=streams[d])
                    y[r].fill(np.nan)
                    graphs[d].launch(streams[d])
            for d in team.devices:
                on_device(d, streams[d].synchronize)
            for r in range(team.size):
                np.testing.assert_allclose(cp.asnumpy(y[r]), np.sum(host, axis=0), rtol=1e-5, atol=1e-5,
                                           err_msg=f"rank {r}, replay {replay}")
    finally:
        for d in team.devices:
            on_device(d, cp.cuda.Stream.null.use)


@pytest.mark.multigpu
def test_graph_timed_sweeps_check_their_replays():
    from pkit.experiments import collectives as E

    size = 840 << 8  # 210 KiB: whole 16-byte shares for any team of 1 to 8 GPUs (840 = lcm(1..8))
    frame = E.sweep(ops=["all_reduce", "all_gather"], sizes=[size], graph=True, reps=3, calls_per_sample=4)
    assert set(frame["timing"]) == {"graph"} and frame["verified"].all() and "pkit_ce" not in set(frame["implementation"])
    assert {"pkit_ll", "pkit_sm_one_shot", "nccl"} <= set(frame["implementation"])
    torch = E.torch_baselines(sizes=[size], graph=True, reps=3, calls_per_sample=4, ops=["all_reduce"])
    assert set(torch["timing"]) == {"graph"} and (torch["time_median_us"] > 0).all()
    ours = torch[torch["implementation"] == "pkit_dist"]
    assert len(ours) == 1 and ours["verified"].all(), ours  # pkit.dist matched NCCL and replays from a graph


@pytest.mark.multigpu
@pytest.mark.parametrize("op", ROOTED)
def test_rooted_ops_do_what_nccl_does_at_every_root(two_gpus, op):
    """Beside NCCL itself (one GPU per rank): at every root, every form of the op leaves every rank's output as NCCL's
    call leaves it from the same inputs into the same poison (a reduce's non-root outputs: untouched, by both)."""
    from pkit.ops.baselines import NcclCollectives

    team, entry = two_gpus, C.collective(op)
    coll, nccl, count = C.Collectives(team), NcclCollectives(team), _count(8 * 1000 + 16, team.size)
    for root in range(team.size):
        inp, x = _inputs(team, "float32", count)
        theirs = team.empty((count,), "float32").fill(np.float32(np.nan))
        nccl.run(op, theirs, inp, root)
        team.synchronize()
        for options in [*entry.forms(), {"mechanism": "auto"}]:
            ours = team.empty((count,), "float32").fill(np.float32(np.nan))
            coll.run(op, ours, inp, root=root, **options)
            team.synchronize()
            for r in range(team.size):
                what = f"{op} root {root} {options} rank {r}"
                if entry.writes(r, root):
                    _assert_close(_read(ours, r), _read(theirs, r), "float32", what)
                else:
                    assert np.isnan(_read(theirs, r)).all() and np.isnan(_read(ours, r)).all(), what
