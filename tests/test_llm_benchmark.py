"""Notebook 07's figures (pkit.experiments.llm_benchmark) draw what pkit.metrics and pkit.analysis compute, on the
recorded example evaluation."""
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from pkit import analysis, metrics  # noqa: E402
from pkit.experiments import llm_benchmark as L  # noqa: E402
from pkit.harness.records import read_jsonl  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[1] / "results" / "cpu" / "llm_eval_example.jsonl"
RECORDS = read_jsonl(EXAMPLE)
NOTES = {"where": "test machine", "note": "test models"}


@pytest.fixture(scope="module")
def outcomes():
    return metrics.outcomes(RECORDS)


@pytest.fixture(scope="module")
def diagnoses():
    return analysis.diagnose_records(RECORDS)


def bar_widths(ax) -> float:
    return sum(p.get_width() for p in ax.patches)


def test_notes_say_where_and_of_which_problems():
    assert L.title_note(RECORDS).endswith("(CPU/gloo timings: not GPU performance)")
    gpu = [dict(r, device="cuda") for r in RECORDS[:2]]
    assert L.title_note(gpu).endswith("(timed on cuda)")
    assert "size tiny" in L.title_note(RECORDS)
    assert L.share_of(87) == "over 87 problems, those without records counted unsolved"
    assert L.share_of(None) == "over the problems each model has records for"


def test_example_records_say_what_they_are_and_that_no_language_model_wrote_them(tmp_path):
    about = L.records_about(EXAMPLE)
    assert about["llm_written"] is False and set(about["labels"]) == {"pkit", "torch alternate", "example"}
    where = L.title_note(RECORDS, about)
    assert where.startswith("example records, not LLM-written: CPU only, no GPU (cpu), world size 2, size tiny")
    assert "torch alternates" in about["what"] and "not LLM-written" in about["what"]
    note = L.models_note(RECORDS, about)
    assert "pkit = pkit's shipped solutions" in note and "torch alternate = the shipped torch alternates" in note
    assert note.endswith("None of them is LLM-written.") and "own solutions" not in note
    (tmp_path / "x.jsonl").write_text("")
    assert L.records_about(tmp_path / "x.jsonl") == {}
    assert L.models_note(RECORDS) == "Models: example; pkit; torch alternate."
    assert L.title_note(RECORDS, {}) == L.title_note(RECORDS)


def test_published_bars_are_the_talks_fractions_and_crosses_the_write_ups():
    published = analysis.published()
    ax = L.draw_published(published).axes[0]
    talk = published[published.source_key == "talk"]
    assert sorted(round(p.get_height(), 6) for p in ax.patches) == sorted(round(f, 6) for f in talk.fraction.dropna())
    crosses = ax.collections[0].get_offsets()
    assert sorted(crosses[:, 1]) == sorted(published[published.source_key == "writeup"].fraction)
    assert "not\nreported" in [t.get_text() for t in ax.texts]


def test_pass_at_k_draws_a_panel_per_model_with_its_shares(outcomes):
    fig = L.draw_pass_at_k(outcomes, None, **NOTES)
    by_k = analysis.pass_by_k(outcomes)
    assert [ax.get_title() for ax in fig.axes] == sorted(outcomes.model.unique())
    for ax in fig.axes:
        mine = by_k[by_k.model == ax.get_title()]
        assert sorted(p.get_height() for p in ax.patches) == sorted([*mine["pass"], *mine["fast"]])
    assert "test machine" in fig._suptitle.get_text()


def test_fast_p_draws_the_curve_of_each_model(outcomes):
    ax = L.draw_fast_p(outcomes, 87, **NOTES).axes[0]
    curve = metrics.fast_p_curve(outcomes, L.THRESHOLDS, 1, 87)
    lines = {line.get_label(): line for line in ax.get_lines() if not line.get_label().startswith("_")}
    assert set(lines) == set(outcomes.model)
    for model, line in lines.items():
        assert np.array_equal(line.get_ydata(), curve[curve.model == model].fast.to_numpy())


def test_categories_heatmap_has_a_column_per_model_and_metric(outcomes):
    ax = L.draw_categories(outcomes, **NOTES).axes[0]
    grid, _ = metrics.by_category(outcomes)
    assert [t.get_text() for t in ax.get_xticklabels()] == list(grid.columns)
    assert [t.get_text() for t in ax.get_yticklabels()][0] == "all categories"


def test_failures_count_each_failed_candidate_once(diagnoses):
    ax = L.draw_failures(diagnoses, **NOTES).axes[0]
    counts = analysis.cause_counts(diagnoses)
    assert bar_widths(ax) == diagnoses.cause.notna().sum()
    assert [t.get_text() for t in ax.get_yticklabels()] == [f"{c.replace('_', ' ')} [{counts.confidence[c]}]"
                                                            for c in counts.index]


def test_mechanisms_stack_each_candidate_under_each_mechanism(diagnoses):
    ax = L.draw_mechanisms(diagnoses, **NOTES).axes[0]
    assert bar_widths(ax) == analysis.mechanism_outcomes(diagnoses).to_numpy().sum()


def test_speedups_mark_each_models_geometric_mean(outcomes):
    ax = L.draw_speedups(outcomes, **NOTES).axes[0]
    models = sorted(outcomes.model.unique())
    diamonds = [line for line in ax.get_lines() if line.get_marker() == "D"]
    correct = outcomes[outcomes.correct & outcomes.speedup.notna()]
    assert [d.get_xdata()[0] for d in diamonds] == pytest.approx(
        [metrics.geomean_speedup(correct[correct.model == m]) for m in models])
