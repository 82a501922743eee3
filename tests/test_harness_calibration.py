"""scripts/harness_calibration.py: docs/harness.md quotes each committed calibration record as the script prints it
(`--report`), never numbers typed apart from a record; the slowed candidates' spin is set from what is measured
apart; the summary and its report cover every kind of row, overhead rows included. Nothing here runs the harness
(the script's own run is recorded in results/<machine>/harness_calibration.*)."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from pkit.harness.problem import load_module

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "harness.md"
RECORDS = sorted((ROOT / "results").glob("*/harness_calibration.json"))
HEADLINE = re.compile(r"^\d{4}-\d\d-\d\d, ([\w.-]+): ")


@pytest.fixture(scope="module")
def script():
    return load_module(ROOT / "scripts" / "harness_calibration.py", "harness_calibration_script")


def quoted_blocks() -> dict[str, str]:
    """The ```text blocks of docs/harness.md that begin with a calibration report's headline, by machine."""
    found, lines = {}, DOC.read_text().splitlines()
    for i, line in enumerate(lines):
        if line.strip() == "```text" and i + 1 < len(lines) and (m := HEADLINE.match(lines[i + 1])):
            end = lines.index("```", i + 1)
            found[m.group(1)] = "\n".join(lines[i + 1:end])
    return found


def test_there_are_records_to_quote():
    assert {p.parent.name for p in RECORDS} >= {"cpu", "h200x1"}, RECORDS


@pytest.mark.parametrize("record", RECORDS, ids=lambda p: p.parent.name)
def test_the_doc_quotes_each_record_as_the_script_reports_it(script, record):
    recorded = json.loads(record.read_text())
    printed = script.report(script.recorded_summary(record, recorded), recorded)
    quoted = quoted_blocks().get(record.parent.name)
    assert quoted is not None, f"docs/harness.md quotes no report of {record}: paste what " \
                               f"`python scripts/harness_calibration.py --report {record.relative_to(ROOT)}` prints"
    assert quoted == printed, f"docs/harness.md's quote of {record.relative_to(ROOT)} is not what --report prints"


def test_the_report_of_a_record_is_printed_by_the_command_line(script, capsys):
    assert script.main(["--report", str(RECORDS[0])]) == 0
    recorded = json.loads(RECORDS[0].read_text())
    assert capsys.readouterr().out == script.report(script.recorded_summary(RECORDS[0], recorded), recorded) + "\n"


def test_root_or_report_is_required(script, capsys):
    with pytest.raises(SystemExit):
        script.main([])
    assert "expected ROOT" in capsys.readouterr().err


@pytest.mark.parametrize("argv, text", [
    (["--same", "-1"], "--same: expected a count of 0 or more, got -1"),
    (["--overhead-runs", "-2"], "--overhead-runs: expected a count of 0 or more, got -2"),
    (["--same", "0"], "--slowed: expected --same of 1 or more with it"),
])
def test_counts_are_checked_before_any_work(script, capsys, tmp_path, argv, text):
    with pytest.raises(SystemExit) as stop:
        script.main([str(tmp_path), *argv])
    assert stop.value.code == 2 and text in capsys.readouterr().err
    assert not any(tmp_path.iterdir()), "nothing measured or written"


def test_same_0_slowed_0_measures_the_overhead_problems_alone(script, tmp_path):
    args = script.parse_args([str(tmp_path), "--same", "0", "--slowed", "0"])
    assert script.calibrate(tmp_path, args, None) == [] and not any(tmp_path.iterdir())


@pytest.mark.parametrize("wait_ms, fraction", [(0.0, 0.1), (0.03, 0.1), (0.05, 0.25), (0.2, 0.1)])
def test_the_spin_makes_the_candidate_slower_by_the_fraction_measured_apart(script, wait_ms, fraction):
    """A candidate whose wait for the device costs `wait_ms` beside a 1 ms reference: the spin found brings it to
    (1 + fraction) ms, never below no spin at all; the true speedup is the one measured at that spin."""
    tried = []

    def measure(spin_ms):
        tried.append(spin_ms)
        return 1.0, 1.0 + wait_ms + spin_ms

    spin, true = script.spin_for(fraction, 1.0, measure)
    assert tried[0] == pytest.approx(fraction) and tried[-1] == spin
    assert spin == pytest.approx(max(0.0, fraction - wait_ms))
    assert true == pytest.approx(1 / (1 + wait_ms + spin))


def test_a_stray_measurement_of_the_spin_is_measured_again(script):
    """The first measurement reads the candidate far too slow (a burst of load): the spin is corrected and measured
    again until the candidate's time lies within the tolerance of its target."""
    tried = []

    def measure(spin_ms):  # the wait costs 0.02 ms; the first measurement strays by 0.18 ms
        tried.append(spin_ms)
        return 1.0, 1.0 + 0.02 + spin_ms + (0.18 if len(tried) == 1 else 0.0)

    spin, true = script.spin_for(0.25, 1.0, measure)
    assert len(tried) == 3 and spin == pytest.approx(0.23) and true == pytest.approx(1 / 1.25), tried


def _record(problem: str, status: str, speedup: float, low: float, high: float) -> dict:
    return {"problem": problem, "size": "tiny", "status": status, "error": None, "speedup": speedup, "speedup_low": low,
            "speedup_high": high, "timing_rounds": 6, "ref_time_ms": 0.1, "sol_time_ms": 0.1 / speedup,
            "ref_time_cv": 0.04, "sol_time_cv": 0.05, "ref_time_cv_rounds": 0.02, "sol_time_cv_rounds": 0.03,
            "ref_time_iqr_ms": 0.01, "sol_time_iqr_ms": 0.01, "ref_time_max_ms": 0.35, "sol_time_max_ms": 0.4,
            "wall_s": 2.0, "phase_s": {"startup": 0.5, "parent: timed calls": 0.25}}


def test_the_summary_reports_every_kind(script):
    rows = [script.row_of("same", _record("01_calibration", "correct_level", 1.0, 0.98, 1.02), 0.0, 1.0, 2.1),
            script.row_of("slowed 10%", _record("01_calibration", "correct_slower", 0.9, 0.88, 0.93), 0.01, 0.91, 2.0),
            script.row_of("overhead 01_row_sums", _record("01_row_sums", "correct_level", 1.01, 0.97, 1.04), 0.0,
                          1.0, 3.0)]
    said = script.summary(pd.DataFrame(rows))
    assert said["overhead_s_median"] == pytest.approx(1.75) and said["overhead_s_max"] == pytest.approx(1.75)
    assert said["slowed 10%"]["interval_holds_true"] == 1.0 and said["same"]["statuses"] == {"correct_level": 1}
    text = script.report(said, {"utc_time": "2026-12-06T00:00:00Z", "machine": "cpu", "gpus": [],
                                "pkit_commit": "0123456"})
    lines = text.splitlines()
    assert len(lines) == 5 and HEADLINE.match(lines[0]), text
    assert lines[4].startswith("overhead 01_row_sums (tiny): n=1, statuses {'correct_level': 1}, cost median 1.75 s")
    assert "0.910 measured apart" in lines[3] and "at cv 0.04 (0.02 within a round)" in lines[3]
    assert lines[3].endswith("IQR 0.100 of the median, slowest call 3.50 times the median; a call over 3 times the "
                             "median in 100% of evaluations"), lines[3]


def test_the_summary_tells_a_few_slow_calls_from_a_spread_of_all(script):
    def row(slowest_ms, cv):
        record = _record("01_calibration", "correct_level", 1.0, 0.98, 1.02) | {"ref_time_max_ms": slowest_ms,
                                                                               "ref_time_cv": cv}
        return script.row_of("same", record, 0.0, 1.0, 2.0)

    said = script.summary(pd.DataFrame([row(1.2, 0.5), row(0.25, 0.04), row(0.28, 0.06), row(0.12, 0.03)]))
    assert said["same"]["slow_call_share"] == pytest.approx(0.25)  # one median of 0.1 ms with a call of 1.2 ms
    assert said["same"]["ref_time_cv_median_calm"] == pytest.approx(0.04)


def test_the_summary_gives_the_calm_calls_spread_of_every_evaluation(script):
    def row(slow_calls, cv_calm):
        record = _record("01_calibration", "correct_level", 1.0, 0.98, 1.02) | {"ref_time_slow_calls": slow_calls,
                                                                               "ref_time_cv_calm": cv_calm}
        return script.row_of("same", record, 0.0, 1.0, 2.0)

    said = script.summary(pd.DataFrame([row(2, 0.05), row(0, 0.03), row(1, 0.04)]))
    assert said["same"]["ref_slow_calls_median"] == 1 and said["same"]["ref_time_cv_calm_median"] == pytest.approx(0.04)
    text = script.report(said, {"utc_time": "2026-12-07T00:00:00Z", "machine": "cpu", "gpus": [],
                                "pkit_commit": "0123456"})
    assert text.splitlines()[-1].endswith("; per evaluation 1 such calls (median), the rest at cv 0.040"), text
    older = script.summary(pd.DataFrame([script.row_of("same", _record("01_calibration", "correct_level", 1.0, 0.98,
                                                                       1.02), 0.0, 1.0, 2.0)]))
    assert "ref_time_cv_calm_median" not in older["same"]  # records of an older harness lack the fields


def test_a_slowed_candidates_spin_is_measured_apart_on_the_cpu(tmp_path, monkeypatch):
    """`measured_spin` as `calibrate` calls it, in a spawned one-rank process: the spin it keeps makes the candidate
    slower than the reference, and the true speedup it gives is that measured ratio."""
    import importlib
    import textwrap

    monkeypatch.syspath_prepend(str(ROOT / "scripts"))  # the spawned process imports the script by its name
    script = importlib.import_module("harness_calibration")
    problem = tmp_path / "problem.py"
    problem.write_text(textwrap.dedent(script.PROBLEM).lstrip())
    slowed = tmp_path / "slowed_100.py"  # twice the reference's time: far beyond a loaded CPU's noise
    slowed.write_text(textwrap.dedent(script.SLOWED).lstrip().format(delay_ms=0.05, problem=str(problem)))
    spin_ms, true = script.measured_spin(problem, slowed, "tiny", "cpu", 40, 1.0, 0.05)
    assert spin_ms > 0.0 and 0.2 < true < 0.8, (spin_ms, true)
