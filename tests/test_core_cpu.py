"""Core pieces that need no GPU: results and provenance, timing statistics, datasheets, roofline, CLI."""
import json
import struct

import numpy as np
import pandas as pd
import pytest

import pkit
from pkit import hardware, launch, results, roofline, timing


def test_results_round_trip_with_provenance(tmp_path):
    rng = np.random.default_rng()
    frame = pd.DataFrame({"bytes": rng.integers(1, 1 << 30, 5), "bandwidth_GBps": rng.random(5) * 400})
    written = results.record("demo", frame, {"sizes": [1, 2]}, machine="testbox-nv2", root=tmp_path)
    assert written.csv_path == tmp_path / "testbox-nv2" / "demo.csv"
    back = results.load("demo", "testbox-nv2", root=tmp_path)
    pd.testing.assert_frame_equal(back.frame, frame, rtol=1e-5)
    prov = back.provenance
    for key in ("gpus", "gpu_count", "link_matrix", "driver", "versions", "pkit_commit", "utc_time", "machine"):
        assert key in prov, key
    assert prov["parameters"] == {"sizes": [1, 2]} and prov["experiment"] == "demo" and prov["rows"] == 5
    assert prov["utc_time"].endswith("Z") and prov["versions"]["pandas"] == pd.__version__
    assert json.loads((tmp_path / "testbox-nv2" / "demo.json").read_text()) == prov


def test_results_load_missing_names_file_and_alternatives(tmp_path):
    results.record("present", pd.DataFrame({"x": [1]}), machine="m1", root=tmp_path)
    with pytest.raises(pkit.PkitError, match=r"no recorded result 'absent'.*recorded there: \['present'\]"):
        results.load("absent", "m1", root=tmp_path)


@pytest.mark.parametrize("kwargs, text", [
    (dict(experiment="x", frame=pd.DataFrame()), "frame: expected a non-empty"),
    (dict(experiment="x", frame=[1, 2]), "frame: expected a non-empty"),
    (dict(experiment="../escape", frame=pd.DataFrame({"a": [1]})), "experiment: expected a name"),
])
def test_record_rejects_bad_arguments(kwargs, text, tmp_path):
    with pytest.raises(ValueError, match=text):
        results.record(**kwargs, machine="m", root=tmp_path)


def test_measure_or_replay(tmp_path):
    calls = []

    def measure():
        calls.append(1)
        return pd.DataFrame({"v": np.random.default_rng().random(3)})

    made = results.measure_or_replay("exp", measure, mode="measure", machine="m", root=tmp_path)
    again = results.measure_or_replay("exp", measure, mode="replay", machine="m", root=tmp_path)
    assert len(calls) == 1
    pd.testing.assert_frame_equal(made.frame, again.frame, rtol=1e-5)
    with pytest.raises(ValueError, match="mode: expected"):
        results.measure_or_replay("exp", measure, mode="fast", machine="m", root=tmp_path)


def test_machine_slug_without_gpu_is_cpu():
    assert results.machine_slug() == "cpu"


def test_summarize_statistics():
    samples = np.random.default_rng().random(101) + 1.0
    r = timing.summarize(samples, label="x", devices=[0, 1], bytes=10)
    assert r.median_ms == pytest.approx(np.median(samples))
    assert r.min_ms == samples.min() and r.max_ms == samples.max()
    q1, q3 = np.percentile(samples, [25, 75])
    assert r.iqr_ms == pytest.approx(q3 - q1)
    assert r.cv == pytest.approx(samples.std() / samples.mean())
    assert r.gbps(1e9) == pytest.approx(1e9 / (r.median_ms * 1e-3) / 1e9)
    frame = r.to_frame()
    assert list(frame["devices"]) == ["0,1"] and frame["median_us"][0] == pytest.approx(r.median_ms * 1e3)
    assert frame["bytes"][0] == 10
    assert r.times_us() == pytest.approx({"time_median_us": np.median(samples) * 1e3, "time_min_us": samples.min() * 1e3,
                                          "time_max_us": samples.max() * 1e3, "cv": samples.std() / samples.mean()})
    with pytest.raises(ValueError, match="samples_ms"):
        timing.summarize([])
    with pytest.raises(ValueError, match="samples_ms"):
        timing.summarize([1.0, float("nan")])


def test_rotations_past_l2():
    l2 = 60 << 20
    assert timing.rotations_past_l2(1 << 30, l2) == 1
    assert timing.rotations_past_l2(1 << 20, l2) == 64  # capped
    assert timing.rotations_past_l2(30 << 20, l2) == 6
    with pytest.raises(ValueError, match="nbytes_per_call"):
        timing.rotations_past_l2(0, l2)


def test_bench_without_gpu_names_the_problem():
    pytest.importorskip("cupy")
    with pytest.raises(pkit.PkitError, match="this machine has 0 GPUs"):
        pkit.bench(lambda: None, devices=[0])


def test_bench_checks_calls_per_sample_first():
    pytest.importorskip("cupy")
    for bad in (0, 2.5, "4"):
        with pytest.raises(ValueError, match="calls_per_sample: expected an integer >= 1"):
            pkit.bench(lambda: None, devices=[0], calls_per_sample=bad)
    with pytest.raises(ValueError, match="hide_launch needs at least one warm-up call"):
        pkit.bench(lambda: None, devices=[0], warmup=0, hide_launch=True)


def test_team_without_gpu_names_the_problem():
    with pytest.raises(pkit.PkitError, match=r"devices: expected GPU ids in \[0, 0\), got \[0, 1\]"):
        pkit.Team([0, 1])
    with pytest.raises(ValueError, match=r"distinct GPU ids, got \[0, 0\] \(ranks that share a GPU.*share_gpus=True"):
        pkit.Team([0, 0])
    with pytest.raises(pkit.PkitError, match=r"got \[0, 0\]"):
        pkit.Team([0, 0], share_gpus=True)


def test_datasheet_trend_shows_the_gap():
    t = hardware.trend()
    assert t.loc["B200", "compute_x"] == pytest.approx(7.2, abs=0.02)
    assert t.loc["B200", "nvlink_x"] == pytest.approx(3.0)
    assert t.loc["B200", "network_x"] == pytest.approx(2.0)
    assert all(g.source for g in hardware.GPUS.values())
    with pytest.raises(ValueError, match="base: expected"):
        hardware.trend("V100")


def test_roofline_floor():
    c = roofline.Ceilings(1e15, 4e12, 4e11, "test")
    f = roofline.floor({"flops": 1e12, "hbm_bytes": 8e9, "link_bytes": 4e9}, c)
    assert (f.compute_s, f.hbm_s, f.link_s) == pytest.approx((1e-3, 2e-3, 1e-2))
    assert f.bound == "link" and f.time_s == pytest.approx(1e-2)
    with pytest.raises(ValueError, match="missing"):
        roofline.floor({"flops": 1}, c)
    with pytest.raises(ValueError, match="non-negative"):
        roofline.floor({"flops": -1, "hbm_bytes": 0, "link_bytes": 0}, c)


def test_wait_report_decoding():
    assert launch.parse_report(bytes(104)) is None
    raw = struct.pack("<IiiIIIQQ64s", 1, 42, 1, 7, 3, 0, 0xDEAD00, 250_000_000, b"my_kernel")
    err = launch.parse_report(raw)
    assert isinstance(err, pkit.PeerTimeout)
    assert (err.kernel, err.line, err.device, err.expected, err.observed) == ("my_kernel", 42, 1, 7, 3)
    assert err.waited_s == pytest.approx(0.25) and "my_kernel" in str(err) and "0xdead00" in str(err)
    with pytest.raises(ValueError, match="raw: expected 104"):
        launch.parse_report(b"short")


def test_pkit_info_without_gpu_exits_zero(capsys):
    """`pkit info` run in this process (which has imported torch already; a new interpreter would import it again,
    seconds of a core): exit code 0, the version line and the no-GPU line."""
    from pkit.cli import main

    assert main(["info"]) == 0
    out = capsys.readouterr()
    assert "No CUDA GPU visible" in out.out and "pkit 0.1.0" in out.out, out.err


@pytest.mark.parametrize("registry, first_column, entry", [("collectives", "name", "all_reduce"),
                                                           ("schedules", "pattern", "ce_flags"),
                                                           ("systems", "name", "NVL72")])
def test_pkit_list_prints_each_registry(registry, first_column, entry, capsys):
    from pkit.cli import main

    assert main(["list", registry]) == 0
    printed = capsys.readouterr().out
    assert printed.split()[0].removesuffix(":") == first_column and entry in printed  # a table, or one block per entry


def test_nvlink_counting_direct_and_switched():
    from types import SimpleNamespace

    from pkit import gpus

    class FakeNvml:
        NVML_NVLINK_MAX_LINKS, NVML_FEATURE_ENABLED, NVMLError = 6, 1, RuntimeError

        def __init__(self, remotes):
            self.remotes = remotes  # per link: remote bus id, or None for an inactive link

        def nvmlDeviceGetNvLinkState(self, handle, link):
            return int(self.remotes[link] is not None)

        def nvmlDeviceGetNvLinkRemotePciInfo(self, handle, link):
            return SimpleNamespace(busId=self.remotes[link].encode())

    peer = "0000:1B:00.0"
    direct = FakeNvml(["00000000:1b:00.0"] * 4 + [None, "00000000:2c:00.0"])
    assert gpus._nvlinks_between(direct, None, peer) == 4
    switched = FakeNvml(["00000000:aa:00.0"] * 5 + [None])  # every link lands on an NVSwitch
    assert gpus._nvlinks_between(switched, None, peer) == 5
    assert gpus._bus_key("0000:1B:00.0") == gpus._bus_key(b"00000000:1b:00.0")
