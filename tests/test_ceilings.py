"""Measured ceilings and the communication-aware overlap roofline: arithmetic and argument checks on CPU, the
measurements themselves on GPUs (small sizes, checked against the datasheet)."""
import math

import pandas as pd
import pytest

import pkit
from pkit import hardware, roofline
from pkit.experiments import ceilings
from pkit.roofline import Ceilings, floor, overlap_efficiency


def ceil(**overrides) -> Ceilings:
    """1 PFLOP/s, 4 TB/s HBM, 400 GB/s link, α = 2 µs."""
    return Ceilings(**{"flops_per_s": 1e15, "hbm_bytes_per_s": 4e12, "link_bytes_per_s": 4e11, "origin": "test",
                       "sync_s": 2e-6, **overrides})


# ---- the roofline's arithmetic --------------------------------------------------------------------------------

def test_floor_adds_the_sync_steps_to_the_largest_term():
    f = floor({"flops": 1e12, "hbm_bytes": 8e9, "link_bytes": 4e9, "sync_steps": 3}, ceil())
    assert (f.compute_s, f.hbm_s, f.link_s, f.sync_s) == pytest.approx((1e-3, 2e-3, 1e-2, 6e-6))
    assert f.time_s == pytest.approx(1e-2 + 6e-6) and f.bound == "link"
    assert f.serial_s == pytest.approx(1e-3 + 1e-2 + 6e-6)  # T_c + T_l + α·steps: T_m is not added


def test_floor_without_sync_steps_or_alpha_is_the_old_floor():
    f = floor({"flops": 1e12, "hbm_bytes": 8e9, "link_bytes": 4e9}, ceil())
    assert f.sync_s == 0 and f.time_s == pytest.approx(1e-2)
    g = floor({"flops": 1e12, "hbm_bytes": 8e9, "link_bytes": 4e9, "sync_steps": 5}, Ceilings(1e15, 4e12, 4e11, "x"))
    assert g.sync_s == 0 and g.time_s == f.time_s


def test_sync_bounds_a_tiny_cost():
    f = floor({"flops": 1e6, "hbm_bytes": 1e3, "link_bytes": 1e3, "sync_steps": 2}, ceil())
    assert f.bound == "sync" and f.time_s == pytest.approx(4e-6 + 1e3 / 4e11)


def test_floor_uses_the_dtype_rate():
    c = Ceilings.datasheet("H200")
    cost = {"flops": 2 * 4096**3, "hbm_bytes": 0, "link_bytes": 0}
    h200 = hardware.GPUS["H200"]
    for dtype, alias, tflops in (("bfloat16", "bf16", h200.bf16_dense_tflops), ("float16", "fp16", 989.4),
                                 ("tfloat32", "tf32", 494.7), ("float32", "fp32", 66.9)):
        assert floor(cost, c, dtype).compute_s == pytest.approx(cost["flops"] / (tflops * 1e12))
        assert floor(cost, c, alias).compute_s == floor(cost, c, dtype).compute_s
    assert floor(cost, c).compute_s == floor(cost, c, "bfloat16").compute_s
    assert floor(cost, c, "torch.float32").compute_s == floor(cost, c, "float32").compute_s
    assert c.sync_s == 0 and "H200 datasheet" in c.origin


def test_positional_ceilings_keep_working_and_rate_bf16():
    c = Ceilings(1e15, 4e12, 4e11, "test")
    assert c.flops_rate() == c.flops_rate("bfloat16") == 1e15 and c.sync_s == 0
    with pytest.raises(ValueError, match=r"dtype: these ceilings \(test\) have rates for \['bfloat16'\], got 'fp32'"):
        c.flops_rate("fp32")


@pytest.mark.parametrize("kwargs, message", [
    ({"flops_per_s": 0}, "flops_per_s: expected a positive rate, got 0"),
    ({"hbm_bytes_per_s": -1.0}, "hbm_bytes_per_s: expected a positive rate"),
    ({"link_bytes_per_s": math.nan}, "link_bytes_per_s: expected a positive rate"),
    ({"sync_s": -1e-6}, r"sync_s: expected a latency >= 0 seconds, got -1e-06"),
    ({"flops_per_s_by_dtype": {"float32": 0.0}}, "flops_per_s_by_dtype: expected positive rates"),
    ({"flops_per_s_by_dtype": {"int8": 1.0}}, r"dtype: expected one of \['bfloat16'"),
])
def test_ceilings_reject_bad_values(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ceil(**kwargs)


def test_floor_and_dtype_argument_errors():
    with pytest.raises(ValueError, match="missing"):
        floor({"flops": 1}, ceil())
    with pytest.raises(ValueError, match="cost: expected non-negative values"):
        floor({"flops": 1, "hbm_bytes": 0, "link_bytes": 0, "sync_steps": -1}, ceil())
    with pytest.raises(ValueError, match=r"dtype: expected one of \['bfloat16', 'float16', 'tfloat32', 'float32'\]"):
        floor({"flops": 1, "hbm_bytes": 0, "link_bytes": 0}, Ceilings.datasheet(), "int8")
    with pytest.raises(ValueError, match="gpu: expected one of"):
        Ceilings.datasheet("V100")


def test_overlap_efficiency():
    assert overlap_efficiency(1.0, 2.0, 1.0) == 1.0       # at the bound
    assert overlap_efficiency(2.0, 2.0, 1.0) == 0.0       # no better than serial
    assert overlap_efficiency(2.5, 2.0, 1.0) == -0.5      # slower than serial
    assert overlap_efficiency(1.25, 2.0, 1.0) == 0.75
    assert math.isnan(overlap_efficiency(1.0, 1.0, 1.0))  # nothing to overlap
    with pytest.raises(ValueError, match="time_s: expected a positive, finite time, got 0"):
        overlap_efficiency(0, 2.0, 1.0)
    with pytest.raises(ValueError, match="bound_s: expected a positive, finite time"):
        overlap_efficiency(1.0, 2.0, math.inf)
    with pytest.raises(ValueError, match=r"serial_s: expected a time >= bound_s \(2.0\), got 1.0"):
        overlap_efficiency(1.0, 1.0, 2.0)


# ---- tensor-parallel patterns, against formulas derived by hand -----------------------------------------------

@pytest.mark.parametrize("n_gpus", [1, 2, 3, 4])
def test_pattern_costs_match_hand_formulas(n_gpus):
    m, k, n, e = 12, 24, 5, 2  # tokens, reduction dim, output columns (N_local for AG), bytes per element
    ag = roofline.ag_gemm_cost(m, k, n, n_gpus)
    assert ag == {"flops": 2 * m * k * n, "hbm_bytes": e * (m * k / n_gpus + k * n + m * n),  # own slice of A
                  "link_bytes": pytest.approx((n_gpus - 1) * m * k * e / n_gpus), "sync_steps": 1}
    sent = (n_gpus - 1) * m * n / n_gpus  # partial sums sent to their owners, as many added from peers
    rs = roofline.gemm_rs_cost(m, k, n, n_gpus)
    assert rs == {"flops": pytest.approx(2 * m * (k / n_gpus) * n + sent),
                  "hbm_bytes": pytest.approx(e * (m * k / n_gpus + k / n_gpus * n + m * n / n_gpus)),  # own output
                  "link_bytes": pytest.approx(sent * e), "sync_steps": 1}
    ar = roofline.gemm_ar_cost(m, k, n, n_gpus)
    assert ar == {**rs, "hbm_bytes": pytest.approx(e * (m * k / n_gpus + k / n_gpus * n + m * n)),  # the whole sum
                  "link_bytes": pytest.approx(2 * sent * e), "sync_steps": 2}
    with pytest.raises(ValueError, match=r"m: expected a multiple of n_gpus \(5\), got 12"):
        roofline.gemm_rs_cost(m, k, n, 5)
    assert roofline.gemm_rs_cost(m, k, n, n_gpus, itemsize=4)["link_bytes"] == pytest.approx(2 * rs["link_bytes"])


def test_one_gemm_costs_its_flops_and_one_pass_over_its_operands():
    m, k, n = 12, 24, 5
    assert roofline.gemm_cost(m, k, n) == {"flops": 2 * m * k * n, "hbm_bytes": 2 * (m * k + k * n + m * n),
                                           "link_bytes": 0, "sync_steps": 0}
    assert roofline.gemm_cost(m, k, n, itemsize=1)["hbm_bytes"] == m * k + k * n + 2 * m * n  # FP8 in, bf16 out
    c = ceil()
    short = floor(roofline.gemm_cost(8192, 64, 8192), c)  # K = 64: C's writes outweigh the FLOPs
    assert short.bound == "hbm" and floor(roofline.gemm_cost(8192, 8192, 8192), c).bound == "compute"
    with pytest.raises(ValueError, match="out_itemsize: expected a positive integer, got 0"):
        roofline.gemm_cost(m, k, n, out_itemsize=0)


def test_the_gemm_gate_says_what_share_of_each_shapes_roofline_each_gemm_reaches():
    """Made-up rates on two shapes: the long-K one at the compute ceiling's share, the short-K one against the
    HBM time of its output; a dtype the ceilings have no rate for (FP8 on a datasheet) gets no roofline."""
    from pkit.experiments.overlap import gemm_ceilings, gemm_gate

    shapes = [(8192, 8192, 8192), (8192, 8192, 64)]
    rows = pd.DataFrame([{"implementation": impl, "dtype": "bfloat16", "m": m, "n": n, "k": k, "tflops": rate,
                          "verified": True, "ratio_to_cublas": rate / 500.0}
                         for m, n, k in shapes for impl, rate in (("pkit_gemm", 400.0), ("cublas", 500.0))])
    c = gemm_ceilings({"gpus": ["NVIDIA H100 80GB HBM3"]})
    gate = gemm_gate(rows, ceilings=c)
    assert list(gate["bound"]) == ["compute", "hbm"]
    assert gate["pkit_of_roofline"].iloc[0] == pytest.approx(400e12 / c.flops_per_s)
    hbm_s = floor(roofline.gemm_cost(8192, 64, 8192), c).hbm_s
    assert gate["cublas_of_roofline"].iloc[1] == pytest.approx(500e12 * hbm_s / (2 * 8192 * 8192 * 64))
    fp8 = gemm_gate(rows.assign(dtype="float8_e4m3fn"), ceilings=c)
    assert fp8["roofline_tflops"].isna().all() and fp8["bound"].isna().all()
    assert gemm_ceilings({"gpus": ["NVIDIA L4"]}).origin.startswith("H200 datasheet")


def test_ag_gemm_on_two_gpus_turns_from_link_to_compute_bound():
    """T_l/T_c = link bytes/rate over FLOPs/rate: (M·K)/(2·M·K·N_local) × rate ratio, so the balanced N_local is
    flops_rate / (2 · link_rate) on 2 GPUs; the serial time is twice the bound there (plus α)."""
    c = ceil()
    balanced = int(c.flops_per_s / (2 * c.link_bytes_per_s))
    narrow = floor(roofline.ag_gemm_cost(8192, 8192, balanced // 4, 2), c)
    wide = floor(roofline.ag_gemm_cost(8192, 8192, balanced * 4, 2), c)
    even = floor(roofline.ag_gemm_cost(8192, 8192, balanced, 2), c)
    assert narrow.bound == "link" and wide.bound == "compute"
    assert even.compute_s == pytest.approx(even.link_s)
    assert even.serial_s - c.sync_s == pytest.approx(2 * (even.time_s - c.sync_s))


@pytest.mark.parametrize("call, message", [
    (lambda: roofline.ag_gemm_cost(0, 8, 8, 2), "m: expected a positive integer, got 0"),
    (lambda: roofline.ag_gemm_cost(9, 8, 8, 2), r"m: expected a multiple of n_gpus \(2\), got 9"),
    (lambda: roofline.ag_gemm_cost(8, 8, 8.0, 2), r"n_local: expected a positive integer, got 8.0"),
    (lambda: roofline.gemm_rs_cost(8, 8, 8, 0), "n_gpus: expected a positive integer, got 0"),
    (lambda: roofline.gemm_ar_cost(8, -8, 8, 2), "k: expected a positive integer, got -8"),
    (lambda: roofline.gemm_rs_cost(8, 8, 8, 2, itemsize=True), "itemsize: expected a positive integer, got True"),
])
def test_pattern_cost_argument_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# ---- ceilings from a measured frame ---------------------------------------------------------------------------

def measured_frame() -> pd.DataFrame:
    units = {name: unit for name, (unit, _) in roofline.MEASURED.items()}
    rows = [("gemm", "bfloat16", 700.0, True), ("gemm", "bfloat16", 780.0, True), ("gemm", "bfloat16", 990.0, False),
            ("gemm", "float32", 50.0, True), ("gemm", "tfloat32", 400.0, True),
            ("hbm", None, 4100.0, True), ("hbm", None, 4200.0, True),
            ("link", None, 395.0, True), ("link", None, 370.0, True), ("sync", None, 0.9, True)]
    return pd.DataFrame([{"ceiling": c, "dtype": d, "value": v, "unit": units[c], "verified": ok}
                         for c, d, v, ok in rows])


def test_measured_ceilings_take_the_best_verified_rows():
    c = Ceilings.measured(measured_frame(), {"machine": "h200x2-nv18", "pkit_commit": "abc123"})
    assert c.flops_per_s == pytest.approx(780e12)  # the unverified 990 is left out
    assert c.flops_per_s_by_dtype == pytest.approx({"bfloat16": 780e12, "float32": 50e12, "tfloat32": 400e12})
    assert c.hbm_bytes_per_s == pytest.approx(4.2e12) and c.link_bytes_per_s == pytest.approx(395e9)
    assert c.sync_s == pytest.approx(0.9e-6)
    assert c.origin == "measured on h200x2-nv18 at abc123"
    assert Ceilings.measured(measured_frame()).origin == "measured"
    f = floor({"flops": 1e12, "hbm_bytes": 0, "link_bytes": 0, "sync_steps": 1}, c, "float32")
    assert f.time_s == pytest.approx(1e12 / 50e12 + 0.9e-6)
    with pytest.raises(ValueError, match=r"dtype: these ceilings \(measured on h200x2-nv18 at abc123\) have rates"):
        floor({"flops": 1, "hbm_bytes": 0, "link_bytes": 0}, c, "float16")


def test_measured_ceilings_survive_a_csv_round_trip(tmp_path):
    measured_frame().to_csv(tmp_path / "c.csv", index=False)
    c = Ceilings.measured(pd.read_csv(tmp_path / "c.csv"))
    assert c.flops_per_s == pytest.approx(780e12) and c.sync_s == pytest.approx(0.9e-6)


def test_measured_ceilings_name_what_is_missing():
    frame = measured_frame()
    with pytest.raises(ValueError, match=r"frame: expected columns ceiling, dtype, value, unit; missing \['unit'\]"):
        Ceilings.measured(frame.drop(columns="unit"))
    with pytest.raises(ValueError, match=r"frame: expected verified rows for ceilings .*; none for \['sync'\]"):
        Ceilings.measured(frame[frame["ceiling"] != "sync"])
    with pytest.raises(ValueError, match=r"frame: expected unit 'us' for ceiling 'sync', got \['ms'\]"):
        Ceilings.measured(frame.assign(unit=frame["unit"].where(frame["ceiling"] != "sync", "ms")))
    with pytest.raises(ValueError, match=r"frame: expected gemm rows for bfloat16 .*got \['float32', 'tfloat32'\]"):
        Ceilings.measured(frame[frame["dtype"] != "bfloat16"])


def test_measure_builds_the_frame_the_roofline_reads(monkeypatch):
    """measure's tidy frame, from stand-ins for the four GPU measurements, gives Ceilings.measured its rows."""
    def times(us):
        return {"time_median_us": us, "time_min_us": us, "time_max_us": us, "cv": 0.01, "verified": True}

    monkeypatch.setattr(ceilings, "gemm_rates", lambda dtypes, sizes, device: pd.DataFrame(
        [{"dtype": d, "size": n, "device": device, "rate_TFLOPps": 700.0 + n / 1024, **times(100.0)}
         for d in dtypes for n in sizes]))
    monkeypatch.setattr(ceilings, "hbm_copy_rate", lambda nbytes, device: pd.DataFrame(
        [{"mechanism": m, "device": device, "bytes": nbytes, "read_write_GBps": 4000.0, **times(500.0)}
         for m in ("ce", "sm_push")]))
    monkeypatch.setattr(ceilings, "link_rates", lambda nbytes, src, dst: pd.DataFrame(
        [{"mechanism": "ce", "src": src, "dst": dst, "bytes": nbytes, "bandwidth_GBps": 390.0, **times(700.0)}]))
    monkeypatch.setattr(ceilings, "sync_latency", lambda devices, steps: pd.DataFrame(
        [{"devices": ",".join(map(str, devices)), "steps": steps, "step_us": 1.5, **times(1500.0)}]))
    frame = ceilings.measure(devices=(0, 1), dtypes=("bfloat16",), sizes=(1024, 2048))
    assert list(frame.columns) == list(ceilings.COLUMNS) and len(frame) == 2 + 2 + 1 + 1
    assert list(frame["method"]) == ["cublas", "cublas", "ce", "sm_push", "ce", "team_barriers"]
    assert list(frame["devices"]) == ["0", "0", "0", "0", "0,1", "0,1"]
    c = Ceilings.measured(frame, {"machine": "m", "pkit_commit": "c"})
    assert c.flops_per_s == pytest.approx(702e12) and c.link_bytes_per_s == pytest.approx(390e9)
    assert c.hbm_bytes_per_s == pytest.approx(4e12) and c.sync_s == pytest.approx(1.5e-6)
    one = ceilings.measure(devices=(0,), dtypes=("bfloat16",), sizes=(1024,))
    assert set(one["ceiling"]) == {"gemm", "hbm"}
    four = ceilings.measure(devices=(2, 0, 1, 3), dtypes=("bfloat16",), sizes=(1024,))  # the link: the first two
    assert list(four["devices"]) == ["2", "2", "2", "2,0", "2,0,1,3"]  # GPUs; the sync step: all of them


# ---- argument checks of the measurements (no GPU touched) ------------------------------------------------------

@pytest.mark.parametrize("call, message", [
    (lambda: ceilings.gemm_rates(dtypes=("int8",)), r"dtypes: expected names from \('bfloat16'.*got \['int8'\]"),
    (lambda: ceilings.gemm_rates(dtypes=()), r"dtypes: expected names from .*got \[\]"),
    (lambda: ceilings.gemm_rates(sizes=(0,)), r"sizes: expected positive integers, got \[0\]"),
    (lambda: ceilings.hbm_copy_rate(nbytes=100), "nbytes: expected a positive multiple of 16 bytes, got 100"),
    (lambda: ceilings.hbm_copy_rate(mechanisms=("dma",)), r"mechanisms: expected names from \('ce', 'sm_push'"),
    (lambda: ceilings.link_rates(nbytes=0), r"nbytes: expected positive multiples of 16 bytes, got \[0\]"),
    (lambda: ceilings.link_rates(src=1, dst=1), "src, dst: expected two different GPUs, got 1 and 1"),
    (lambda: ceilings.link_rates(mechanisms=()), r"mechanisms: expected names from .*got \[\]"),
    (lambda: ceilings.sync_latency(steps=0), r"steps: expected positive integers, got \[0\]"),
    (lambda: ceilings.measure(devices=(0, 0)), r"devices: expected distinct GPU ids, got \[0, 0\]"),
])
def test_measurement_argument_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_the_sync_step_needs_two_distinct_gpus():
    with pytest.raises(pkit.PkitError, match=r"devices: expected at least 2 distinct GPUs \(one rank per GPU\), "
                                             r"got \[0, 0\]; run on a machine with 2 or more GPUs"):
        ceilings.sync_latency(devices=(0, 0))


def test_tf32_setting_is_restored():
    torch = pytest.importorskip("torch")
    saved = torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        with pytest.raises(RuntimeError), ceilings._tf32(True):
            assert torch.backends.cuda.matmul.allow_tf32
            raise RuntimeError
        assert torch.backends.cuda.matmul.allow_tf32 is False
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved


def test_barrier_kernel_builds_with_timed_waits(cache_dir):
    """The sync kernel compiles for Hopper and carries the wait globals, so a missing peer traps, not hangs."""
    kernel = pkit.compile("team_barrier.cu", "team_barriers", arch="sm_90a")
    assert kernel.module.has_wait_globals


# ---- the measurements, on GPUs ---------------------------------------------------------------------------------

def datasheet():
    """The datasheet entry of GPU 0, or None when pkit.hardware has none for it."""
    name = pkit.devices()[0].name
    return next((g for key, g in hardware.GPUS.items() if key in name), None)


# H100/H200 datasheets quote tensor rates at 1830 MHz, below the 1980 MHz highest boost clock, so a measured
# rate may pass them by at most that ratio; anything more is a timing error.
BOOST = 1980 / 1830

TIME_COLUMNS = {"time_median_us", "time_min_us", "time_max_us", "cv", "verified"}


@pytest.mark.gpu
def test_gemm_rates_are_verified_and_below_the_datasheet():
    torch = pytest.importorskip("torch")
    saved = torch.backends.cuda.matmul.allow_tf32
    frame = ceilings.gemm_rates(sizes=(1024, 4096), reps=5, warmup=2)  # 4096: GPU-bound, not launch-bound
    assert torch.backends.cuda.matmul.allow_tf32 == saved
    assert set(frame.columns) >= {"dtype", "size", "flops", "rate_TFLOPps", "relative_error",
                                  "rotations"} | TIME_COLUMNS
    assert len(frame) == 8 and frame["verified"].all() and (frame["rate_TFLOPps"] > 0).all()
    assert (frame["relative_error"] <= frame["dtype"].map(ceilings.GEMM_TOLERANCE)).all()
    big = frame[frame["size"] == 4096].set_index("dtype")["rate_TFLOPps"]
    assert big["float32"] < big["tfloat32"] < big["bfloat16"]  # TF32 really on for tfloat32, off for float32
    gpu = datasheet()
    if gpu is not None:
        limit = frame["dtype"].map(gpu.dense_tflops) * BOOST
        assert (frame["rate_TFLOPps"] <= limit).all(), frame[["dtype", "size", "rate_TFLOPps"]]


@pytest.mark.gpu
def test_hbm_copy_rate_counts_reads_and_writes():
    frame = ceilings.hbm_copy_rate(nbytes=256 << 20, reps=5)
    assert list(frame["mechanism"]) == list(ceilings.LINK_MECHANISMS) and frame["verified"].all()
    assert set(frame.columns) >= {"bytes", "copy_bandwidth_GBps", "read_write_GBps", "rotations"} | TIME_COLUMNS
    assert (frame["read_write_GBps"] == 2 * frame["copy_bandwidth_GBps"]).all() and (frame["read_write_GBps"] > 0).all()
    gpu = datasheet()
    if gpu is not None:
        assert (frame["read_write_GBps"] <= gpu.hbm_tbps * 1e3).all(), frame


@pytest.mark.multigpu
def test_link_rates_stay_below_one_direction_of_nvlink():
    frame = ceilings.link_rates(nbytes=64 << 20, reps=5)
    assert list(frame["mechanism"]) == list(ceilings.LINK_MECHANISMS) and frame["verified"].all()
    assert set(frame.columns) >= {"src", "dst", "bytes", "bandwidth_GBps"} | TIME_COLUMNS
    assert (frame["bandwidth_GBps"] > 0).all()
    gpu = datasheet()
    if gpu is not None:
        assert (frame["bandwidth_GBps"] <= gpu.nvlink_gbps_per_direction).all(), frame


@pytest.mark.multigpu
def test_sync_latency_is_a_few_microseconds():
    frame = ceilings.sync_latency(steps=200, reps=5)
    row = frame.iloc[0]
    every_gpu = ",".join(str(g.index) for g in pkit.devices())  # the default: every GPU of the machine
    assert row["verified"] and row["steps"] == 200 and row["devices"] == every_gpu
    assert row["step_us"] == pytest.approx(row["time_median_us"] / 200)
    assert 0 < row["step_us"] < 50  # one flag round over NVLink; tens of µs would mean a broken barrier


@pytest.mark.multigpu
def test_measure_gives_ceilings_for_the_roofline():
    frame = ceilings.measure(dtypes=("bfloat16", "float32"), sizes=(1024,), hbm_bytes=64 << 20,
                             link_bytes=64 << 20, sync_steps=100)
    assert list(frame.columns) == list(ceilings.COLUMNS) and frame["verified"].all() and (frame["value"] > 0).all()
    c = Ceilings.measured(frame, pkit.results.provenance())
    assert set(c.flops_per_s_by_dtype) == {"bfloat16", "float32"} and c.sync_s > 0
    assert c.origin.startswith("measured on ")
    f = floor(roofline.ag_gemm_cost(1024, 1024, 1024, 2), c)
    assert f.serial_s > f.time_s > 0
