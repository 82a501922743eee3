"""Hierarchy study: chains, partition split, matrix printer and argument checks on CPU; the chase,
the copies and the sweeps on GPUs."""
import contextlib

import numpy as np
import pandas as pd
import pytest

from pkit.experiments import hierarchy
from pkit.experiments.hierarchy import cross_check
from pkit.experiments.hierarchy import chase as C, matrix as M
from pkit.experiments.hierarchy.memory import LEVELS, pattern

MiB = 1 << 20


def follow(order_or_links, start, n):
    seen, p = [], start
    for _ in range(n):
        seen.append(p)
        p = order_or_links(p)
    return seen, p


@pytest.mark.parametrize("n", [2, 3, 17, 4096])
def test_chain_is_one_cycle_through_every_slot(n):
    order = C.cyclic_order(n, seed=n)
    nxt = C.next_slots(order)
    seen, end = follow(lambda s: int(nxt[s]), 0, n)
    assert order[0] == 0 and end == 0 and sorted(seen) == list(range(n))
    assert seen == order.tolist()


def test_write_chain_links_absolute_addresses():
    n, stride, base = 64, 128, 0x7F0000000000
    words = np.zeros(n * stride // 8, dtype=np.uint64)
    order = C.write_chain(np, words, base, n, stride, seed=3)
    link = lambda address: int(words[(address - base) // 8])  # noqa: E731
    seen, end = follow(link, base, n)
    assert end == base and sorted((a - base) // stride for a in seen) == list(range(n))
    assert [(a - base) // stride for a in seen] == order.tolist()
    assert np.count_nonzero(words) == n  # only one word per cache line is a link


def test_near_far_split():
    rng = np.random.default_rng(0)
    bimodal = np.concatenate([rng.normal(220, 4, 600), rng.normal(420, 6, 400)]) + 30  # +30: timing overhead
    near, far = C.near_far(bimodal, cycles_per_hop=0.6 * 220 + 0.4 * 420)
    assert near == pytest.approx(220, abs=5) and far == pytest.approx(420, abs=5)
    assert C.near_far(rng.normal(300, 10, 1000), 300) is None
    assert C.near_far(rng.uniform(200, 400, 1000), 300) is None
    assert C.near_far(np.full(100, 7.0), 7) is None
    with pytest.raises(ValueError, match="profile_cycles"):
        C.near_far([1, 2, 3], 2)
    with pytest.raises(ValueError, match="cycles_per_hop"):
        C.near_far(bimodal, 0)


def test_pattern_neighbours_differ_and_levels_ordered():
    p = pattern(np, 1 << 16)
    assert p.dtype == np.uint32 and np.all(p[1:] != p[:-1])
    assert LEVELS[0] == "shared memory" and LEVELS[-1] == "host (PCIe)"
    assert [p.level for p in C.LADDER] == list(LEVELS)
    assert [p.level for p in hierarchy.READS] == list(LEVELS)


def test_testcases_use_nvbandwidth_names_and_issuers():
    for name in ("host_to_device_memcpy_ce", "device_to_host_memcpy_ce", "device_to_device_memcpy_read_ce",
                 "device_to_device_memcpy_write_ce", "device_to_device_bidirectional_memcpy_read_ce",
                 "device_to_device_bidirectional_memcpy_write_ce", "device_local_copy",
                 "host_to_device_memcpy_sm", "device_to_device_memcpy_read_sm", "device_to_device_memcpy_write_sm"):
        assert name in M.TESTCASES
    assert M.plan_copies("d2d_read", 0, 1)[0].issuer == 1  # the reader moves the data
    assert M.plan_copies("d2d_write", 0, 1)[0].issuer == 0
    assert {(c.src, c.dst, c.issuer) for c in M.plan_copies("d2d_bidir_write", 0, 1)} == {("GPU0", "GPU1", 0),
                                                                                         ("GPU1", "GPU0", 1)}
    assert M.counted("local") == ("read+write", 2) and M.counted("h2d_bidir") == ("both directions", 2)
    with pytest.raises(ValueError, match="kind"):
        M.plan_copies("sideways", 0, 1)


def recorded_style_matrix() -> pd.DataFrame:
    """A frame shaped like bandwidth_matrix's output, with made-up values (1 + row number)."""
    rows = []
    for name, t in M.TESTCASES.items():
        for a, b in M._endpoints(t.kind, [0, 1]):
            copies = M.plan_copies(t.kind, a, b)
            rows.append({"testcase": name, "engine": t.engine, "src": copies[0].src, "dst": copies[0].dst,
                         "bytes": 512 * MiB, "copies": len(copies), "counted": M.counted(t.kind)[0],
                         "bandwidth_GBps": 1.0 + len(rows), "time_median_us": 1.0, "cv": 0.01, "verified": True})
    return pd.DataFrame(rows)


def test_matrix_printer_formats_like_nvbandwidth(capsys):
    df = recorded_style_matrix()
    text = M.format_matrix(df, "device_to_host_memcpy_ce").splitlines()
    assert text[0] == "Running device_to_host_memcpy_ce."
    assert text[1] == "memcpy CE CPU(row) <- GPU(column) bandwidth (GB/s), one direction, 512 MiB"
    assert text[2].split() == ["0", "1"] and text[3].split()[0] == "0" and len(text) == 4
    write = M.format_matrix(df, "device_to_device_memcpy_write_sm").splitlines()
    assert write[1].startswith("memcpy SM GPU(row) -> GPU(column)")
    assert write[3].split()[1] == "N/A" and write[4].split()[2] == "N/A"
    local = M.format_matrix(df, "device_local_copy").splitlines()
    assert "read+write" in local[1] and local[3].split()[2] == "N/A"
    M.print_matrix(df)
    out = capsys.readouterr().out
    assert out.count("Running ") == len(M.TESTCASES)
    with pytest.raises(ValueError, match="testcase: no rows"):
        M.format_matrix(df[df["testcase"] != "device_local_copy"], "device_local_copy")
    with pytest.raises(ValueError, match="testcase: expected"):
        M.format_matrix(df, "nope")
    with pytest.raises(ValueError, match="frame: missing"):
        M.format_matrix(df.drop(columns=["counted"]), "device_local_copy")


def test_matrix_tables_and_ladder_summary():
    df = recorded_style_matrix()
    table = M.matrix_table(df)
    assert list(table.index) == list(M.TESTCASES) and "GPU0 -> GPU1" in table.columns
    assert table.notna().sum().sum() == len(df)
    paths = hierarchy.key_paths(df, 0, 1)
    assert len(paths) == len(M.KEY_PATHS) and paths["testcase"].tolist() == [t for _, t, _, _ in M.KEY_PATHS]
    assert hierarchy.key_paths(df, 1, 0)["src"].iloc[0] == "GPU1"
    ladder = pd.DataFrame({"level": list(LEVELS), "latency_ns": [10.0, 20.0, 100.0, 200.0, 600.0, 800.0]})
    assert hierarchy.ladder_summary(ladder)["latency_vs_hbm"].tolist() == [0.05, 0.1, 0.5, 1.0, 3.0, 4.0]
    with pytest.raises(ValueError, match="frame: expected a ladder"):
        hierarchy.ladder_summary(ladder[ladder["level"] != hierarchy.HBM])
    for call in (M.matrix_table, M.key_paths):
        with pytest.raises(ValueError, match="frame: missing columns"):
            call(df.drop(columns=["bytes"]))


def test_half_bandwidth_point():
    df = pd.DataFrame({"mechanism": ["a"] * 4 + ["b"] * 2, "bytes": [1, 2, 4, 8, 1, 2],
                       "bandwidth_GBps": [1.0, 2.0, 6.0, 8.0, 5.0, 6.0]})
    half = hierarchy.half_bandwidth_point(df).set_index("mechanism")
    assert half.loc["a", "peak_GBps"] == 8 and half.loc["a", "half_bytes"] == pytest.approx(2 ** 1.5)
    assert half.loc["b", "half_bytes"] == 1  # already above half at the smallest size
    with pytest.raises(ValueError, match="frame: missing"):
        hierarchy.half_bandwidth_point(df.drop(columns=["bytes"]))
    routes = pd.concat([df.assign(route="GPU0 → GPU0"), df.assign(route="CPU → GPU0", bandwidth_GBps=8.0)])
    by_route = hierarchy.half_bandwidth_point(routes, by=["route", "mechanism"]).set_index(["route", "mechanism"])
    assert by_route.loc[("GPU0 → GPU0", "a"), "half_bytes"] == pytest.approx(2 ** 1.5)
    assert by_route.loc[("CPU → GPU0", "a"), "half_bytes"] == 1 and len(by_route) == 4
    assert hierarchy.half_bandwidth_point(routes).equals(by_route.reset_index())  # the default groups by route
    assert list(hierarchy.half_bandwidth_point(routes, by="route")["route"]) == ["CPU → GPU0", "GPU0 → GPU0"]
    with pytest.raises(ValueError, match=r"frame: missing columns \['route'\]"):
        hierarchy.half_bandwidth_point(df, by=["route", "mechanism"])


@pytest.mark.parametrize("call, text", [
    (lambda: C.latency_ladder(0, 0), "peer: expected"),
    (lambda: C.latency_ladder(peer=0), "peer: expected"),
    (lambda: C.latency_ladder(0, 1, reps=0), "reps: expected"),
    (lambda: C.latency_ladder(0, 1, stride=12), "stride: expected"),
    (lambda: C.latency_ladder(-1, 1), "device: expected"),
    (lambda: C.latency_ladder(0, 1, plans=[]), "plans: expected"),
    (lambda: C.working_set_sweep([4096, 1000]), "sizes_bytes: expected"),
    (lambda: C.working_set_sweep([128]), "sizes_bytes: expected"),
    (lambda: C.working_set_sweep([4096], hops=0), "hops: expected"),
    (lambda: C.cyclic_order(1), "n_slots: expected"),
    (lambda: M.bandwidth_matrix((0, 0)), "gpus: expected"),
    (lambda: M.bandwidth_matrix((0, 1), nbytes=1000), "nbytes: expected"),
    (lambda: M.bandwidth_matrix((0, 1), testcases=["fastest"]), "testcases: unknown"),
    (lambda: M.bandwidth_matrix((0,), testcases=["device_to_device_memcpy_read_ce"]), "need two GPUs"),
    (lambda: M.bandwidth_matrix(testcases=[]), "testcases: unknown"),
    (lambda: M.bandwidth_matrix((0, 1), reps=0), "reps, warmup"),
    (lambda: hierarchy.level_bandwidth(1, 1), "peer: expected"),
    (lambda: hierarchy.level_bandwidth(0, 1, warmup=-1), "reps, warmup"),
    (lambda: hierarchy.ladder(0, 0), "peer: expected"),
    (lambda: hierarchy.peer_size_sweep([4096], 1, 1), "src, dst: expected two different GPUs"),
    (lambda: hierarchy.size_sweep([4001]), "sizes_bytes: expected"),
    (lambda: hierarchy.size_sweep([4096], mechanisms=["warp"]), "mechanisms: unknown"),
    (lambda: hierarchy.size_sweep([4096], routes=["GPU0 - GPU1"]), "route: expected a label"),
    (lambda: hierarchy.peer_size_sweep([4001]), "sizes_bytes: expected"),
    (lambda: pattern(np, -1), "n_words"),
])
def test_arguments_are_checked_before_any_gpu_work(call, text):
    with pytest.raises(ValueError, match=text):
        call()


# ---------------------------------------------------------------- on GPUs


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["chase_l1", "chase_l2"])
def test_global_chase_visits_every_slot(kernel):
    import cupy as cp

    n, stride = 1000, 128
    words = cp.zeros(n * stride // 8, dtype=cp.uint64)
    base = words.data.ptr
    order = C.write_chain(cp, words, base, n, stride, seed=5)
    out = cp.zeros(3, dtype=cp.uint64)
    chase = C._kernel(kernel)
    for warm, hops in [(0, n), (0, 2 * n), (n, 7), (3, n - 1)]:
        chase((1,), (1,), (np.uint64(base), np.uint64(warm), np.uint64(hops), out), device=0)
        cp.cuda.runtime.deviceSynchronize()
        cycles, ns, end = (int(v) for v in out.get())
        assert end == base + int(order[(warm + hops) % n]) * stride, (warm, hops)
        assert cycles > hops and ns > 0


@pytest.mark.gpu
def test_shared_chase_visits_every_slot_and_profile_stops_where_expected():
    import cupy as cp

    n, stride = 128, 128
    order = C.cyclic_order(n, seed=9)
    table = cp.asarray(C.next_slots(order).astype(np.uint32))
    out = cp.zeros(3, dtype=cp.uint64)
    for hops in (n, 3 * n, n + 5):
        C._kernel("chase_shared")((1,), (128,), (table, np.uint32(n), np.uint32(stride), np.uint64(0),
                                                 np.uint64(hops), out), shared_mem=n * stride, device=0)
        cp.cuda.runtime.deviceSynchronize()
        assert int(out[2]) == int(order[hops % n])
    words = cp.zeros(4096 * stride // 8, dtype=cp.uint64)
    chain = C.write_chain(cp, words, words.data.ptr, 4096, stride)
    cycles = C._profile(0, words.data.ptr, chain, stride)  # raises unless it stopped back at slot 0
    assert cycles.shape == (C.PROFILE_HOPS,) and np.all(cycles > 0)


@pytest.mark.gpu
def test_working_set_sweep_rows_and_steps():
    sizes = [4096, 1 * MiB, 256 * MiB]
    df = C.working_set_sweep(sizes, hops=1024, reps=2)
    assert df["working_set_bytes"].tolist() == sizes and len(df) == 3
    assert (df["load"] == "ld.global.ca").all() and (df["latency_cycles"] > 0).all()
    assert df["latency_ns"].iloc[0] < df["latency_ns"].iloc[2]


@pytest.mark.multigpu
def test_latency_ladder_is_ordered():
    df = C.latency_ladder(0, 1, reps=2)
    levels = df[df["kind"] == "level"].set_index("level")["latency_ns"]
    assert list(levels.index) == list(LEVELS)
    assert levels["shared memory"] < levels["L2"]
    assert levels["L1"] < levels["L2"] < levels["HBM"] < levels["peer HBM (NVLink)"] < levels["host (PCIe)"]
    assert set(df["kind"]) <= {"level", "partition"} and (df["latency_cycles"] > 0).all()


@pytest.mark.multigpu
def test_level_bandwidth_and_ladder_rows():
    df = hierarchy.level_bandwidth(0, 1, reps=3, warmup=1)
    assert df["level"].tolist() == list(LEVELS) and (df["bandwidth_GBps"] > 0).all()
    bw = df.set_index("level")["bandwidth_GBps"]
    assert bw["L2"] > bw["HBM"] > bw["peer HBM (NVLink)"] > bw["host (PCIe)"]


@pytest.mark.multigpu
def test_copies_are_verified_word_by_word():
    import cupy as cp

    with contextlib.ExitStack() as stack:
        buffers = M._Buffers([0, 1], 4 * MiB, stack)
        for label in ("GPU1", "CPU"):
            buffers.poison(label)
            assert not buffers.verified(label)
            cp.cuda.runtime.memcpy(buffers.dst[label], buffers.src[label], 4 * MiB, cp.cuda.runtime.memcpyDefault)
            assert buffers.verified(label)
        with cp.cuda.Device(1):
            buffers.arrays["GPU1"][1][12345] ^= 1
        assert not buffers.verified("GPU1")


@pytest.mark.multigpu
def test_bandwidth_matrix_every_testcase_verified():
    df = M.bandwidth_matrix((0, 1), nbytes=16 * MiB + 16, reps=2, warmup=1)
    expected = sum(len(M._endpoints(t.kind, [0, 1])) for t in M.TESTCASES.values())
    assert len(df) == expected and df["verified"].all() and (df["bandwidth_GBps"] > 0).all()
    assert set(df["testcase"]) == set(M.TESTCASES)
    assert df.groupby(["testcase", "src", "dst", "bytes"]).size().max() == 1
    M.print_matrix(df)


@pytest.mark.multigpu
def test_peer_size_sweep_rows():
    sizes = [4096, 1 * MiB, 64 * MiB]
    df = hierarchy.peer_size_sweep(sizes, reps=3, warmup=1)
    assert len(df) == 3 * len(sizes) and df["mechanism"].tolist() == ["sm_push", "sm_pull", "ce"] * len(sizes)
    assert df["verified"].all() and (df["latency_us"] == df["time_median_us"]).all()
    assert (df["route"] == "GPU0 → GPU1").all() and "blocks" not in df.columns
    assert len(hierarchy.half_bandwidth_point(df)) == 3


def _gpus() -> int:
    from pkit.ops.transfers import gpu_count

    return gpu_count()


@pytest.mark.gpu
def test_ladder_on_the_machines_gpus():
    """The default ladder: every level, the peer rung only where the machine has a second GPU."""
    df = hierarchy.ladder(latency_reps=2, bandwidth_reps=2)
    levels = df[df["kind"] == "level"].set_index("level")
    expected = [lv for lv in LEVELS if _gpus() >= 2 or lv != hierarchy.PEER]
    assert list(levels.index) == expected and (levels["bandwidth_GBps"] > 0).all()
    assert levels.loc["L1", "latency_ns"] < levels.loc["L2", "latency_ns"] < levels.loc["HBM", "latency_ns"]
    assert levels.loc["HBM", "latency_ns"] < levels.loc["host (PCIe)", "latency_ns"]
    assert levels.loc["L2", "bandwidth_GBps"] > levels.loc["HBM", "bandwidth_GBps"] > levels.loc["host (PCIe)",
                                                                                                 "bandwidth_GBps"]
    print(hierarchy.ladder_summary(df).round(3).to_string())


@pytest.mark.gpu
def test_bandwidth_matrix_on_one_gpu_leaves_device_to_device_out():
    df = M.bandwidth_matrix([0], nbytes=16 * MiB + 16, reps=2, warmup=1)
    assert set(df["testcase"]) == {n for n, t in M.TESTCASES.items() if not t.kind.startswith("d2d")}
    assert df["verified"].all() and (df["bandwidth_GBps"] > 0).all() and set(df["engine"]) == {"ce", "sm"}
    assert set(df["src"]) | set(df["dst"]) == {"CPU", "GPU0"}
    M.print_matrix(df)


@pytest.mark.gpu
def test_size_sweep_on_the_machines_routes():
    sizes = [4096, 1 * MiB, 16 * MiB]
    df = hierarchy.size_sweep(sizes, reps=3, warmup=1)
    routes = hierarchy.size_routes()
    from pkit.ops.transfers import expand

    per_route = {r.label: expand(r, ["ce", "sm"]) for r in routes}
    assert len(df) == len(sizes) * sum(len(m) for m in per_route.values()) and df["verified"].all()
    assert df.groupby("route")["mechanism"].apply(set).to_dict() == {k: set(v) for k, v in per_route.items()}
    assert list(df.columns[:3]) == ["route", "mechanism", "bytes"] and "latency_us" in df.columns
    half = hierarchy.half_bandwidth_point(df, by=["route", "mechanism"])
    assert len(half) == sum(len(m) for m in per_route.values())


@pytest.mark.gpu
def test_local_and_host_copies_match_a_plain_torch_measurement():
    """The cross-check: pkit's matrix numbers on GPU 0 for the copy engine's local copy (read + write counted)
    and host → device copy against torch's `copy_` of 512 MiB timed with CUDA events (median of 20 after
    warm-up), measured here; within 5%."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    frame = M.bandwidth_matrix([0], 512 * MiB, list(cross_check.CHECKED_TESTCASES), reps=20, warmup=3)
    table = cross_check.cross_check(frame, device=0)
    print(table.round(4).to_string())
    assert len(table) == 2 and ((table["ratio"] - 1).abs() <= 0.05).all(), table.to_string()
