"""Problems in their field's dtype, and the harness's roofline in that dtype, on CPU.

Every problem names its default dtype (META["dtypes"][0], what `pkit eval` runs without --dtype) and the reason
for it; the roofline divides a problem's FLOPs by its dtype's rate, adds α per declared sync step, and is
reported under the datasheet and under measured ceilings (results/<machine>/ceilings.csv, here hand-built in a
temporary PKIT_RESULTS). Output dtypes and tolerances of the references under gloo: tests/test_problems.py.
"""
from __future__ import annotations

import json
import math

import pandas as pd
import pytest

from pkit import roofline
from pkit.harness import problems as hp
from pkit.harness import runner
from pkit.hardware import GPUS
from pkit.problem_kit import cost as make_cost

PROBLEMS = {p.name: p for p in hp.discover()}
H200 = GPUS["H200"]
ALPHA_US = 5.0  # the sync step of the hand-built ceilings


def meta(name):
    from pkit.harness.problem import load_module

    return load_module(PROBLEMS[name].reference_path, f"pkit_test_dtypes_{name}").META


# ---- the dtype each problem runs in, and why ---------------------------------------------------------------------

@pytest.mark.parametrize("name", PROBLEMS)
def test_every_problem_declares_its_default_dtype_with_a_one_line_reason(name):
    m, p = meta(name), PROBLEMS[name]
    reason = m.get("dtype_reason")
    assert isinstance(reason, str) and "\n" not in reason and 20 < len(reason) <= 200, reason
    assert reason.startswith(f"{m['dtypes'][0]}: "), f"the reason names the default dtype first: {reason!r}"
    assert runner.problem_dtype(p, None) == m["dtypes"][0] == p.dtypes[0]


def test_bf16_is_the_default_where_the_field_runs_bf16():
    """Collectives, tensor-parallel GEMMs, sequence/context parallelism: bf16. Any other default names a
    reason the math needs it (a loss, a norm, optimizer state, keys that must order exactly)."""
    defaults = {name: p.dtypes[0] for name, p in PROBLEMS.items()}
    for name, p in PROBLEMS.items():
        if p.category in ("collectives", "fused", "sequence"):
            assert defaults[name] == "bfloat16", name
        if defaults[name] != "bfloat16":
            assert any(w in meta(name)["dtype_reason"] for w in ("loss", "norm", "optimizer", "keys", "exact")), name
    assert sum(d == "bfloat16" for d in defaults.values()) >= 18, defaults


# ---- FLOPs at the dtype's rate -------------------------------------------------------------------------------------

def test_flops_dtype_maps_problem_dtypes_to_roofline_rates():
    assert [hp.flops_dtype(d) for d in ("bfloat16", "bf16", "float16", "float32", "int64")] == [
        "bfloat16", "bfloat16", "float16", "float32", None]
    keys = make_cost(hbm_bytes=8000, link_bytes=8, sync_steps=1)
    assert hp.roofline_floor(keys, "int64", roofline.Ceilings.datasheet()).bound == "hbm"
    with pytest.raises(ValueError, match="int64"):
        hp.roofline_floor(dict(keys, flops=10), "int64", roofline.Ceilings.datasheet())


def test_a_float32_gemm_problem_is_bounded_by_the_float32_rate_and_bf16_by_the_tensor_rate():
    """05 (all-gather + GEMM) at the large size is compute-bound in both dtypes; in float32 (no tensor cores:
    PyTorch runs float32 matmuls without TF32) its floor is 989.4/66.9 ≈ 14.8x the bf16 one."""
    p = PROBLEMS["05_allgather_gemm"]
    flops = p.cost(2, "large", "bfloat16")["flops"]
    assert flops == p.cost(2, "large", "float32")["flops"]
    table = hp.cost_table([p], 2, "float32", ["large"]).iloc[0]
    bf16 = hp.cost_table([p], 2, "bfloat16", ["large"]).iloc[0]
    assert table["bound"] == bf16["bound"] == "compute"
    assert table["roofline_time_ms"] == pytest.approx(flops / (H200.fp32_tflops * 1e12) * 1e3)
    assert bf16["roofline_time_ms"] == pytest.approx(flops / (H200.bf16_dense_tflops * 1e12) * 1e3)
    assert table["roofline_time_ms"] / bf16["roofline_time_ms"] == pytest.approx(989.4 / 66.9)
    # the harness's records use the same floor
    for dtype, row in (("float32", table), ("bfloat16", bf16)):
        ms, bound = runner.roofline_ms(p, 2, "large", dtype, "H200")
        assert (ms, bound) == (pytest.approx(row["roofline_time_ms"]), "compute")


def test_the_float32_knn_problem_uses_the_float32_rate():
    p = PROBLEMS["24_distributed_knn"]
    cost = p.cost(2, "large", "float32")
    ms, bound = runner.roofline_ms(p, 2, "large", "float32", "H200")
    assert bound == "compute" and ms == pytest.approx(cost["flops"] / (H200.fp32_tflops * 1e12) * 1e3)


def test_an_hbm_bound_problem_does_not_change_its_bound_with_the_rate():
    """08 (RMSNorm) moves twice the bytes in float32 and stays HBM-bound: the dtype changes its floor through
    the bytes, not the FLOP rate."""
    p = PROBLEMS["08_tp_rmsnorm"]
    f32, bf16 = (hp.cost_table([p], 2, d, ["large"]).iloc[0] for d in ("float32", "bfloat16"))
    assert f32["bound"] == bf16["bound"] == "hbm"
    assert f32["roofline_time_ms"] == pytest.approx(2 * bf16["roofline_time_ms"], rel=1e-3)


# ---- sync steps and measured ceilings ------------------------------------------------------------------------------

def test_every_cost_declares_its_sync_steps():
    steps = {name: p.cost(2, "large", p.dtypes[0])["sync_steps"] for name, p in PROBLEMS.items()}
    assert all(isinstance(s, int) and s >= 1 for s in steps.values()), steps
    # the conventions of docs/problems.md: an all-reduce counted at reduce-scatter + all-gather bytes is 2
    # rounds (as pkit.roofline.gemm_ar_cost), a single gather/scatter/all-to-all round 1
    assert steps["01_all_reduce"] == steps["07_gemm_all_reduce"] == roofline.gemm_ar_cost(4, 6, 2, 2)["sync_steps"]
    assert steps["05_allgather_gemm"] == roofline.ag_gemm_cost(4, 3, 2, 2)["sync_steps"] == 1
    assert steps["06_gemm_reduce_scatter"] == roofline.gemm_rs_cost(4, 6, 2, 2)["sync_steps"] == 1
    assert steps["04_all_to_all"] == steps["02_all_gather_uneven"] == 1
    assert steps["22_distributed_sample_sort"] == 3


def test_cost_records_check_sync_steps():
    assert make_cost(flops=1, hbm_bytes=2, link_bytes=3)["sync_steps"] == 0
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="sync_steps"):
            make_cost(sync_steps=bad)


def ceilings_frame(gemm=None, alpha_us=ALPHA_US):
    """A frame shaped like pkit.experiments.ceilings.measure's (the columns Ceilings.measured reads)."""
    units = {name: unit for name, (unit, _) in roofline.MEASURED.items()}
    gemm = gemm or {"bfloat16": 780.0, "float16": 760.0, "tfloat32": 400.0, "float32": 51.0}
    rows = [("gemm", d, v) for d, v in gemm.items()]
    rows += [("hbm", None, 4200.0), ("link", None, 395.0), ("link", None, 370.0), ("sync", None, alpha_us)]
    return pd.DataFrame([{"ceiling": c, "dtype": d, "method": "hand-built", "value": v, "unit": units[c],
                          "verified": True} for c, d, v in rows])


def write_ceilings(root, machine="test-machine", frame=None):
    """results/<machine>/ceilings.{csv,json} by hand under `root` (a temporary PKIT_RESULTS)."""
    folder = root / machine
    folder.mkdir(parents=True)
    (frame if frame is not None else ceilings_frame()).to_csv(folder / "ceilings.csv", index=False)
    (folder / "ceilings.json").write_text(json.dumps({"machine": machine, "pkit_commit": "abc123"}))
    return machine


@pytest.fixture
def results_root(tmp_path, monkeypatch):
    monkeypatch.setenv("PKIT_RESULTS", str(tmp_path))
    return tmp_path


def test_without_a_ceilings_file_the_measured_columns_are_nan_and_say_why(results_root):
    table = hp.cost_table(list(PROBLEMS.values()), 2, sizes=["large"], machine="test-machine")
    assert list(table.columns[-len(hp.ROOFLINE_COLUMNS):]) == list(hp.ROOFLINE_COLUMNS)
    assert table["roofline_measured_ms"].isna().all() and table["roofline_measured_bound"].isna().all()
    expected = f"none: {results_root / 'test-machine' / 'ceilings.csv'} not recorded"
    assert (table["measured_ceilings"] == expected).all()
    # the datasheet floor is there, and is what roofline_time_ms / bound always held
    assert (table["roofline_datasheet_ms"] > 0).all()
    assert table["roofline_time_ms"].tolist() == table["roofline_datasheet_ms"].tolist()
    assert table["bound"].tolist() == table["roofline_datasheet_bound"].tolist()
    assert hp.measured_ceilings("test-machine")[0] is None


def test_measured_ceilings_give_the_measured_floor_with_alpha_per_sync_step(results_root):
    machine = write_ceilings(results_root)
    measured, origin = hp.measured_ceilings(machine)
    assert origin == "measured on test-machine at abc123" and measured.sync_s == pytest.approx(ALPHA_US * 1e-6)
    table = hp.cost_table(list(PROBLEMS.values()), 2, sizes=["tiny", "large"], machine=machine)
    assert (table["measured_ceilings"] == origin).all() and table["roofline_measured_ms"].notna().all()
    for row in table.itertuples():
        p = PROBLEMS[row.problem]
        cost = p.cost(2, row.size, row.dtype)
        rate = measured.flops_rate(hp.flops_dtype(row.dtype) if cost["flops"] else None)
        terms = (cost["flops"] / rate, cost["hbm_bytes"] / 4200e9, cost["link_bytes"] / 395e9)
        expected_ms = (max(terms) + ALPHA_US * 1e-6 * cost["sync_steps"]) * 1e3
        assert row.roofline_measured_ms == pytest.approx(expected_ms), row.problem
        assert row.sync_steps == cost["sync_steps"]
        # the datasheet states no α: its floor has no sync term
        assert row.roofline_datasheet_ms == pytest.approx(roofline.floor(
            cost, roofline.Ceilings.datasheet(), hp.flops_dtype(row.dtype) if cost["flops"] else None).time_s * 1e3)
    tiny = table[table["size"] == "tiny"].set_index("problem")
    # at the tiny size α dominates: 01's two rounds cost 2α, 04's one round α
    assert tiny.loc["01_all_reduce", "roofline_measured_bound"] == "sync"
    assert tiny.loc["01_all_reduce", "roofline_measured_ms"] == pytest.approx(2 * ALPHA_US * 1e-3, rel=0.01)
    assert tiny.loc["04_all_to_all", "roofline_measured_ms"] == pytest.approx(ALPHA_US * 1e-3, rel=0.01)
    large = table[table["size"] == "large"].set_index("problem")
    assert large.loc["05_allgather_gemm", "roofline_measured_bound"] == "compute"
    # the measured bf16 rate (780) is below the datasheet's (989.4): a compute-bound floor rises, plus one α
    gemm = large.loc["05_allgather_gemm"]
    assert ((gemm["roofline_measured_ms"] - ALPHA_US * 1e-3) / gemm["roofline_datasheet_ms"]
            == pytest.approx(989.4 / 780, rel=1e-6))


def test_measured_ceilings_without_a_problem_dtype_rate_raise(results_root):
    machine = write_ceilings(results_root, frame=ceilings_frame(gemm={"bfloat16": 780.0}))
    with pytest.raises(ValueError, match="float32"):
        hp.cost_table([PROBLEMS["24_distributed_knn"]], 2, sizes=["large"], machine=machine)


def baseline_rows(ms=0.5):
    return pd.DataFrame({"problem": ["01_all_reduce", "05_allgather_gemm", "1_pkb_problem"],
                         "category": ["collectives", "fused", "pkb"], "size": ["large", "large", "1024x1024"],
                         "dtype": ["bfloat16", "bfloat16", "bfloat16"], "world_size": [2, 2, 2],
                         "ref_time_ms_median": [ms, 2 * ms, ms], "roofline_time_ms": [0.1, 0.2, None]})


def test_roofline_report_adds_both_floors_and_fractions_to_a_timed_table(results_root):
    frame = baseline_rows()
    plain = hp.roofline_report(frame, list(PROBLEMS.values()), machine="test-machine")
    assert list(plain.columns) == [c for c in frame.columns] + list(hp.ROOFLINE_COLUMNS) + [
        "roofline_datasheet_fraction", "roofline_measured_fraction"]
    assert plain["roofline_time_ms"].tolist()[:2] == [0.1, 0.2]  # the table's own columns are kept
    assert plain["roofline_measured_fraction"].isna().all()
    assert plain.loc[0, "roofline_datasheet_fraction"] == pytest.approx(plain.loc[0, "roofline_datasheet_ms"] / 0.5)
    assert plain.loc[2, ["roofline_datasheet_ms", "sync_steps", "roofline_datasheet_bound"]].isna().all()  # no cost
    machine = write_ceilings(results_root)
    both = hp.roofline_report(frame, list(PROBLEMS.values()), machine=machine)
    for i, ms in ((0, 0.5), (1, 1.0)):
        assert both.loc[i, "roofline_measured_fraction"] == pytest.approx(both.loc[i, "roofline_measured_ms"] / ms)
        assert both.loc[i, "roofline_measured_ms"] > both.loc[i, "roofline_datasheet_ms"]  # slower rates, plus α
    assert math.isnan(both.loc[2, "roofline_measured_fraction"])
    with pytest.raises(ValueError, match="ref_time_ms_median"):
        hp.roofline_report(frame.drop(columns="ref_time_ms_median"), list(PROBLEMS.values()))
