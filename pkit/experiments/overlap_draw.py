"""The overlap study's figure: each schedule's time and fraction of its roofline bound, one column per pattern
(`draw`, from a `pkit.experiments.overlap_analysis.with_bounds` frame)."""
from __future__ import annotations

from typing import Sequence

import pandas as pd

from ..ops.overlap_patterns import PATTERNS
from .overlap_analysis import SHAPE, TERMS


def draw(bounded: pd.DataFrame, schedules: Sequence[str] | None = None):
    """A `with_bounds` frame as small multiples, one column of panels per pattern, against the dimension its
    sweep varies (its `swept` in pkit.ops.overlap_patterns): on top each schedule's time per call with the bound
    max(T_c, T_l, T_m) + α (dashed) and the serial bound T_c + T_l + α (dotted); below, each schedule's fraction
    of the bound (1: at the bound).
    `schedules`: the ones to draw (default all, in the frame's order). Colours, markers and labels are pkit's
    (`pkit.figures`); one legend, right of the panels. Returns the figure.

    >>> import matplotlib; matplotlib.use("Agg")
    >>> rows = [{"pattern": p, "schedule": s, "gpus": 2, "m": 8192, "k": 8192, "n": n, "time_median_us": t * n / 1024}
    ...         for p in ("ag_gemm", "gemm_rs") for n in (1024, 4096) for s, t in (("serial", 300.0), ("ce_flags", 200.0))]
    >>> from pkit.experiments.overlap_analysis import with_bounds
    >>> fig = draw(with_bounds(pd.DataFrame(rows)))
    >>> [t.get_text() for t in fig.legends[0].get_texts()]
    ['serial (NCCL + cuBLAS)', 'copy engine + flags', 'bound: max(T_c, T_l, T_m) + α', 'serial bound: T_c + T_l + α']
    >>> [ax.get_xlabel().split()[0] for ax in fig.axes[2:]], [t.get_text() for t in fig.axes[3].get_xticklabels()]
    (['N_local', 'K_local'], ['4096'])
    """
    from .. import figures

    missing = {"schedule", "time_median_us", "fraction_of_bound", *SHAPE, *TERMS} - set(bounded.columns)
    if missing:
        raise ValueError(f"bounded: expected with_bounds' columns, missing {sorted(missing)}")
    names = list(dict.fromkeys(bounded["schedule"] if schedules is None else schedules))
    colours = figures.colors_for(names)
    patterns = list(dict.fromkeys(bounded["pattern"]))
    fig, axes = figures.subplots(2, len(patterns), figsize=(5.2 * len(patterns) + 2.8, 7.0), sharex="col",
                                 squeeze=False)
    for col, pattern in enumerate(patterns):
        rows = bounded[bounded["pattern"] == pattern]
        rows = rows.assign(swept=PATTERNS[pattern].inner(rows)).sort_values("swept")
        top, bottom = axes[0, col], axes[1, col]
        for name in names:
            mine = rows[rows["schedule"] == name]
            look = dict(color=colours[name], marker=figures.marker(name), ls=figures.LINESTYLES.get(name, "-"),
                        label=figures.label(name))
            top.plot(mine["swept"], mine["time_median_us"], **look)
            bottom.plot(mine["swept"], mine["fraction_of_bound"], **look)
        bounds = rows.drop_duplicates("swept")
        top.plot(bounds["swept"], bounds["bound_us"], color="0.2", ls="--", lw=1.2,
                 label="bound: max(T_c, T_l, T_m) + α")
        top.plot(bounds["swept"], bounds["serial_bound_us"], color="0.45", ls=":", lw=1.2,
                 label="serial bound: T_c + T_l + α")
        bottom.axhline(1.0, color="0.2", ls="--", lw=1.0)
        top.set(title=figures.label(pattern), yscale="log", ylabel="time per call (µs, log scale)")
        bottom.set(xlabel=PATTERNS[pattern].swept, ylabel="fraction of the bound (bound / time)",
                   ylim=(0, max(1.1, 1.05 * float(rows["fraction_of_bound"].max()))))
        bottom.set_xscale("log", base=2)
        bottom.set_xticks(list(bounds["swept"]), [str(v) for v in bounds["swept"]])
        bottom.minorticks_off()
        bottom.yaxis.set_major_formatter(lambda v, _: f"{v:.0%}")
    handles = {h.get_label(): h for ax in axes[0] for h in ax.get_legend_handles_labels()[0]}  # each name once
    fig.legend(handles=list(handles.values()), loc="outside right center", fontsize=8)
    return fig
