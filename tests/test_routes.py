"""Routes on CPU: labels, per-route mechanisms, defaults decided from the machine (a stand-in machine of 0, 1 or
2 GPUs), clear errors before any GPU work, and the per-route summaries on hand-built frames."""
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

import pkit.gpus
from pkit.experiments import hierarchy, mechanisms, quickstart
from pkit.experiments.hierarchy import chase as C, matrix as M
from pkit.ops import transfers as T
from pkit.ops.transfers import Route


@pytest.fixture
def machine(monkeypatch):
    """`machine(n)` makes pkit.devices() report n H200s for the rest of the test."""
    def make(n: int):
        gpu = pkit.gpus.GPUInfo(0, "NVIDIA H200", "9.0", 132, 141 << 30, 60 << 20, "0000:18:00.0")
        monkeypatch.setattr(pkit.gpus, "devices", lambda: [gpu] * n)

    return make


@pytest.mark.parametrize("label, kind, gpus", [("GPU0 → GPU1", "peer", (0, 1)), ("GPU3 → GPU3", "local", (3,)),
                                               ("CPU → GPU0", "h2d", (0,)), ("GPU2 → CPU", "d2h", (2,)),
                                               ("GPU0->GPU1", "peer", (0, 1))])
def test_route_labels_parse_and_print(label, kind, gpus):
    route = Route.parse(label)
    assert route.kind == kind and route.gpus == gpus
    assert Route.parse(route.label) == route and str(route) == route.label and "→" in route.label
    assert route.mechanisms == T.ROUTE_MECHANISMS[kind]


@pytest.mark.parametrize("text", ["GPU0", "CPU → CPU", "GPU-1 → GPU0", "gpu0 → gpu1", "HOST → GPU0", ""])
def test_bad_route_labels_say_what_a_label_looks_like(text):
    with pytest.raises(ValueError, match="route: expected"):
        Route.parse(text)


def test_routes_check_their_ends():
    with pytest.raises(ValueError, match="not both the host"):
        Route(None, None)
    with pytest.raises(ValueError, match="GPU ids >= 0"):
        Route(-1, 0)


def test_one_registry_of_mechanisms_per_route_kind():
    assert T.MECHANISMS == T.ROUTE_MECHANISMS["peer"] == ("ce", "sm_push", "sm_pull", "tma_push", "tma_pull")
    assert set(T.ROUTE_MECHANISMS) == {"peer", "local", "h2d", "d2h"}
    for kind in ("local", "h2d", "d2h"):
        assert {"ce", "sm"} <= set(T.ROUTE_MECHANISMS[kind]) <= {"ce", "sm", "tma"}
    assert T.ALL_MECHANISMS[:5] == T.MECHANISMS and set(T.ALL_MECHANISMS) == {
        m for names in T.ROUTE_MECHANISMS.values() for m in names}
    assert {T.family(m) for m in T.ALL_MECHANISMS} == {"ce", "sm", "tma"}


@pytest.mark.parametrize("mechanism, src, dst, on", [
    ("ce", 0, 1, 0), ("sm_push", 0, 1, 0), ("sm_pull", 0, 1, 1), ("tma_pull", 1, 0, 0),
    ("ce", None, 2, 2), ("sm", 2, None, 2), ("tma", None, 1, 1), ("sm", 1, 1, 1), ("sm_push", 1, 1, 1)])
def test_worker_is_the_gpu_that_moves_the_bytes(mechanism, src, dst, on):
    assert T.worker(mechanism, src, dst) == on
    assert all(Route(src, dst).worker(m) in Route(src, dst).gpus for m in Route(src, dst).mechanisms)


@pytest.mark.parametrize("mechanism, src, dst, text", [
    ("sm", 0, 1, "names no GPU to run on between two GPUs; use sm_push"),
    ("tma", 0, 1, "use tma_push .* or tma_pull"),
    ("sm_push", None, 0, "would run on the host"),
    ("tma_pull", 0, None, "would run on the host"),
    ("dma", 0, 0, "mechanism: expected one of"),
])
def test_worker_refuses_what_cannot_run(mechanism, src, dst, text):
    with pytest.raises(ValueError, match=text):
        T.worker(mechanism, src, dst)


def test_families_expand_per_route():
    peer, local, h2d = Route(0, 1), Route(0, 0), Route(None, 0)
    assert T.expand(peer, ["sm", "tma"]) == list(mechanisms.SM_MECHANISMS)
    assert T.expand(peer, ["sm_pull", "ce"]) == ["sm_pull", "ce"]
    assert T.expand(local, ["ce", "sm"]) == ["ce", "sm"] and T.expand(local, ["sm_push"]) == []
    assert T.expand(h2d) == list(T.ROUTE_MECHANISMS["h2d"])
    with pytest.raises(ValueError, match="mechanisms: unknown"):
        T.check_mechanisms(["sm", "warp"])


@pytest.mark.parametrize("n, route, routes", [
    (1, "GPU0 → GPU0", ["GPU0 → GPU0", "CPU → GPU0", "GPU0 → CPU"]),
    (2, "GPU0 → GPU1", ["GPU0 → GPU1"]),
    (8, "GPU0 → GPU1", ["GPU0 → GPU1"]),
])
def test_defaults_come_from_the_machine(machine, n, route, routes):
    machine(n)
    assert T.default_route().label == route
    assert [r.label for r in T.default_routes()] == routes
    assert [r.label for r in mechanisms.resolve_routes()] == routes
    assert [r.label for r in mechanisms.resolve_routes(src=0)] == [route]
    assert [r.label for r in hierarchy.size_routes()] == (["GPU0 → GPU1"] if n > 1 else ["GPU0 → GPU0",
                                                                                          "CPU → GPU0"])
    assert C.device_and_peer() == (0, 1 if n > 1 else None)
    assert M.on_machine(None, None)[0] == list(range(n))
    d2d = [k for k, t in M.TESTCASES.items() if t.kind.startswith("d2d")]
    assert bool(set(M.on_machine(None, None)[1]) & set(d2d)) == (n > 1)
    assert T.default_route(dst=0).label == "GPU0 → GPU0"
    if n > 1:
        assert T.default_route(n - 1).label == f"GPU{n - 1} → GPU0"  # the next GPU wraps round


def test_without_a_peer_the_ladders_leave_the_peer_rung_out():
    assert [p.level for p in C.without_peer(C.LADDER, None)] == [lv for lv in hierarchy.LEVELS if lv != hierarchy.PEER]
    assert C.without_peer(hierarchy.READS, 1) == list(hierarchy.READS)


@pytest.mark.parametrize("call, text", [
    (lambda: mechanisms.sm_sweep(routes=["GPU0 → GPU1"]),
     r"routes: expected routes among GPU ids \[0\] and the host, got 'GPU0 → GPU1'; this machine has 1 GPU"),
    (lambda: mechanisms.size_sweep(routes=["CPU → GPU2"]), "routes: expected routes among GPU ids"),
    (lambda: mechanisms.size_sweep(src=0, dst=1), "src, dst: expected routes among GPU ids"),
    (lambda: mechanisms.size_sweep(["sm_pull"], routes=["GPU0 → GPU0"]), "sizes: expected"),
    (lambda: mechanisms.size_sweep(mechanisms=["sm_pull"], routes=["GPU0 → GPU0"]), "run on none of the routes"),
    (lambda: mechanisms.split_sweep(), "split_sweep needs two"),
    (lambda: quickstart.peer_copy_sweep(None, [4096], 0, 1), "src, dst: expected routes among GPU ids"),
    (lambda: quickstart.peer_copy_sweep(None, [4096], 3), r"src: expected GPU ids in \[0, 1\), got 3"),
    (lambda: hierarchy.peer_size_sweep([4096]), "src, dst: expected two different GPUs .*GPU0 → GPU0"),
    (lambda: hierarchy.size_sweep([4096], routes=["GPU0 → GPU1"]), "this machine has 1 GPU"),
    (lambda: hierarchy.ladder(0, 1), "peer: expected None on a machine with one GPU"),
    (lambda: hierarchy.level_bandwidth(peer=1), "peer: expected None on a machine with one GPU"),
    (lambda: C.latency_ladder(1), r"device: expected GPU ids in \[0, 1\), got 1; this machine has 1 GPU"),
    (lambda: M.bandwidth_matrix((0, 1)), r"gpus: expected GPU ids in \[0, 1\), got \[0, 1\]; this machine has 1 GPU"),
    (lambda: M.bandwidth_matrix(testcases=["device_to_device_memcpy_read_ce"]), "need two GPUs"),
])
def test_one_gpu_machine_refuses_what_it_lacks_before_any_gpu_work(machine, call, text):
    machine(1)
    with pytest.raises(ValueError, match=text):
        call()


def test_a_machine_without_gpus_says_so(machine):
    machine(0)
    for call in (lambda: mechanisms.size_sweep(), lambda: hierarchy.ladder(), lambda: M.bandwidth_matrix()):
        with pytest.raises(ValueError, match="this machine has 0 GPUs"):
            call()


def _stand_in(device, nbytes: int = 64):
    if device is None:
        return np.zeros(nbytes, dtype=np.uint8)
    return SimpleNamespace(device=SimpleNamespace(id=device), nbytes=nbytes, data=SimpleNamespace(ptr=0))


@pytest.mark.parametrize("src, dst, mechanism, text", [
    (0, 1, "sm", "use sm_push"), (None, 0, "sm_push", "would run on the host"),
    (0, None, "tma_pull", "would run on the host"), (0, 0, "carrier_pigeon", "mechanism: expected one of")])
def test_peer_copy_checks_the_route_before_any_work(src, dst, mechanism, text):
    pytest.importorskip("cupy")
    with pytest.raises(ValueError, match=text):
        T.peer_copy(_stand_in(dst), _stand_in(src), mechanism)


# ---------------------------------------------------------------- per-route summaries of hand-built frames


def _two_routes(values: dict) -> pd.DataFrame:
    """Rows of {route: {mechanism: GB/s}} at 1 GiB."""
    return pd.DataFrame([{"route": r, "mechanism": m, "bytes": 1 << 30, "blocks": 0 if m == "ce" else 132,
                          "bandwidth_GBps": v, "time_median_us": 1e6 * (1 << 30) / (v * 1e9)}
                         for r, per in values.items() for m, v in per.items()])


ONE_GPU = {"GPU0 → GPU0": {"ce": 2095.0, "sm": 1945.0, "tma": 1900.0}, "CPU → GPU0": {"ce": 55.5, "sm": 50.0}}


def test_summaries_group_by_route():
    frame = _two_routes(ONE_GPU)
    summary = quickstart.summary(frame).set_index(["route", "mechanism"])
    assert summary.loc[("CPU → GPU0", "ce"), "vs_ce"] == 1.0
    assert summary.loc[("GPU0 → GPU0", "sm"), "vs_ce"] == pytest.approx(1945 / 2095)
    need = mechanisms.sms_to_reach(frame, 0.9).set_index(["route", "mechanism"])
    assert need.loc[("CPU → GPU0", "sm"), "reference_GBps"] == 55.5 and len(need) == 3
    versus = mechanisms.best_sm_vs_ce(frame)
    assert versus.loc[("CPU → GPU0", 1 << 30), "ratio"] == pytest.approx(50 / 55.5)
    assert versus.loc[("GPU0 → GPU0", 1 << 30), "best_sm_mechanism"] == "sm"
    assert mechanisms.small_message_times(frame, max_bytes=1 << 30).shape == (2, 3)


def test_summaries_read_frames_without_routes_as_one_route():
    """Recorded 2-GPU frames have no route column: the summaries read them as they always have."""
    frame = _two_routes({"GPU0 → GPU1": {"ce": 396.0, "sm_push": 369.0, "tma_pull": 380.0}}).drop(columns="route")
    assert "route" not in quickstart.summary(frame).columns
    assert "route" not in mechanisms.sms_to_reach(frame).columns
    assert mechanisms.best_sm_vs_ce(frame).index.tolist() == [1 << 30]
    assert "route" not in hierarchy.half_bandwidth_point(frame).columns


def test_summaries_name_the_route_that_lacks_the_copy_engine():
    frame = _two_routes({"GPU0 → GPU0": {"ce": 2095.0, "sm": 1945.0}, "CPU → GPU0": {"sm": 50.0}})
    with pytest.raises(ValueError, match="of route 'CPU → GPU0'"):
        quickstart.summary(frame)
    with pytest.raises(ValueError, match="on every route"):
        mechanisms.best_sm_vs_ce(frame)
