"""The overlap explorer: the overlap model's curves for a link of any rate (pkit.experiments.overlap.model) and the
nearest emulated points (pkit.experiments.overlap.emulated, where recorded), behind `overlap_explorer`'s controls.

`overlap_inputs` gathers what the model needs from the records (the one-GPU GEMM and interference fits, the 2×H200
links, the bound's ceilings, the emulated points); `overlap_view(inputs, link_GBps, pattern, inner, gpus)` is the
plain function the explorer calls: the model's curves for that link and W, its point at `inner`, and the emulated
points nearest to it (their link rate and swept size read as close as recorded, said so).

Example:
    >>> inputs = overlap_inputs()
    >>> view = overlap_view(inputs, link_GBps=200.0, pattern="gemm_rs", inner=1024, gpus=8)
    >>> list(view["point"]["schedule"]), view["title"]
    (['serial', 'tma_add'], 'one GPU, link emulated at 200 GB/s (modelled)')
"""
from __future__ import annotations

import html
import math
from pathlib import Path

import pandas as pd

from .. import figures, results, studies
from ..experiments.overlap import emulated_draw as D
from ..experiments.overlap import links as L
from ..experiments.overlap import model as M
from .common import box, png

EXPLORED_WORLD_SIZES = (2, 4, 8)


def overlap_inputs(calibration: str = "h200x1", links: str = studies.FIGURES_MACHINE, *,
                   root: Path | None = None) -> dict:
    """The model's inputs from the records: GEMM and interference fits (`calibration`'s overlap_gemm and
    interference_copies), the measured link (`links`' records), the bound's recorded ceilings, and the emulated
    points (`calibration`'s overlap_emulated; None where not recorded)."""
    load = lambda e, m: results.load(e, m, root=root)  # noqa: E731
    gemm = load("overlap_gemm", calibration)
    gemms, fits = M.calibrate(gemm.frame, load("interference_copies", calibration).frame, ("pkit_gemm", "cublas"))
    matrix = load("hierarchy_matrix", calibration) if results.is_recorded("hierarchy_matrix", calibration,
                                                                          root=root) else None
    emulated = load("overlap_emulated", calibration).frame if results.is_recorded("overlap_emulated", calibration,
                                                                                  root=root) else None
    return {"gemms": gemms, "fits": fits, "link": L.recorded_link(links, root=root), "gemm": gemm, "hbm": matrix,
            "emulated": emulated}


def overlap_view(inputs: dict, link_GBps: float, pattern: str, inner: int, gpus: int) -> dict:
    """The model for a link of `link_GBps` one way per GPU at W = `gpus` (`overlap.model.emulated_link`, the bound's
    ceilings recorded where they are): `curves` (every schedule of `pattern` over the sweep), `point` (its rows at
    `inner`, the sweep size nearest to it), `emulated` (the recorded emulated points of `pattern` at the recorded
    link rate and W nearest to those asked, at that size; empty where none) with `note` saying which, and `title`."""
    if pattern not in M.PATTERN_NAMES:
        raise ValueError(f"pattern: expected one of {list(M.PATTERN_NAMES)}, got {pattern!r}")
    if not (isinstance(gpus, int) and gpus >= 2):
        raise ValueError(f"gpus: expected an integer >= 2, got {gpus!r}")
    link = L.emulated_link(inputs["link"], gpus, float(link_GBps), "asked")
    curves = M.curves(link, inputs["gemms"], inputs["fits"], patterns=[pattern],
                      ceilings=M.bound_ceilings(link, inputs["gemm"], inputs["hbm"]))
    near = min(M.INNER, key=lambda x: abs(math.log2(x / inner)))
    point = curves[curves["inner"] == near].reset_index(drop=True)
    frame, note = inputs["emulated"], "no emulated points recorded"
    found = pd.DataFrame()
    if frame is not None and len(frame[frame["pattern"] == pattern]):
        own = frame[frame["pattern"] == pattern]
        rate = min(set(own["link_GBps"]), key=lambda r: abs(math.log(r / link_GBps)))
        w = min(set(own["gpus"]), key=lambda g: abs(g - gpus))
        at = own[(own["link_GBps"] == rate) & (own["gpus"] == w)]
        size = min(set(at["inner"]), key=lambda x: abs(math.log2(x / inner)))
        found = at[at["inner"] == size].reset_index(drop=True)
        note = (f"nearest emulated points: {D.title_of(rate)}, W = {w}, {size} (asked {link_GBps:.0f} GB/s, "
                f"W = {gpus}, {inner})")
    return {"curves": curves, "point": point, "emulated": found, "note": note,
            "title": f"{D.title_of(link_GBps)} (modelled)"}


def overlap_html(view: dict) -> str:
    """The explorer's text: each schedule's modelled time and fraction of the bound, the emulated points, the note."""
    rows = "".join(f"<li><b>{html.escape(figures.label(r.schedule))}</b>: {r.time_us:.1f} µs modelled, "
                   f"{r.fraction_of_bound:.2f} of the bound</li>" for r in view["point"].itertuples())
    found = "".join(f"<li>{html.escape(figures.label(r.schedule))}: {r.time_median_us:.1f} µs emulated"
                    f"{'' if r.faithful else ' (not faithful: communication on SMs in local HBM)'}</li>"
                    for r in view["emulated"].itertuples())
    origin = html.escape(view["point"]["bound_origin"].iloc[0])
    return (f"<b>{html.escape(view['title'])}</b><ul>{rows}</ul><i>{html.escape(view['note'])}</i><ul>{found}</ul>"
            f"<small>bound from {origin}</small>")


def overlap_figure(view: dict):
    """The model's fraction of the bound per schedule against the swept size, the emulated points over it."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 3.8))
    ax = fig.subplots()
    colors = figures.colors_for(list(dict.fromkeys(view["curves"]["schedule"])))
    for schedule, part in view["curves"].groupby("schedule", sort=False):
        ax.plot(part["inner"], part["fraction_of_bound"], color=colors[schedule], label=figures.label(schedule))
    for r in view["emulated"].itertuples():
        bound = view["point"].set_index("schedule")["bound_us"].iloc[0]
        ax.plot(r.inner, bound / r.time_median_us, "o", color=colors.get(r.schedule, "0.3"), mec="black",
                mfc=colors.get(r.schedule, "0.3") if r.faithful else "none")
    ax.set_xscale("log", base=2)
    ax.set(ylim=(0, 1.05), ylabel="bound / time", xlabel="swept size", title=view["title"])
    ax.legend(fontsize=7)
    return fig


def overlap_explorer(calibration: str = "h200x1", links: str = studies.FIGURES_MACHINE, *, root: Path | None = None):
    """Link rate, pattern, swept size and W → the model's curves and the nearest emulated points (`overlap_view`).
    Controls: 'link_GBps', 'pattern', 'inner', 'gpus'; outputs: 'text' (HTML), 'chart' (PNG)."""
    import ipywidgets as w

    inputs = overlap_inputs(calibration, links, root=root)
    controls = {"link_GBps": w.FloatLogSlider(value=inputs["link"].ce_GBps, base=10, min=1, max=3.5,
                                              description="link GB/s"),
                "pattern": w.Dropdown(options=[(figures.label(p), p) for p in M.PATTERN_NAMES], description="pattern"),
                "inner": w.SelectionSlider(options=list(M.INNER), value=1024, description="N/K local"),
                "gpus": w.Dropdown(options=list(EXPLORED_WORLD_SIZES), value=2, description="W")}
    outputs = {"text": w.HTML(), "chart": w.Image(format="png")}

    def refresh(change=None):
        view = overlap_view(inputs, controls["link_GBps"].value, controls["pattern"].value, controls["inner"].value,
                            controls["gpus"].value)
        outputs["text"].value = overlap_html(view)
        outputs["chart"].value = png(overlap_figure(view))

    for c in controls.values():
        c.observe(refresh, names="value")
    refresh()
    return box([w.HBox([controls["link_GBps"], controls["pattern"]]), w.HBox([controls["inner"], controls["gpus"]]),
                outputs["text"], outputs["chart"]], controls, outputs, refresh)
