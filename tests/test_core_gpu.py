"""Core on real GPUs: peer reads and writes, barriers, wait timeouts, bench accuracy, multi-process Team."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import pkit

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CHECKS = str(HERE / "cuda" / "team_checks.cu")
POISON = np.uint32(0xDEADBEEF)

pytestmark = pytest.mark.gpu


def fresh_uint32(n: int) -> np.ndarray:
    return np.random.default_rng().integers(0, 2**32 - 1, n, dtype=np.uint32)


@pytest.mark.multigpu
def test_topology_and_slug():
    topo = pkit.topology()
    assert topo.size == len(pkit.devices()) >= 2
    assert all(topo.p2p[i][j] for i in range(2) for j in range(2) if i != j)
    labels = topo.link_labels()
    assert labels[0][0] == "X" and labels[0][1] == labels[1][0]
    assert len(topo.to_frame()) == topo.size * (topo.size - 1)
    assert "<table>" in topo._repr_html_()
    slug = pkit.results.machine_slug()
    assert slug.startswith(f"{pkit.devices()[0].name.split()[-1].lower()}x{topo.size}")


@pytest.mark.multigpu
@pytest.mark.parametrize("n", [1, 1000, 1 << 22, (1 << 22) + 13])
def test_peer_push_and_pull_every_element(n):
    import cupy as cp

    team = pkit.Team([0, 1])
    src, dst = team.empty((n,), "uint32"), team.empty((n,), "uint32")
    data = [fresh_uint32(n) for _ in range(team.size)]
    push = pkit.compile(CHECKS, "push_to_next")
    pull = pkit.compile(CHECKS, "pull_from_prev")
    for op in ("push", "pull"):
        for r in range(team.size):
            src[r].set(data[r])
        dst.fill(POISON)
        team.synchronize()
        if op == "push":
            team.launch(push, (64,), (256,), lambda r: (src[r], dst.table(r), np.int32(r), np.int32(team.size),
                                                         np.uint64(n)))
        else:
            team.launch(pull, (64,), (256,), lambda r: (dst[r], src.table(r), np.int32(r), np.int32(team.size),
                                                         np.uint64(n)))
        team.synchronize()
        for r in range(team.size):
            sender = (r - 1) % team.size
            np.testing.assert_array_equal(cp.asnumpy(dst[r]), data[sender], err_msg=f"{op} into rank {r}")


@pytest.mark.multigpu
@pytest.mark.parametrize("source, kernel, extra", [("copy.cu", "copy16", ()),
                                                   ("tma_copy.cu", "tma_copy", (np.uint32(16384),))])
@pytest.mark.parametrize("direction", ["push", "pull"])
def test_library_copies_to_and_from_peer(source, kernel, extra, direction):
    import cupy as cp

    team = pkit.Team([0, 1])
    nbytes = (64 << 20) + 48  # not a multiple of the chunk
    src, dst = team.empty((nbytes,), "uint8"), team.empty((nbytes,), "uint8")
    data = np.random.default_rng().integers(0, 256, nbytes, dtype=np.uint8)
    src[0].set(data)
    dst.fill(0xA5)
    team.synchronize()
    runner = 0 if direction == "push" else 1
    fn = pkit.compile(source, kernel)
    # one process drives both GPUs: dst[1] and src[0] are addresses valid on either GPU (UVA + peer access)
    to, frm = np.uint64(dst[1].data.ptr), np.uint64(src[0].data.ptr)
    if kernel == "copy16":
        fn((132,), (512,), (to, frm, np.uint64(nbytes // 16)), device=runner)
    else:
        fn((32,), (32,), (to, frm, np.uint64(nbytes), *extra), shared_mem=4 * 16384 + 32, device=runner)
    team.synchronize()
    got = cp.asnumpy(dst[1])
    n_copied = nbytes if kernel == "tma_copy" else nbytes // 16 * 16
    np.testing.assert_array_equal(got[:n_copied], data[:n_copied])


def test_barrier_ten_thousand_rounds_on_four_blocks(team):
    import cupy as cp

    blocks = 4
    mailbox = team.zeros((blocks, team.size), "uint32")
    errors = team.empty((blocks,), "uint32")
    errors.fill(POISON)
    kernel = pkit.compile(CHECKS, "barrier_rounds")
    team.launch(kernel, (blocks,), (32,), lambda r: (mailbox.table(r), team.barrier_flags.table(r), np.int32(r),
                                                     np.int32(team.size), np.int32(10_000), errors[r]))
    team.synchronize()
    for r in range(team.size):
        assert cp.asnumpy(errors[r]).tolist() == [0] * blocks, f"rank {r}"
        epochs = cp.asnumpy(team.barrier_flags[r])[:blocks, team.size]
        assert epochs.tolist() == [20_000] * blocks


def test_ranks_sharing_a_gpu_get_their_own_streams_and_only_grids_that_fit():
    from pkit.ops.baselines import NcclCollectives

    team = pkit.Team([0, 0], share_gpus=True)
    assert team.shares_gpus and team.stream(0) is not None and team.stream(0) is not team.stream(1)
    assert "ranks sharing GPUs" in repr(team) and not pkit.Team([0]).shares_gpus
    kernel, sms = pkit.compile(CHECKS, "barrier_rounds"), pkit.devices()[0].sms
    with pytest.raises(pkit.PkitError, match=rf"grid: {64 * sms} blocks per rank × 2 ranks sharing GPU 0 exceed"):
        team.launch(kernel, (64 * sms,), (1024,), lambda r: ())  # refused before anything is launched
    eight = pkit.Team([0] * 8, share_gpus=True)
    assert eight.sms_per_rank(7) == sms // 8 and team.sms_per_rank(0) == sms // 2
    assert pkit.Team([0]).sms_per_rank(0) == sms
    with pytest.raises(pkit.PkitError, match=r"team: NcclCollectives needs one GPU per rank, got ranks sharing"):
        NcclCollectives(team)


def test_unsatisfiable_wait_raises_peer_timeout_in_its_own_process():
    script = textwrap.dedent(f"""
        import cupy as cp, pkit, pkit.launch as L
        L.set_wait_timeout(0.2)
        flag = cp.zeros(1, dtype=cp.uint32)
        pkit.compile({CHECKS!r}, "wait_forever")((1,), (1,), (flag,))
        try:
            L.synchronize([0])
        except pkit.PeerTimeout as e:
            print("TIMEOUT", e.kernel, e.device, round(e.waited_s, 2))
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert "TIMEOUT wait_forever 0" in out.stdout, out.stdout + out.stderr
    waited = float(out.stdout.split()[-1])
    assert 0.2 <= waited < 1.0


def test_no_garbage_collection_waits_for_the_device_while_streams_are_held():
    """A finalizer that frees device memory (cudaFree waits for the device) must not run while `hold_streams` holds a
    stream: it would wait for the spin, the spin for the host, until the spin traps. The cyclic collector is paused
    there (collections forced at every allocation here) and frees the garbage after the hold. Own process: a trap
    would end its CUDA context."""
    script = textwrap.dedent("""
        import gc, cupy as cp, pkit.launch as L
        L.set_wait_timeout(2.0)
        freed = []
        class Holder:
            def __init__(self):
                self.ptr, self.me = cp.cuda.runtime.malloc(1 << 20), self  # a cycle: only the collector frees it
            def __del__(self):
                cp.cuda.runtime.free(self.ptr)
                freed.append(self.ptr)
        held = Holder()
        stream = cp.cuda.Stream(non_blocking=True)
        gc.set_threshold(1)
        with L.hold_streams({0: stream}):
            del held
            junk = [[i] for i in range(20000)]
            inside = len(freed)
        L.synchronize([0])
        gc.collect()
        print("INSIDE", inside, "AFTER", len(freed), gc.isenabled())
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 0 and "INSIDE 0 AFTER 1 True" in out.stdout, out.stdout + out.stderr[-2000:]


def test_next_test_still_runs_after_a_timeout():
    import cupy as cp

    x = cp.arange(1 << 20, dtype=cp.float32)
    assert float(x.sum()) == pytest.approx((1 << 20) * ((1 << 20) - 1) / 2)


@pytest.mark.parametrize("hide_launch", [False, True])
def test_bench_reads_a_spin_kernel_within_five_percent(hide_launch):
    spin = pkit.compile("spin.cu", "spin_ns")
    duration_ns = 2_000_000
    result = pkit.bench(lambda: spin((1,), (1,), (np.uint64(duration_ns),)), warmup=3, reps=30,
                        hide_launch=hide_launch)
    assert result.median_ms == pytest.approx(duration_ns / 1e6, rel=0.05)
    assert len(result.samples_ms) == 30 and result.cv < 0.05


def test_bench_graph_and_rotation():
    import cupy as cp

    spin = pkit.compile("spin.cu", "spin_ns")
    seen = []
    args = [(np.uint64(500_000),), (np.uint64(1_000_000),)]

    def fn(ns):
        seen.append(int(ns))
        spin((1,), (1,), (ns,))

    result = pkit.bench(fn, rotate=args, warmup=2, reps=10)
    assert seen[:4] == [500_000, 1_000_000, 500_000, 1_000_000]
    samples = result.samples_ms
    assert np.median(samples[0::2]) == pytest.approx(0.5, rel=0.05)
    assert np.median(samples[1::2]) == pytest.approx(1.0, rel=0.05)
    graphed = pkit.bench(fn, rotate=args[:1], graph=True, warmup=2, reps=10)
    assert graphed.median_ms == pytest.approx(0.5, rel=0.05)
    assert cp.cuda.get_current_stream() == cp.cuda.Stream.null


def test_bench_averages_calls_per_sample_in_order():
    spin = pkit.compile("spin.cu", "spin_ns")
    seen = []
    args = [(np.uint64(200_000),), (np.uint64(600_000),)]

    def fn(ns):
        seen.append(int(ns))
        spin((1,), (1,), (ns,))

    result = pkit.bench(fn, rotate=args, warmup=2, reps=6, calls_per_sample=4, hide_launch=True)
    assert seen == [200_000, 600_000] * (1 + 12)  # warm-up, then call i of sample j uses set (4j + i) mod 2
    assert len(result.samples_ms) == 6 and result.median_ms == pytest.approx(0.4, rel=0.05)
    assert result.meta["calls_per_sample"] == 4


@pytest.mark.multigpu
def test_bench_multi_gpu_takes_the_slowest():
    spin = pkit.compile("spin.cu", "spin_ns")

    def fn():
        spin((1,), (1,), (np.uint64(400_000),), device=0)
        spin((1,), (1,), (np.uint64(1_200_000),), device=1)

    result = pkit.bench(fn, devices=[0, 1], warmup=2, reps=20, hide_launch=True)
    assert result.median_ms == pytest.approx(1.2, rel=0.05)


@pytest.mark.multigpu
def test_dlpack_interop_with_torch():
    # its own process: importing torch inside this pytest process fails on the GPU image (torch 2.11)
    script = textwrap.dedent("""
        import pkit, torch
        team = pkit.Team([0, 1])
        x = team.empty((1000,), "bfloat16")
        t = x.torch(1)
        assert t.dtype == torch.bfloat16 and t.device == torch.device("cuda", 1), (t.dtype, t.device)
        values = torch.randn(1000, device="cuda:1").to(torch.bfloat16)
        t.copy_(values)
        assert torch.equal(x.torch(1), values)
        print("DLPACK OK")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert "DLPACK OK" in out.stdout, out.stdout + out.stderr


@pytest.mark.gpu
def test_multi_process_team_under_torchrun():
    """One process per rank; on a one-GPU machine both ranks share it (correctness only)."""
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                          str(HERE / "mp_team_check.py")], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert out.stdout.count("MP-TEAM OK") == 2, out.stdout
