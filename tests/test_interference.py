"""The interference study (a GEMM beside copies on one GPU) and the overlap model calibrated on it."""
import numpy as np
import pandas as pd
import pytest

from pkit import results
from pkit.experiments.overlap import interference as I
from pkit.experiments.overlap import gemm_fit
from pkit.experiments.overlap import links as L
from pkit.experiments.overlap import model as M
from pkit.ops import gemm, gemm_plans

ROOT = results.REPO_ROOT


@pytest.mark.parametrize("call, match", [
    (lambda: I.copies(device=5), r"device: expected a GPU id in \[0, "),
    (lambda: I._shapes([(8192, 1001, 8192)]), "shapes: expected .* N a multiple of 8"),
    (lambda: I._shapes([]), "shapes: expected"),
])
def test_bad_arguments_name_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_paced_chunks_keep_the_host_thread_at_a_pace_it_can_hold():
    for rate in (50e9, 100e9, 400e9, 1200e9):
        n = I.chunk_bytes(rate)
        assert n % 16 == 0 and n >= 16 << 20 and n / rate >= I.PERIOD_S * 0.999
    assert I.Traffic("ce", "GPU0 → GPU0").chunk == 256 << 20 and I.Traffic("ce", "CPU → GPU0").chunk == 16 << 20


def _copies_frame(a: float, b: float, rng) -> pd.DataFrame:
    """Copies rows whose time ratios follow 1 + a·u + b·u² exactly (u in TB/s)."""
    traffic = np.array([200.0, 400.0, 800.0, 1600.0, 2400.0, 50.0])
    ratio = 1 / (1 + a * traffic / 1000 + b * (traffic / 1000) ** 2)
    return pd.DataFrame({"gemm": "cublas", "hbm_traffic_GBps": traffic, "rate_ratio": ratio, "m": 8192, "n": 8192,
                         "k": 8192, "route": "GPU0 → GPU0", "target_GBps": [100.0, 200.0, 400.0, 800.0, None, 50.0]})


def test_the_interference_fit_recovers_the_curve_it_was_made_from():
    rng = np.random.default_rng()
    a, b = rng.uniform(0.01, 0.3), rng.uniform(0.0, 0.1)
    fit = M.Interference.from_frame(_copies_frame(a, b, rng), "cublas")
    assert fit.a == pytest.approx(a, rel=1e-6) and fit.b == pytest.approx(b, rel=1e-6, abs=1e-9)
    assert fit.errors()["error"].abs().max() < 1e-9
    assert fit.budget == ((8192 / 3, 2400.0),) and fit.copy_budget(8192, 2048, 8192) == pytest.approx(2400.0)
    with pytest.raises(ValueError, match="copies: expected at least 3 copy points"):
        M.Interference.from_frame(_copies_frame(a, b, rng).head(2), "cublas")


def test_the_gemm_fit_recovers_the_gemm_it_was_made_from_and_counts_waves():
    rng = np.random.default_rng()
    shapes = [(8192, 8192, 8192), (8192, 1024, 8192), (8192, 8192, 256), (8192, 8192, 1024), (4096, 4096, 4096),
              (2048, 512, 64), (1024, 256, 8192), (1024, 1024, 8192), (8192, 256, 8192), (4096, 14336, 8192)]
    for planned in (False, True):
        made = M.GemmFit("x", rng.uniform(0.8e-8, 1.5e-8), rng.uniform(2e-6, 6e-6), rng.uniform(0.0, 0.01),
                         rng.uniform(0.0, 1e-5), rng.uniform(0.0, 5e-9), planned)
        fit = M.GemmFit.from_points("x", [(m, n, k, made.time_s(m, n, k)) for m, n, k in shapes], planned=planned)
        assert fit.errors()["error"].abs().max() < 0.01  # the epilogue's length is searched on a grid
        assert all(fit.rate_on(8192, 8192, 8192, g) <= 1 for g in range(1, 133))
    # 64 × 32 tiles of 128 × 256: 16 waves on 132 SMs, 18 on 116, 2048 on one
    assert M.waves(8192, 8192, 132) == 16 and M.waves(8192, 8192, 116) == 18 and M.waves(8192, 8192, 1) == 2048
    assert M.GemmFit("x", 1e-8, 3e-6, planned=True).rate_on(8192, 8192, 8192, 116) == pytest.approx(16 / 18)
    assert M.GemmFit("x", 1e-8, 3e-6).rate_on(8192, 8192, 8192, 116) == pytest.approx(116 / 132)  # balanced
    with pytest.raises(ValueError, match="sms: expected at least 1 SM"):
        fit.time_s(8192, 8192, 8192, 0)
    with pytest.raises(ValueError, match="points: expected more than 4"):
        M.GemmFit.from_points("x", [(1024, 8192, 1024, 1e-6)] * 4)


def test_pkit_gemms_fit_plans_again_on_fewer_sms():
    """On 132 SMs 1024 × 256 × 8192 is 16 narrow tiles, its K split; on fewer SMs pkit's GEMM picks another plan,
    and the fit counts that plan's waves and K per unit."""
    for sms in (132, 66, 8):
        how = gemm_plans.plan(1024, 256, 8192, sms)
        waves, per_unit, split = gemm_fit.work(1024, 256, 8192, sms, planned=True)
        assert waves == -(-how.units(1024, 256) // sms) and split == (how.splits > 1)
        assert per_unit == pytest.approx(-(-128 // how.splits) * 64 * (1.0 if how.block_n == 256 else
                                                                         gemm_plans.plan_rule().narrow_slice))
    assert gemm_plans.plan(1024, 256, 8192, 132) != gemm_plans.plan(1024, 256, 8192, 8)


def test_a_recorded_shape_takes_its_recorded_time_and_the_fit_is_within_5_percent():
    frame = results.load("overlap_gemm", "h200x1", root=ROOT / "results").frame
    for name in ("pkit_gemm", "cublas"):
        fit = M.GemmFit.from_frame(frame, name)
        row = frame[(frame["implementation"] == name) & (frame["m"] == 1024) & (frame["n"] == 1024)].iloc[0]
        recorded = float(row["time_median_us"]) * 1e-6
        assert fit.time_s(1024, 1024, 8192) == recorded != fit.fit_s(1024, 1024, 8192)
        assert fit.time_s(1024, 1024, 8192, 100) == pytest.approx(recorded / fit.rate_on(1024, 1024, 8192, 100))
        assert fit.time_s(1024, 1024, 4096) == fit.fit_s(1024, 1024, 4096)  # not recorded: the fit's
        errors = fit.errors()  # the fit's own error at every recorded point, not the recorded time's
        assert len(errors) == 26 and errors["error"].abs().median() <= 0.05, errors.to_string()
        assert errors["error"].abs().max() <= 0.15, errors.to_string()


def test_the_model_meets_the_one_gpu_measurements_within_5_percent():
    """Fitted: the GEMM study's shapes (within 5% at the median: a recorded shape takes its recorded time) and the
    copies beside the GEMM (every point); predicted with no parameter: pkit's GEMM on the SMs a schedule leaves it.
    cuBLAS's partition points are shown, not held to it: no schedule gives cuBLAS's SMs away."""
    load = lambda e: results.load(e, "h200x1", root=ROOT / "results").frame  # noqa: E731
    gemms, fits = M.calibrate(load("overlap_gemm"), load("interference_copies"), ("pkit_gemm", "cublas"))
    errors = M.calibration_errors(gemms, fits, load("interference_partition"))
    assert errors["fitted"].sum() > 3 * (2 + 5)  # more points than parameters in every fit
    times = errors[errors["part"] == "gemm time (us)"]
    assert (times.groupby("gemm")["error"].apply(lambda e: e.abs().median()) <= 0.05).all(), times.to_string()
    held = errors[(errors["part"] != "gemm time (us)") & (errors["fitted"] | (errors["gemm"] == M.gemm_of("sm_pull")))]
    assert held["error"].abs().max() <= 0.05, held.sort_values("error").to_string()
    assert M.gemm_of("sm_pull") == "pkit_gemm" and len(held[~held["fitted"]]) >= 4


@pytest.fixture(scope="module")
def two_gpu_link():
    return L.recorded_link("h200x2-nv18", root=ROOT / "results")


def test_serial_predictions_add_up_the_recorded_pieces(two_gpu_link):
    frame = results.load("overlap_gemm", "h200x1", root=ROOT / "results").frame
    check = M.serial_check(two_gpu_link, M.GemmFit.from_frame(frame, "cublas"), frame)
    assert len(check) >= 4 and (check["model_us"] > 0).all()
    assert check["error"].abs().max() < 1e-9, check  # recorded shapes: the model's GEMM is the recorded one


def test_schedules_stay_above_the_bound_and_those_taking_no_sms_beat_serial(two_gpu_link):
    frame = results.load("overlap_gemm", "h200x1", root=ROOT / "results").frame
    gemms = {g: M.GemmFit.from_frame(frame, g) for g in ("pkit_gemm", "cublas")}
    quiet = {g: M.Interference(0.05, 0.01) for g in gemms}
    for link in (two_gpu_link, L.modelled_link(two_gpu_link, 8)):
        curves = M.curves(link, gemms, quiet, inner=(1024, 4096))
        assert set(curves["pattern"]) == set(M.PATTERN_NAMES)
        for pattern in M.PATTERN_NAMES:
            assert set(curves.loc[curves["pattern"] == pattern, "schedule"]) == set(M.PATTERNS[pattern].names)
        assert (curves["fraction_of_bound"] <= 1.0 + 1e-9).all()
        serial = curves[curves["schedule"] == "serial"].set_index(["pattern", "inner"])["time_us"]
        gains = (curves["schedule"] == "ce_flags") | ((curves["schedule"] == "tma_pull") & (curves["inner"] <= 256))
        for row in curves[gains].itertuples():
            assert row.time_us < serial[(row.pattern, row.inner)], row  # one GEMM, no SMs taken: overlap only gains
        # ce_chunks runs a GEMM per chunk (more waves of tiles), tma_pull loads the rows again per 256 columns: they
        # may lose to serial
        # sm_pull gives the GEMM's SMs away: where the GEMM dominates it may lose to serial, never beat the bound
    eight = L.modelled_link(two_gpu_link, 8)
    assert not eight.measured and "datasheet" in eight.source and eight.gpus == 8
    with pytest.raises(ValueError, match="gpus: NCCL was measured at 2 GPUs"):
        two_gpu_link.nccl_s("all_gather", 1 << 20, 8)


@pytest.mark.gpu
def test_interference_points_on_the_gpu_are_checked_and_the_throttle_holds(monkeypatch):
    """A small run of both parts: every GEMM output and copy verified, a paced copy alone within 10% of its target,
    a GEMM beside nothing as fast as alone, SM copies on the SMs given up move bytes."""
    monkeypatch.setattr(I, "WINDOW_MS", 8.0)
    copies = I.copies(shapes=[(4096, 4096, 4096)], rates_GBps=(200.0, None), rounds=2)
    print(copies.round(3).to_string())
    assert copies["verified"].all() and len(copies) == 2 * (2 + len(I.HOST_ROUTES))
    held = I.throttle_check(copies)
    assert ((held["held_alone"] - 1).abs() <= 0.10).all(), held
    free = copies[copies["target_GBps"].isna() & ~copies["route"].str.contains("CPU")]
    assert (free["copy_alone_GBps"] > 1000).all() and (free["rate_ratio"] < 1.0).all()
    part = I.partition(shapes=[(4096, 4096, 4096)], sms_given=(16,), rounds=2)
    print(part.round(3).to_string())
    assert part["verified"].all() and set(part["copy"]) == {"idle", "sm", "tma"}
    pkit_rows = part[(part["gemm"] == "pkit_gemm") & (part["copy"] != "idle")]
    assert (pkit_rows["copy_beside_GBps"] > 50).all()
    assert (part["rate_ratio"] < 1.02).all()  # 116 SMs are not faster than 132


def test_fused_problems_project_through_the_model(two_gpu_link):
    frame = results.load("overlap_gemm", "h200x1", root=ROOT / "results").frame
    gemms = {g: M.GemmFit.from_frame(frame, g) for g in ("pkit_gemm", "cublas")}
    quiet = {g: M.Interference(0.05, 0.01) for g in gemms}
    links = [two_gpu_link, L.modelled_link(two_gpu_link, 8), L.modelled_link(two_gpu_link, 8, "B200")]
    fused = M.project_fused(links, gemms, quiet)
    assert set(fused["problem"]) == set(M.fused_problems()) and set(fused["gpus"]) == {2, 8}
    assert (fused["fraction_of_bound"] <= 1 + 1e-9).all()
    assert (fused.loc[fused["schedule"] == "serial", "speedup_vs_serial"] == 1).all()
    b200 = M.scaled_gemm(gemms["cublas"], "B200")
    assert b200.tflops(8192, 8192, 8192) > gemms["cublas"].tflops(8192, 8192, 8192) * 2  # 2250 vs 989 TFLOP/s dense
    with pytest.raises(ValueError, match="gpu: expected one of"):
        M.scaled_gemm(gemms["cublas"], "Z9000")
