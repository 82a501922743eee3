"""Notebook 07's figures: the published ParallelKernelBench numbers, and pass@k, fast_p, scores by category,
failure causes, transfer mechanisms and speedups of any `pkit eval` records. The numbers come from
`pkit.metrics` and `pkit.analysis`; each function here draws one figure and returns it (the notebook saves it).

Each figure's second title line, `where`, says what the records are (when the provenance file beside them says:
`records_about`), where they were evaluated and how far their timings can be trusted (`title_note`); `note` ends
each caption: what each model label stands for (`models_note`). Shares are fractions of problems in [0, 1]
(`share_of` says of which); speedups are reference time / candidate time.

Usage (notebook 07):
    records, about = read_jsonl(path), llm_benchmark.records_about(path)
    outcomes = metrics.outcomes(records)
    fig = llm_benchmark.draw_pass_at_k(outcomes, None, where=llm_benchmark.title_note(records, about),
                                       note=llm_benchmark.models_note(records, about))
    figures.save(fig, "llm_pass_at_k")
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from .. import analysis, figures, metrics
from ..harness.records import STATUSES

SETTINGS = {"zero_shot": "zero-shot\n(1 sample)", "sampling": "more samples",
            "agent": "agent harness\n(bash, multi-turn)"}
"""The published settings, in the order drawn, → their axis labels."""
PUBLISHED_METRICS = {"correct": "correct", "correct_and_faster": "correct and faster than baseline"}
"""The published metrics → their legend labels."""
PKB_PROBLEMS = 87
"""Problems in ParallelKernelBench: the denominator of the published numbers."""
THRESHOLDS = np.round(np.arange(0.0, 3.01, 0.05), 2)
"""Speedup thresholds p of the fast_p curve: 0 to 3 in steps of 0.05."""
FASTER = ("status correct_faster: the speedup's 95% interval lies above 1.05; a tie, correct_level (the interval "
          "within ±5%), counts as 1×")
"""What 'faster' means in the captions (pkit.metrics.credited_speedup)."""


def records_about(path) -> dict:
    """What a records file is, from the provenance file beside it (`<path>.json`, its `parameters`, as
    scripts/eval_example.py writes them): `what` (the file in one line), `headline` (in a few words), `labels`
    (model label → what its candidates are) and `llm_written`; {} when there is no such file or it says none of
    these."""
    side = Path(path).with_suffix(".json")
    if not side.is_file():
        return {}
    parameters = json.loads(side.read_text(encoding="utf-8")).get("parameters") or {}
    return {key: parameters[key] for key in ("what", "headline", "labels", "llm_written") if key in parameters}


def models_note(records, about: dict | None = None) -> str:
    """A caption's last sentence: each model label of `records` and what it stands for (`about['labels']`, from
    `records_about`), and that no language model wrote them where `about` says so.

    Example:
        >>> models_note([{"model": "pkit"}, {"model": None}], {"labels": {"pkit": "pkit's solutions"},
        ...                                                     "llm_written": False})
        "Models: pkit = pkit's solutions; unnamed. None of them is LLM-written."
    """
    about = about or {}
    labels = about.get("labels") or {}
    models = sorted({r.get("model") or metrics.UNNAMED_MODEL for r in records})
    said = "; ".join(f"{m} = {labels[m]}" if m in labels else m for m in models)
    return f"Models: {said}." + (" None of them is LLM-written." if about.get("llm_written") is False else "")


def timing_note(records) -> str:
    """How far the records' timings can be trusted: CPU/gloo timings say nothing of GPU performance."""
    devices = sorted({str(r.get("device")) for r in records})
    return "CPU/gloo timings: not GPU performance" if devices == ["cpu"] else f"timed on {', '.join(devices)}"


def title_note(records, about: dict | None = None) -> str:
    """A figure's second title line for `records`: what they are in a few words (`about['headline']`, from
    `records_about`), the machines they were evaluated on, their sizes and `timing_note`."""
    sizes = ", ".join(sorted({str(r.get("size")) for r in records}))
    where = f"{figures.records_machine(records)}, size {sizes} ({timing_note(records)})"
    return f"{about['headline']}: {where}" if (about or {}).get("headline") else where


def share_of(total_problems: int | None) -> str:
    """Which problems a share is of: `total_problems` (problems without records unsolved), or those with records."""
    return (f"over {total_problems} problems, those without records counted unsolved" if total_problems
            else "over the problems each model has records for")


def draw_published(published: pd.DataFrame):
    """The published numbers (`pkit.analysis.published`): a bar per setting and metric from the talk, its count
    of the 87 problems written at its foot ('not reported' where it gives none), and the write-up's numbers as
    crosses, which the counts no longer print over."""
    talk = published[published.source_key == "talk"].set_index(["setting", "metric"])
    writeup = published[published.source_key == "writeup"]
    shares = talk["fraction"].unstack().reindex(index=list(SETTINGS), columns=list(PUBLISHED_METRICS))
    texts = talk.apply(lambda r: f"{int(r['count'])}/{PKB_PROBLEMS}" if pd.notna(r["count"])
                       else f"≈{r['percent']:.0f}%", axis=1).unstack()
    fig, ax = figures.subplots(figsize=(7.0, 4.6))
    labels = PUBLISHED_METRICS
    bars = figures.grouped_bars(ax, shares.rename(columns=labels), {labels["correct"]: figures.BLUE,
                                labels["correct_and_faster"]: figures.ORANGE},
                                texts=texts.reindex_like(shares).rename(columns=labels), texts_at="base",
                                missing="not\nreported")
    ax.scatter([bars[(s, labels[m])] for s, m in zip(writeup.setting, writeup.metric)], writeup.fraction, marker="x",
               color="black", zorder=3, label="write-up (GPT-5.5)")
    ax.set_xticks(range(len(SETTINGS)), list(SETTINGS.values()))
    ax.set(ylim=(0, 0.55), ylabel=f"fraction of the {PKB_PROBLEMS} problems")
    ax.yaxis.set_major_formatter(lambda v, _: f"{v:.0%}")
    ax.legend(loc="upper left")
    figures.suptitle(fig, "ParallelKernelBench, best frontier model (published)",
                     note="as published, not measured here; machine and world size: see the sources")
    figures.caption(fig, "Bars: the talk ('not reported': no bar, the talk gives no number). Crosses: a press "
                         "write-up. Sources and where they disagree: pkit/data/published_pkb.csv")
    return fig


def draw_pass_at_k(outcomes: pd.DataFrame, total_problems: int | None, *, where: str, note: str):
    """pass@k and fast_1@k (`pkit.analysis.pass_by_k`) of each model in `outcomes` (`pkit.metrics.outcomes`), a
    panel per model, k up to the fewest samples it has of a problem."""
    models = sorted(outcomes.model.unique())
    by_k = analysis.pass_by_k(outcomes, total_problems)
    fig, axes = figures.subplots(1, len(models), figsize=(3.2 * len(models) + 1.0, 4.2), sharey=True, squeeze=False)
    for ax, (model, mine) in zip(axes.flat, by_k.groupby("model")):
        shares = mine.set_index(mine["k"].map("k = {}".format))[["pass", "fast"]].rename(
            columns={"pass": "pass@k", "fast": "fast_1@k"})
        figures.grouped_bars(ax, shares, {"pass@k": figures.BLUE, "fast_1@k": figures.ORANGE},
                             texts=shares.map(lambda v: f"{v:.0%}"))
        ax.set(title=model, xlabel="samples per problem", ylim=(0, 1.1))
        ax.yaxis.set_major_formatter(lambda v, _: f"{v:.0%}")
    axes.flat[0].set(ylabel="share of problems")
    axes.flat[0].legend(loc="upper left", fontsize=8)
    figures.suptitle(fig, "pass@k and fast_1@k", note=where)
    figures.caption(fig, "pass@k: chance that at least one of k samples of a problem is correct (unbiased estimate "
                         "from the n samples per problem), averaged " + share_of(total_problems) + "; fast_1@k: the "
                         "same, counting only samples that are correct and faster than the reference (" + FASTER
                         + "). "
                         "k runs up to the fewest samples the model has of a problem. " + note,
                    width=int(3.2 * len(models) * 17))
    return fig


def draw_fast_p(outcomes: pd.DataFrame, total_problems: int | None, *, where: str, note: str):
    """fast_p@1 of each model as the speedup threshold p rises over `THRESHOLDS` (`pkit.metrics.fast_p_curve`)."""
    curve = metrics.fast_p_curve(outcomes, THRESHOLDS, 1, total_problems)
    colors = figures.colors_for(curve.model)
    fig, ax = figures.subplots()
    for model, mine in curve.groupby("model", sort=True):
        ax.step(mine.p.to_numpy(), mine.fast.to_numpy(), where="post", color=colors[model], label=model)
    ax.axvline(1.0, color="#555555", linewidth=0.8)
    ax.annotate("p = 1: faster than the reference", (1.0, 0.98), xytext=(4, 0), textcoords="offset points",
                fontsize=8, va="top", color="#555555")
    ax.set(xlabel="speedup threshold p (reference time / candidate time)", ylabel="fast_p@1 (share of problems)",
           ylim=(0, 1.05))
    ax.yaxis.set_major_formatter(lambda v, _: f"{v:.0%}")
    ax.legend()
    figures.suptitle(fig, "fast_p@1 as the speedup threshold p rises", note=where)
    figures.caption(fig, "fast_p@1: chance that one sample of a problem is correct and more than p times faster "
                         "than the reference, averaged " + share_of(total_problems) + "; a tie (correct_level) counts "
                         "as 1×, so it is fast for p < 1 only; at p = 0 it counts every correct sample with a timing. "
                         + note)
    return fig


def draw_categories(outcomes: pd.DataFrame, *, where: str, note: str):
    """pass@1 and fast_1@1 of each model per problem category (`pkit.metrics.by_category`) as a heatmap, each cell
    with the share and the problems it is of; 'no data' where a model has no records in a category."""
    grid, problems = metrics.by_category(outcomes)
    cells = [[f"{v:.0%}\nof {n:.0f}" if pd.notna(v) else "" for v, n in zip(vs, ns)]
             for vs, ns in zip(grid.to_numpy(), problems.to_numpy())]
    fig, ax = figures.subplots(figsize=(1.6 * len(grid.columns) + 3.0, 0.55 * len(grid) + 2.6))
    figures.heatmap(ax, grid, vmin=0, vmax=1, annot=cells, missing="no data",
                    colorbar={"format": lambda v, _: f"{v:.0%}", "shrink": 0.8, "label": "share of problems"})
    ax.set_yticks(np.arange(len(grid)) + 0.5,
                  ["all categories" if c == metrics.ALL else c.replace("_", " ") for c in grid.index], rotation=0)
    ax.set_xticks(np.arange(len(grid.columns)) + 0.5, grid.columns, rotation=0, fontsize=8.5)
    ax.set(xlabel="", ylabel="")
    figures.suptitle(fig, "pass@1 and fast_1@1 per problem category", note=where)
    figures.caption(fig, "Each cell: a model's pass@1 (chance its sample is correct) or fast_1@1 (correct and "
                         "faster than the reference, " + FASTER + "), averaged over the n problems of that row it "
                         "has records for "
                         "('of n'); 'all categories' averages over all of that model's n problems, not over every "
                         "problem in the benchmark. Hatched 'no data': no records of that model in that category "
                         "(not 0%). " + note)
    return fig


def _stacked_bars(ax, counts: pd.DataFrame, colors: dict, labels: dict) -> None:
    """A horizontal bar per row of `counts`, its columns stacked left to right in `colors`, labelled by `labels`."""
    left = np.zeros(len(counts))
    for column in counts.columns:
        ax.barh(np.arange(len(counts)), counts[column], left=left, color=colors[column], label=labels[column])
        left += counts[column].to_numpy()


def draw_failures(diagnoses: pd.DataFrame, *, where: str, note: str):
    """Failed candidates per cause (`pkit.analysis.cause_counts` of `diagnose_records`), stacked by model, each
    cause labelled with the confidence of the rules that assigned it."""
    counts = analysis.cause_counts(diagnoses)
    by_model = counts.drop(columns="confidence")
    causes = list(counts.index)
    fig, ax = figures.subplots(figsize=(7.0, 0.45 * len(causes) + 2.4))
    _stacked_bars(ax, by_model, figures.colors_for(diagnoses.model), {m: m for m in by_model.columns})
    ax.set_yticks(np.arange(len(causes)), [f"{c.replace('_', ' ')} [{counts.confidence[c]}]" for c in causes])
    ax.invert_yaxis()
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set(xlabel="failed candidates")
    ax.legend()
    figures.suptitle(fig, "Why candidates fail", note=where)
    figures.caption(fig, "Each failed candidate counted once, under the cause pkit.analysis assigns from its "
                         "record and source; in brackets: the confidence of the rule. " + note)
    return fig


def draw_mechanisms(diagnoses: pd.DataFrame, *, where: str, note: str):
    """Candidates per transfer mechanism (`pkit.analysis.mechanism_outcomes`), stacked by outcome; mechanisms pkit
    forbids (`pkit.analysis.FORBIDDEN`) are marked."""
    by_status = analysis.mechanism_outcomes(diagnoses)
    names = list(by_status.index)
    fig, ax = figures.subplots(figsize=(7.0, 0.5 * len(names) + 2.4))
    _stacked_bars(ax, by_status, figures.colors_for(STATUSES), {s: figures.label(s) for s in STATUSES})
    ax.set_yticks(np.arange(len(names)),
                  [figures.label(m) + (" (forbidden here)" if m in analysis.FORBIDDEN else "") for m in names])
    ax.invert_yaxis()
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set(xlabel="candidates using the mechanism (a candidate may use several)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    figures.suptitle(fig, "Transfer mechanism vs outcome", note=where)
    figures.caption(fig, "Mechanisms read from each candidate's source by pkit.analysis; bars stacked by the "
                         "candidate's outcome (correct, faster: correct and faster than the reference, "
                         + FASTER + "). 'none found': no call the rules recognise (they do not read pkit.dist's "
                         "collectives, which pkit's solutions call). " + note)
    return fig


def draw_speedups(outcomes: pd.DataFrame, *, where: str, note: str):
    """The speedups of each model's correct, timed samples (log scale): a box, every sample as a dot and the
    geometric mean (`pkit.metrics.geomean_speedup`) as a diamond."""
    import seaborn as sns

    models = sorted(outcomes.model.unique())
    colors = figures.colors_for(models)
    correct = outcomes[outcomes.correct & outcomes.speedup.notna()]
    fig, ax = figures.subplots(figsize=(7.0, 1.3 * len(models) + 2.2))
    ax.set_xscale("log")
    for row, model in enumerate(models):  # matplotlib's own box: seaborn's passes matplotlib's deprecated `vert`
        speedups = correct.speedup[correct.model == model]
        if len(speedups):
            line = {"color": colors[model], "linewidth": 1.2}
            ax.boxplot(speedups, positions=[row], orientation="horizontal", whis=(0, 100), widths=0.5,
                       manage_ticks=False, boxprops=line, whiskerprops=line, capprops=line, medianprops=line)
    sns.swarmplot(data=correct, x="speedup", y="model", order=models, hue="model", palette=colors, size=5,
                  alpha=0.8, legend=False, ax=ax)
    for row, model in enumerate(models):
        g = metrics.geomean_speedup(correct[correct.model == model])
        ax.plot([g], [row], marker="D", ms=7, color="black", zorder=4)
        ax.annotate(f"geomean {g:.2f}×", (g, row - 0.3), xytext=(0, 2), textcoords="offset points", ha="center",
                    fontsize=8)
    ax.axvline(1.0, color="#555555", linewidth=0.8)
    ax.xaxis.set_major_formatter(lambda v, _: f"{v:g}×")
    ax.xaxis.set_minor_formatter(lambda v, _: f"{v:g}×" if f"{v:e}"[0] in "25" else "")  # 0.2, 0.5, 2, 5, ...
    ax.set(xlabel="speedup over the reference (reference time / candidate time, log scale)", ylabel="")
    figures.suptitle(fig, "Speedups of correct samples", note=where)
    figures.caption(fig, "Each dot: one correct sample of one problem, its speedup the median over the timing "
                         "rounds (a tie, correct_level, drawn where its rounds put it). Box: quartiles and median; "
                         "whiskers: the slowest and the fastest sample; ◆: geometric mean. Right of the line at 1×: "
                         "faster than the reference. " + note)
    return fig
