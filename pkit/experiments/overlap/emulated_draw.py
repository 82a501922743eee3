"""The emulated overlap points (pkit.experiments.overlap.emulated) beside the overlap model for the same link:
`beside_model` puts each point beside the model's time, the overlap bound and both speedups over serial; `draw`
draws each schedule's fraction of the bound, the model's curves and the emulated points, one panel per pattern and
world size, every title saying "one GPU, link emulated at X GB/s".

Example:
    >>> title_of(393.4)
    'one GPU, link emulated at 393 GB/s'
"""
from __future__ import annotations

import pandas as pd

from . import model as M
from . import links as L
from .plots import fraction_axis_top, legend_right

KEY = ["link_GBps", "gpus", "pattern", "schedule", "inner"]


def title_of(link_GBps: float) -> str:
    """What every figure and table of the emulation says of itself."""
    return f"one GPU, link emulated at {link_GBps:.0f} GB/s"


def beside_model(emulated: pd.DataFrame, gemms: dict, interference: dict, measured: L.Link, gemm=None,
                 hbm=None) -> pd.DataFrame:
    """Each emulated point (overlap_emulated rows) beside the model for the same link (`model.emulated_link`
    of `measured` at the point's rate and W; the bound's ceilings `bound_ceilings(link, gemm, hbm)`, recorded where
    given): model_us, error (model / emulated − 1), bound_us, bound_origin, fraction_of_bound (bound / emulated
    time) and model_fraction, speedup_vs_serial (emulated, paired) and model_speedup, and `emulated_as` (the title
    words)."""
    tables = []
    for (gbps, gpus, source), points in emulated.groupby(["link_GBps", "gpus", "link_source"]):
        link = L.emulated_link(measured, int(gpus), float(gbps), source)
        model = M.curves(link, gemms, interference, inner=sorted(set(points["inner"])),
                         patterns=list(dict.fromkeys(points["pattern"])),
                         ceilings=M.bound_ceilings(link, gemm, hbm))
        serial = model[model["schedule"] == "serial"].set_index(["pattern", "inner"])["time_us"]
        model = model.assign(model_speedup=[serial[(p, x)] / t for p, x, t in
                                            zip(model["pattern"], model["inner"], model["time_us"])],
                             link_GBps=float(gbps))
        merged = points.merge(model[KEY + ["time_us", "bound_us", "bound_origin", "fraction_of_bound",
                                           "model_speedup"]].rename(columns={"fraction_of_bound": "model_fraction"}),
                              on=KEY, how="left")
        tables.append(merged.assign(model_us=merged["time_us"], error=merged["time_us"] / merged["time_median_us"] - 1,
                                    fraction_of_bound=merged["bound_us"] / merged["time_median_us"],
                                    emulated_as=title_of(float(gbps))).drop(columns="time_us"))
    return pd.concat(tables, ignore_index=True)


def draw(table: pd.DataFrame):
    """Fraction of the overlap bound against the swept size: the model's curve per schedule (lines) and the emulated
    points (filled where faithful, hollow where the schedule's communication ran on SMs in local HBM), one column per
    pattern, one row per (link, W), one legend right of them. The axis holds the curves and the faithful points
    (`plots.fraction_axis_top`); a hollow point above it is drawn as a hollow triangle along its top. A Figure."""
    from ... import figures

    panels = list(table.groupby(["link_GBps", "gpus"]).groups)
    patterns = list(dict.fromkeys(table["pattern"]))
    fig, axes = figures.subplots(len(panels), len(patterns), figsize=(4.4 * len(patterns), 3.3 * len(panels)),
                                 sharey=True, squeeze=False)
    colors = figures.colors_for(list(dict.fromkeys(table["schedule"])))
    top = fraction_axis_top(pd.concat([table["model_fraction"], table.loc[table["faithful"], "fraction_of_bound"]]))
    for row, (gbps, gpus) in zip(axes, panels):
        for ax, pattern in zip(row, patterns):
            part = table[(table["link_GBps"] == gbps) & (table["gpus"] == gpus) & (table["pattern"] == pattern)]
            for schedule, pts in part.groupby("schedule", sort=False):
                pts = pts.sort_values("inner")
                color = colors[schedule]
                ax.plot(pts["inner"], pts["model_fraction"], color=color, lw=1.1,
                        ls="--" if schedule == "serial" else "-", label=f"{figures.label(schedule)} (model)")
                faithful = pts[pts["faithful"]]
                loose = pts[~pts["faithful"] & (pts["fraction_of_bound"] <= top)]
                above = pts[~pts["faithful"] & (pts["fraction_of_bound"] > top)]
                ax.plot(faithful["inner"], faithful["fraction_of_bound"], "o", color=color, ms=5, mec="black",
                        mew=0.5, ls="none")
                ax.plot(loose["inner"], loose["fraction_of_bound"], "o", mfc="none", mec=color, ms=5, ls="none")
                ax.plot(above["inner"], [top] * len(above), "^", mfc="none", mec=color, ms=6, ls="none")
            ax.set_xscale("log", base=2)
            ax.set(ylim=(0, 1.05 * top), title=f"{figures.label(pattern)}, W = {gpus}\n{title_of(gbps)}",
                   xlabel="N_local" if M.PATTERNS[pattern].flow == "in" else "K_local")
            ax.title.set_fontsize(8.5)
        row[0].set_ylabel("bound / time")
    legend_right(fig, axes.flat)
    return fig


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per link, W, pattern and schedule: points, median and largest |error| of the model, median fraction of the
    bound (emulated, model), median speedup over serial (emulated, model), faithful."""
    grouped = table.assign(abs_error=table["error"].abs()).groupby(
        ["emulated_as", "gpus", "pattern", "schedule"], sort=False)
    return grouped.agg(points=("error", "size"), median_abs_error=("abs_error", "median"),
                       max_abs_error=("abs_error", "max"), fraction_of_bound=("fraction_of_bound", "median"),
                       model_fraction=("model_fraction", "median"), speedup_vs_serial=("speedup_vs_serial", "median"),
                       model_speedup=("model_speedup", "median"), faithful=("faithful", "all")).reset_index()
