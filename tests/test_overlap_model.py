"""The overlap model per pattern: each pattern's own schedules from the registry, each described by its structure,
undescribable ones refused, the bus factor from CollectiveOp, the bound from recorded ceilings."""
import dataclasses

import pytest

from pkit import results
from pkit.experiments.overlap import model as M
from pkit.experiments.overlap import links as L
from pkit.ops import collective_ops
from pkit.ops.overlap_patterns import PATTERNS, Schedule

ROOT = results.REPO_ROOT


@pytest.fixture(scope="module")
def fits():
    frame = results.load("overlap_gemm", "h200x1", root=ROOT / "results").frame
    gemms = {g: M.GemmFit.from_frame(frame, g) for g in ("pkit_gemm", "cublas")}
    return gemms, {g: M.Interference(0.05, 0.01) for g in gemms}


@pytest.fixture(scope="module")
def two():
    return L.recorded_link("h200x2-nv18", root=ROOT / "results")


def test_each_pattern_is_modelled_with_its_own_schedules(two, fits):
    frame = M.curves(two, *fits, inner=(256, 4096))
    for pattern in M.PATTERN_NAMES:
        assert tuple(frame.loc[frame["pattern"] == pattern, "schedule"].unique()) == PATTERNS[pattern].names
    for pattern in ("gemm_rs", "gemm_ar"):
        assert "tma_add" in set(frame.loc[frame["pattern"] == pattern, "schedule"])
        if "ce_chunks" not in PATTERNS[pattern].names:
            assert "ce_chunks" not in set(frame.loc[frame["pattern"] == pattern, "schedule"])
            with pytest.raises(ValueError, match="schedule: expected one of"):
                M.predict(pattern, "ce_chunks", 8192, 2048, 8192, two, *(f["cublas"] for f in fits))


def test_an_undescribable_schedule_is_refused_not_drawn(monkeypatch, two, fits):
    bare = Schedule("mystery", "moves bytes somehow", "cublas", "ce")
    entry = PATTERNS["ag_gemm"]
    monkeypatch.setitem(PATTERNS, "ag_gemm", dataclasses.replace(entry, schedules=entry.schedules + (bare,)))
    with pytest.raises(ValueError, match="schedule: expected one whose registry entry describes its structure"):
        M.predict("ag_gemm", "mystery", 8192, 8192, 1024, two, fits[0]["cublas"], fits[1]["cublas"])
    with pytest.raises(ValueError, match="got 'mystery' of ag_gemm"):
        M.curves(two, *fits, inner=(1024,))
    odd = dataclasses.replace(entry.schedule("ce_flags"), name="by_carrier", transfer="pigeon")
    monkeypatch.setitem(PATTERNS, "ag_gemm", dataclasses.replace(entry, schedules=(entry.schedules[0], odd)))
    with pytest.raises(ValueError, match="moves them by 'pigeon'"):
        M.schedules_of("ag_gemm")


def test_the_bus_factor_is_collective_ops(monkeypatch):
    for gpus in (2, 4, 8):
        for pattern in M.PATTERN_NAMES:
            op = PATTERNS[pattern].nccl_op
            total = M.collective_bytes(pattern, 8192, 1024 * gpus, 8192)
            assert M.link_bytes(pattern, "serial", 8192, 1024 * gpus, 8192, gpus) == pytest.approx(
                collective_ops.COLLECTIVES[op].bus_factor(gpus) * total)
    doubled = dataclasses.replace(collective_ops.COLLECTIVES["all_gather"], bus_factor=lambda n: 2.0 * (n - 1) / n)
    monkeypatch.setitem(collective_ops.COLLECTIVES, "all_gather", doubled)
    assert M.link_bytes("ag_gemm", "ce_flags", 8192, 8192, 1024, 2) == 8192 * 8192 * 2  # 2 · 1/2 of S: the registry's
    slow = L.emulated_link(L.recorded_link("h200x2-nv18", root=ROOT / "results"), 2, 100.0, "test")
    assert slow.nccl_s("all_gather", 1e9, 2) == pytest.approx(1e9 / 100e9)


def test_structures_set_bytes_and_pieces(two, fits):
    gemms, quiet = fits
    # tma_pull loads the peers' rows again for every 256 columns; tma_add sends each tile to every other owner
    assert M.link_bytes("ag_gemm", "tma_pull", 8192, 8192, 1024, 2) == 4 * M.link_bytes("ag_gemm", "ce_flags", 8192,
                                                                                         8192, 1024, 2)
    rs = M.link_bytes("gemm_rs", "tma_add", 8192, 2048, 8192, 8)
    ar = M.link_bytes("gemm_ar", "tma_add", 8192, 2048, 8192, 8)
    assert ar == pytest.approx(8 * rs)
    one = M.predict("ag_gemm", "ce_flags", 8192, 8192, 256, two, gemms["pkit_gemm"], quiet["pkit_gemm"])
    chunked = M.predict("ag_gemm", "ce_chunks", 8192, 8192, 256, two, gemms["pkit_gemm"], quiet["pkit_gemm"])
    assert chunked["slowdown"] > 2 * one["slowdown"]  # eight 1024-row GEMMs of one wave each against one GEMM
    taken = M.predict("ag_gemm", "sm_pull", 8192, 8192, 16384, two, gemms["pkit_gemm"], quiet["pkit_gemm"])
    assert taken["comm_sms"] == 16 and taken["slowdown"] > one["slowdown"]


def test_the_bound_uses_recorded_ceilings_and_says_so(two, fits):
    measured = M.recorded_ceilings(two, "h200x1", root=ROOT / "results")
    sheet = M.bound_ceilings(two)
    assert measured.flops_per_s < sheet.flops_per_s and measured.hbm_bytes_per_s < sheet.hbm_bytes_per_s
    assert "results/h200x1/overlap_gemm" in measured.origin and "hierarchy_matrix" in measured.origin
    assert "datasheet" in sheet.origin and "mechanisms_size_sweep" in measured.origin
    assert measured.link_bytes_per_s == pytest.approx(two.ce_GBps * 1e9)
    eight = L.modelled_link(two, 8)
    assert "datasheet" in M.bound_ceilings(eight).origin and eight.ceiling_GBps == 450.0
    frame = M.curves(two, *fits, inner=(1024,), ceilings=measured)
    assert (frame["fraction_of_bound"] <= 1 + 1e-9).all() and frame["bound_origin"].iloc[0] == measured.origin
    sheet_fraction = M.curves(two, *fits, inner=(1024,))["fraction_of_bound"]
    # measured ceilings are lower than the datasheet's: no schedule's fraction falls, those bound by them rise
    assert (frame["fraction_of_bound"] >= sheet_fraction - 1e-12).all()
    assert (frame["fraction_of_bound"] > sheet_fraction).any()
