"""pkit.widgets on CPU: the pure functions behind each explorer, and the widgets' callbacks driven by setting
control values programmatically (ipywidgets works without a kernel or a browser)."""
import json
import math
import shutil
from pathlib import Path

import pandas as pd
import pytest

from pkit import results, widgets as W
from pkit.errors import PkitError
from pkit.hardware import GPUS
from pkit.widgets import evals

ROOT = Path(__file__).resolve().parents[1]
MACHINE = "h200x2-nv18"
EXAMPLE = ROOT / "results" / "cpu" / "llm_eval_example.jsonl"


# --- roofline ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("collective, n, factor", [("send", 8, 1.0), ("all_gather", 4, 0.75),
                                                   ("reduce_scatter", 2, 0.5), ("all_reduce", 8, 1.75),
                                                   ("all_to_all", 8, 0.875)])
def test_collective_link_factors(collective, n, factor):
    assert W.ROOFLINE_COLLECTIVES[collective][0](n) == pytest.approx(factor)
    p = W.roofline_point("H100", world_size=n, message_bytes=1 << 30, flops=0, collective=collective)
    assert p["cost"]["link_bytes"] == pytest.approx(factor * 2**30)
    assert p["link_s"] == pytest.approx(factor * 2**30 / (GPUS["H100"].nvlink_gbps_bidir / 2 * 1e9))


def test_roofline_point_terms_bound_and_balance():
    h200 = GPUS["H200"]
    p = W.roofline_point("H200", world_size=8, message_bytes=256 << 20, flops=2e12, dtype="bfloat16",
                         collective="all_reduce")
    assert p["compute_s"] == pytest.approx(2e12 / (h200.bf16_dense_tflops * 1e12))
    assert p["hbm_s"] == pytest.approx(2 * (256 << 20) / (h200.hbm_tbps * 1e12))  # read once, written once
    assert p["link_s"] == pytest.approx(1.75 * (256 << 20) / 450e9)
    assert p["time_s"] == pytest.approx(max(p["compute_s"], p["hbm_s"], p["link_s"]))
    assert p["serial_s"] == pytest.approx(p["compute_s"] + p["link_s"])
    assert p["bound"] == "compute" and "compute-bound" in p["summary"]
    assert p["balance_flops"] == pytest.approx(p["link_s"] * h200.bf16_dense_tflops * 1e12)
    assert "datasheet" in p["origin"]
    # just below the balance point the link binds, just above it compute does
    below = W.roofline_point("H200", 8, 256 << 20, 0.99 * p["balance_flops"], "bfloat16", "all_reduce")
    above = W.roofline_point("H200", 8, 256 << 20, 1.01 * p["balance_flops"], "bfloat16", "all_reduce")
    assert (below["bound"], above["bound"]) == ("link", "compute")
    fp32 = W.roofline_point("H200", 8, 256 << 20, 2e12, "float32", "all_reduce")
    assert fp32["compute_s"] == pytest.approx(2e12 / (h200.fp32_tflops * 1e12))
    assert W.roofline_point("H200", 2, 0, 0, collective="send")["bound"] == "none"
    assert W.roofline_point("H200", 2, 1 << 20, 0, hbm_bytes=1e12)["bound"] == "hbm"


def test_roofline_html_and_figure():
    p = W.roofline_point("B200", 4, 1 << 30, 1e15, "float16", "all_gather")
    text = W.roofline_html(p)
    assert "Datasheet-modelled, not measured" in text and "B200 × 4" in text and "all-gather" in text
    fig = W.roofline_figure(p)
    bars = fig.axes[0].patches
    assert len(bars) == 3 and "datasheet-modelled" in fig.axes[0].get_title()
    assert sorted(b.get_width() for b in bars)[-1] > 0


@pytest.mark.parametrize("kwargs, match", [({"gpu": "V100"}, "gpu: expected one of"),
                                           ({"collective": "no-such-op"}, "collective: expected"),
                                           ({"world_size": 1}, "world_size: expected an integer >= 2"),
                                           ({"flops": -1.0}, "flops: expected a finite number >= 0"),
                                           ({"message_bytes": float("nan")}, "message_bytes"),
                                           ({"dtype": "int8"}, "dtype: expected one of")])
def test_roofline_point_argument_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        W.roofline_point(**kwargs)


def test_roofline_explorer_callbacks_update_text_and_chart():
    box = W.roofline_explorer(gpu="H200", world_size=8, message_bytes=1 << 30, flops=1e12)
    c, out = box.controls, box.outputs
    assert set(c) == {"gpu", "world_size", "collective", "message_bytes", "flops", "dtype"}
    text, chart = out["text"].value, bytes(out["chart"].value)
    assert "NVLink-bound" in text and chart.startswith(b"\x89PNG")
    c["flops"].value = 1e16  # far past the balance point: compute binds
    assert "compute-bound" in out["text"].value and bytes(out["chart"].value) != chart
    expected = W.roofline_point("H200", 8, 1 << 30, c["flops"].value, "bfloat16", "all_reduce")
    assert out["text"].value == W.roofline_html(expected)
    before = out["text"].value
    c["gpu"].value = "A100"
    assert out["text"].value != before and "A100 × 8" in out["text"].value
    before = out["text"].value
    c["world_size"].value = 2
    assert out["text"].value != before and "A100 × 2" in out["text"].value
    before = out["text"].value
    c["dtype"].value = "float32"
    assert out["text"].value == W.roofline_html(W.roofline_point("A100", 2, 1 << 30, c["flops"].value, "float32",
                                                                   "all_reduce")) != before
    c["collective"].value = "send"
    c["message_bytes"].value = 1 << 34
    c["flops"].value = 1.0
    assert "NVLink-bound" in out["text"].value and "16 GiB" in out["text"].value


# --- recorded transfers --------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def transfers():
    return W.transfer_frame(MACHINE)


def test_transfer_frame_gathers_the_recorded_studies(transfers):
    frame, provenance = transfers
    assert set(frame["study"]) == set(W.TRANSFER_STUDIES) == set(provenance)
    assert list(frame.columns) == ["study", "route", "mechanism", "sms", "bytes", "bandwidth_GBps", "time_median_us",
                                   "cv"]
    assert set(frame["route"]) == {"GPU0 → GPU1"}  # recorded before frames named their route: all peer copies
    assert (frame.loc[frame["mechanism"] == "ce", "sms"] == 0).all()
    sizes = frame[(frame["study"] == "mechanisms_size_sweep") & (frame["mechanism"] != "ce")]
    assert sizes["sms"].isna().all()  # recorded with each mechanism's default grid
    sm = frame[(frame["study"] == "mechanisms_sm_sweep") & (frame["mechanism"] != "ce")]
    assert sm["sms"].notna().all() and sm["bytes"].nunique() == 1
    assert all(p["machine"] == MACHINE for p in provenance.values())


def test_transfer_frame_missing_results(tmp_path):
    with pytest.raises(PkitError, match="no recorded transfer results"):
        W.transfer_frame("nowhere", root=tmp_path)
    with pytest.raises(ValueError, match="studies: expected names"):
        W.transfer_frame(MACHINE, studies=["hierarchy_ladder"])
    (tmp_path / MACHINE).mkdir()
    for suffix in (".csv", ".json"):  # one study recorded: the others are left out
        shutil.copy(ROOT / "results" / MACHINE / f"quickstart{suffix}", tmp_path / MACHINE)
    frame, provenance = W.transfer_frame(MACHINE, root=tmp_path)
    assert set(frame["study"]) == {"quickstart"} == set(provenance)


def test_transfer_lookup_exact_point_matches_the_csv(transfers):
    frame, _ = transfers
    csv = pd.read_csv(ROOT / "results" / MACHINE / "mechanisms_size_sweep.csv")
    want = csv[(csv["mechanism"] == "sm_pull") & (csv["bytes"] == 4 << 20)].iloc[0]
    got = W.transfer_lookup(frame, ["sm_pull"], 4 << 20).iloc[0]
    assert got["exact"] and got["note"] == "recorded point" and got["study"] == "mechanisms_size_sweep"
    assert got["bandwidth_GBps"] == want["bandwidth_GBps"] and got["time_median_us"] == want["time_median_us"]
    sm = pd.read_csv(ROOT / "results" / MACHINE / "mechanisms_sm_sweep.csv")
    want = sm[(sm["mechanism"] == "tma_push") & (sm["blocks"] == 16)].iloc[0]
    got = W.transfer_lookup(frame, ["tma_push"], 256 << 20, sms=16).iloc[0]
    assert got["exact"] and got["bandwidth_GBps"] == want["bandwidth_GBps"]


def test_transfer_lookup_nearest_point_says_so(transfers):
    frame, _ = transfers
    got = W.transfer_lookup(frame, ["ce", "sm_push"], 3 << 20).set_index("mechanism")
    # |log2(4/3)| < |log2(3/2)|: 4 MiB is the nearer recorded size
    assert (got["bytes"] == 4 << 20).all() and not got["exact"].any()
    assert got.loc["sm_push", "note"] == "nearest recorded point: 4 MiB with the default grid (asked 3 MiB with the default grid)"
    got = W.transfer_lookup(frame, ["ce", "sm_pull"], 1 << 20, sms=18).set_index("mechanism")
    assert got.loc["sm_pull", "sms"] == 16 and got.loc["sm_pull", "bytes"] == 256 << 20  # log2(18/16) < log2(24/18)
    assert got.loc["sm_pull", "note"].startswith("nearest recorded point: 256 MiB with 16 SMs (asked 1 MiB with 18 SMs")
    assert W.transfer_lookup(frame, ["sm_pull"], 256 << 20, sms=21).iloc[0]["sms"] == 24  # log2(24/21) < log2(21/16)
    assert got.loc["ce", "exact"] and got.loc["ce", "bytes"] == 1 << 20 and "uses no SMs" in got.loc["ce", "note"]


def test_transfer_lookup_without_a_matching_grid_and_errors(transfers):
    frame, _ = transfers
    quick = frame[frame["study"] == "quickstart"]
    got = W.transfer_lookup(quick, ["sm_push"], 1 << 20, sms=32).iloc[0]
    assert pd.isna(got["study"]) and math.isnan(got["bandwidth_GBps"])
    assert got["note"] == "no recorded point with 32 SMs for sm_push"
    assert "no recorded point" in W.transfer_html(W.transfer_lookup(quick, ["sm_push"], 1 << 20, sms=32), {})
    with pytest.raises(ValueError, match="mechanisms: expected names from"):
        W.transfer_lookup(frame, ["nvls"], 1 << 20)
    with pytest.raises(ValueError, match="mechanisms: expected names from"):
        W.transfer_lookup(frame, [], 1 << 20)
    with pytest.raises(ValueError, match="nbytes: expected an integer >= 1"):
        W.transfer_lookup(frame, ["ce"], 0)
    with pytest.raises(ValueError, match="sms: expected an integer >= 1"):
        W.transfer_lookup(frame, ["ce"], 1 << 20, sms=0)
    with pytest.raises(ValueError, match="frame: expected transfer_frame's columns"):
        W.transfer_lookup(frame.drop(columns="sms"), ["ce"], 1 << 20)


def test_transfer_html_names_provenance(transfers):
    frame, provenance = transfers
    text = W.transfer_html(W.transfer_lookup(frame, ["ce"], 1 << 30), provenance)
    assert "nearest recorded point" in text and "copy engine" in text
    import html

    assert html.escape(results.describe(provenance["mechanisms_size_sweep"])) in text


def test_transfer_explorer_callbacks(transfers):
    box = W.transfer_explorer(MACHINE)
    c, out = box.controls, box.outputs
    assert c["kernels"].value == "pkit.ops.transfers" and c["sms"].disabled
    assert set(c["mechanisms"].value) == {"ce", "sm_push", "sm_pull"}
    assert set(dict(c["mechanisms"].options).values()) >= {"tma_push", "tma_pull"}
    text, chart = out["text"].value, bytes(out["chart"].value)
    assert "h200x2-nv18: GPUs" in text and chart.startswith(b"\x89PNG")
    c["nbytes"].value = 64 << 20
    frame, provenance = transfers
    assert out["text"].value == W.transfer_html(W.transfer_lookup(
        frame[frame["study"] != "quickstart"], ["ce", "sm_push", "sm_pull"], 64 << 20), provenance) != text
    assert bytes(out["chart"].value) != chart
    c["default_grid"].value = False
    assert not c["sms"].disabled
    c["sms"].value = 8
    assert "256 MiB with 8 SMs (asked 64 MiB with 8 SMs)" in out["text"].value
    c["mechanisms"].value = ("tma_pull",)
    assert "TMA pull" in out["text"].value and "SM push" not in out["text"].value
    c["kernels"].value = "00_quickstart kernel"
    assert set(dict(c["mechanisms"].options).values()) == {"ce", "sm_push", "sm_pull"}
    assert "quickstart: h200x2-nv18" in out["text"].value
    c["mechanisms"].value = ()
    assert "Pick one or more" in out["text"].value


def test_transfer_explorer_on_a_one_gpu_machine_picks_a_route():
    """One GPU's transfers go along three routes, each with ce, sm and tma: the explorer reads one route at a time."""
    frame, _ = W.transfer_frame("h200x1")
    assert set(frame["route"]) == {"GPU0 → GPU0", "CPU → GPU0", "GPU0 → CPU"}
    box = W.transfer_explorer("h200x1")
    c, out = box.controls, box.outputs
    assert c["route"].options == tuple(dict.fromkeys(frame.loc[frame["study"] != "quickstart", "route"]))
    c["route"].value = "CPU → GPU0"
    assert set(dict(c["mechanisms"].options).values()) == {"ce", "sm", "tma"}
    c["mechanisms"].value = ("ce",)
    want = frame[(frame["study"] == "mechanisms_size_sweep") & (frame["route"] == "CPU → GPU0")
                 & (frame["mechanism"] == "ce") & (frame["bytes"] == c["nbytes"].value)]["bandwidth_GBps"].iloc[0]
    assert f"{want:.1f} GB/s" in out["text"].value
    lookup = W.transfer_lookup(frame, ["ce"], 1 << 20, route="GPU0 → CPU")
    assert lookup["route"].tolist() == ["GPU0 → CPU"]
    with pytest.raises(ValueError, match="route: expected one of the recorded routes"):
        W.transfer_lookup(frame, ["ce"], 1 << 20, route="GPU0 → GPU1")


# --- pkit eval records ---------------------------------------------------------------------------------------

def _record(**fields):
    from pkit.harness.records import new_record

    return new_record(**{"problem": "01_all_reduce", "category": "collectives", "solution": "x/1.py",
                         "world_size": 2, "status": "correct_faster", **fields})


@pytest.fixture
def two_files(tmp_path):
    folder = tmp_path / "runs"
    folder.mkdir()
    a = [_record(model="m1", sample=0, speedup=1.5),
         _record(model="m1", sample=1, status="runtime_error", error="Traceback ...\nRuntimeError: <boom>")]
    b = [_record(model=None, problem="02_all_gather", status="wrong_result", error="rank 1: out differs",
                 per_rank=[{"rank": 0, "ok": True, "mismatch_fraction": 0.0},
                           {"rank": 1, "ok": False, "mismatch_fraction": 1.0, "note": "out differs"}])]
    for name, records in (("a.jsonl", a), ("b.jsonl", b)):
        (folder / name).write_text("".join(json.dumps(r) + "\n" for r in records))
    return folder


def test_load_records_files_and_folders(two_files):
    records, files = W.load_records(two_files)
    assert len(records) == 3 and files == ["runs/a.jsonl", "runs/a.jsonl", "runs/b.jsonl"]
    assert W.load_records([two_files / "b.jsonl"])[0][0]["problem"] == "02_all_gather"
    records, _ = W.load_records(EXAMPLE)
    assert len(records) == len(EXAMPLE.read_text().splitlines())
    with pytest.raises(ValueError, match="neither a JSONL file nor a folder"):
        W.load_records(two_files / "missing.jsonl")
    (two_files / "empty").mkdir()
    with pytest.raises(ValueError, match="no \\*.jsonl files"):
        W.load_records(two_files / "empty")


def test_eval_table_and_filters(two_files):
    records, files = W.load_records(two_files)
    table = W.eval_table(records, files)
    assert list(table["model"]) == ["m1", "m1", "unnamed"]
    assert table.loc[1, "error"] == "Traceback ..."
    assert list(W.filter_table(table, model="m1").index) == [0, 1]
    assert list(W.filter_table(table, problem="02_all_gather").index) == [2]
    assert list(W.filter_table(table, status=W.FAILED).index) == [1, 2]
    assert list(W.filter_table(table, status="runtime_error").index) == [1]
    assert list(W.filter_table(table, status=["correct_faster", "wrong_result"]).index) == [0, 2]
    assert len(W.filter_table(table, W.ALL, W.ALL, W.ALL)) == 3
    assert W.filter_table(table, model="m1", status="wrong_result").empty
    with pytest.raises(ValueError, match="status: expected one of"):
        W.filter_table(table, status="passed")


def test_record_detail_reason_and_per_rank():
    records, _ = W.load_records(EXAMPLE)
    wrong = next(r for r in records if r["status"] == "wrong_result" and r["solution"] == "example/01_all_reduce/2.py")
    d = W.record_detail(wrong)
    assert d["status"] == "wrong_result" and d["error"] == wrong["error"]
    assert d["reason"].startswith("data_partitioning: ") and "medium confidence" in d["reason"]
    assert list(d["per_rank"]["rank"]) == [0, 1] and not d["per_rank"]["ok"].any()
    assert "cpu, world size 2" in d["ran_on"] and "sample 2" in d["title"]
    text = W.detail_html(wrong)
    assert "<b>reason</b>" in text and "<br><b>per rank</b>" in text and "first at [2048]" in text
    for status, label in (("compile_error", "compile_error"), ("runtime_error", None), ("timeout", None)):
        r = next(r for r in records if r["status"] == status)
        reason = W.record_detail(r)["reason"]
        assert reason and (label is None or reason.startswith(label)), (status, reason)
    correct = next(r for r in records if r["status"] == "correct_faster")
    assert W.record_detail(correct)["reason"] is None and "<b>reason</b>" not in W.detail_html(correct)


def test_example_records_say_what_each_candidate_is(two_files):
    records, files = W.load_records(EXAMPLE)
    about = evals.files_about(EXAMPLE)[files[0]]
    assert about["llm_written"] is False and "not LLM-written" in about["what"]
    assert {r["model"] for r in records} == set(about["labels"]) == {"pkit", "torch alternate", "example"}
    for r in records:
        assert r["device"] == "cpu" and r["size"] == "tiny" and r["provenance"]["harness_version"]
        kind = {"pkit": "/pkit_", "torch alternate": "/torch_alt.py", "example": "example/"}[r["model"]]
        assert kind in r["solution"], (r["model"], r["solution"])
    alternate = next(r for r in records if r["model"] == "torch alternate")
    d = W.record_detail(alternate, about)
    assert d["what"].startswith("torch alternate: the shipped torch alternates") and "not LLM-written" in d["what"]
    assert "harness " in d["ran_on"] and "speedup_low" in d["timing"]
    assert "not LLM-written" in W.detail_html(alternate, about)
    assert W.record_detail(alternate)["what"] is None
    assert evals.files_about(two_files) == {"runs/a.jsonl": {}, "runs/b.jsonl": {}}


def test_detail_html_escapes_errors(two_files):
    records, _ = W.load_records(two_files)
    text = W.detail_html(records[1])
    assert "&lt;boom&gt;" in text and "<boom>" not in text


def test_eval_browser_callbacks(two_files):
    box = W.eval_browser(EXAMPLE)
    c, out = box.controls, box.outputs
    records, files = W.load_records(EXAMPLE)
    about = evals.files_about(EXAMPLE)[files[0]]
    n = len(records)
    wrong = sum(r["status"] == "wrong_result" for r in records)
    assert out["summary"].value.startswith(f"{n} of {n} records from 1 file(s)")
    assert "not LLM-written" in out["summary"].value and "torch alternates" in out["summary"].value
    assert c["record"].value == 0 and out["detail"].value == W.detail_html(records[0], about)
    c["status"].value = "wrong_result"
    assert out["summary"].value.startswith(f"{wrong} of {n} records")
    assert f"wrong_result {wrong}" in out["summary"].value
    shown = [i for _, i in c["record"].options]
    assert len(shown) == wrong and all(records[i]["status"] == "wrong_result" for i in shown)
    assert c["record"].value == shown[0] and "<b>wrong_result</b>" in out["detail"].value
    c["record"].value = shown[-1]
    assert out["detail"].value == W.detail_html(records[shown[-1]], about)
    c["model"].value = "pkit"
    assert out["summary"].value.startswith(f"0 of {n}") and c["record"].value is None
    assert "No record selected" in out["detail"].value
    c["model"].value = "example"
    c["status"].value = W.FAILED
    c["problem"].value = "01_all_reduce"
    shown = [i for _, i in c["record"].options]
    assert shown and all(records[i]["model"] == "example" and records[i]["problem"] == "01_all_reduce"
                         and not records[i]["status"].startswith("correct") for i in shown)
    assert "01_all_reduce" in out["table"].value
    box = W.eval_browser(two_files)
    assert "unnamed" in box.controls["model"].options
    box.controls["model"].value = "unnamed"
    assert "out differs" in box.outputs["detail"].value and "per rank" in box.outputs["detail"].value
