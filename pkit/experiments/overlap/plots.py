"""The overlap study's figures (notebook 05): pkit's GEMM against cuBLAS (`draw_gate`), what a copy beside it
costs the GEMM (`draw_interference`, `draw_partition`), the model's curves (`draw_curves`), and each measured
schedule's time and fraction of its roofline bound, one column per pattern (`draw`, from a
`pkit.experiments.overlap.analysis.with_bounds` frame)."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from ...ops.overlap_patterns import PATTERNS, gemm_of
from .analysis import GEMM_GATE, SHAPE, TERMS
from .model import partition_traffic


def fraction_axis_top(fractions) -> float:
    """The top of an axis of fractions of the overlap bound: 1.1, or higher where a point lies above it (a time
    below the bound), so that no point is cut off."""
    return max(1.1, 1.05 * float(np.nanmax(np.asarray(fractions, dtype=float))))


def legend_right(fig, axes) -> None:
    """One legend for `fig`, right of its panels, naming each labelled line of `axes` once (no legend box over the
    data)."""
    handles = {h.get_label(): h for ax in axes for h in ax.get_legend_handles_labels()[0]}
    fig.legend(handles=list(handles.values()), loc="outside right center", fontsize=8)


def draw_gate(gate: pd.DataFrame, target: float = GEMM_GATE, inputs: str = "bf16"):
    """pkit's GEMM over cuBLAS per shape (`analysis.gemm_gate`'s rows) as horizontal bars, one shape a row in the
    recorded order (so many shapes stay readable), parity and the gate `target` marked; `inputs` names the input
    type in the axis label. Returns the figure.

    >>> import matplotlib; matplotlib.use("Agg")
    >>> gate = pd.DataFrame({"shape": ["8192×8192×8192", "8192×256×8192"], "ratio_to_cublas": [1.02, 0.59]})
    >>> [t.get_text() for t in draw_gate(gate).axes[0].get_yticklabels()]
    ['8192×8192×8192', '8192×256×8192']
    """
    from ... import figures

    fig, ax = figures.subplots(figsize=(7.5, 1.6 + 0.26 * len(gate)))
    rows = range(len(gate))
    ax.barh(list(rows), gate["ratio_to_cublas"], color=figures.BLUE, label="pkit GEMM / cuBLAS (TFLOP/s)")
    ax.axvline(1.0, color="0.2", lw=1, label="parity")
    ax.axvline(target, color="0.3", ls="--", lw=1, label=f"gate: {target:.0%} of cuBLAS")
    ax.set_yticks(list(rows), gate["shape"])
    ax.invert_yaxis()
    ax.set(ylabel=f"shape M×N×K (C = A · Bᵀ, {inputs} in, fp32 accumulate)", xlabel="pkit GEMM's rate over cuBLAS's")
    ax.set_xlim(0, max(1.25, 1.1 * float(gate["ratio_to_cublas"].max())))
    ax.xaxis.set_major_formatter(lambda v, _: f"{v:.0%}")
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncols=3, frameon=False)
    return fig


def draw_interference(copies: pd.DataFrame, partition: pd.DataFrame, fits: dict):
    """GEMM rate beside a copy over its rate alone, against the HBM traffic the copy made: copy-engine copies within
    the GPU (paced) and from and to the host, SM and TMA copies on the SMs the GEMM gave up (over the GEMM on the
    same SMs idle, where the partition read the copy's rate: not beside a GEMM in a green context, cuBLAS's), one
    panel per GEMM, the fitted curve drawn. A Figure."""
    from ... import figures

    gemms = list(fits)
    fig, axes = figures.subplots(1, len(gemms), figsize=(5.6 * len(gemms), 4.3), sharey=True, squeeze=False)
    styles = {"ce": ("o", figures.ORANGE), "sm": ("s", figures.BLUE), "tma": ("^", figures.GREEN)}
    moved = partition_traffic(partition) if len(partition) else partition
    moved = moved.dropna(subset=["hbm_traffic_GBps"]) if len(moved) else moved  # unread beside a green context
    for ax, gemm in zip(axes[0], gemms):
        own = copies[copies["gemm"] == gemm]
        for host, part in own.groupby(own["route"].str.contains("CPU")):
            ax.errorbar(part["hbm_traffic_GBps"], part["rate_ratio"],
                        yerr=[part["rate_ratio"] - part["rate_ratio_q1"], part["rate_ratio_q3"] - part["rate_ratio"]],
                        fmt="D" if host else "o", color=figures.PURPLE if host else figures.ORANGE, capsize=2,
                        label="copy engine, host ↔ GPU" if host else "memcpy within the GPU (paced; on SMs)")
        for engine, part in (moved[moved["gemm"] == gemm].groupby("engine") if len(moved) else []):
            marker, color = styles[engine]
            ax.plot(part["hbm_traffic_GBps"], part["rate_ratio"], marker, color=color, ls="none",
                    label=f"{figures.label(engine)} copy on the SMs given up")
        x = np.linspace(0, max(1.0, float(own["hbm_traffic_GBps"].max())), 100)
        ax.plot(x, [1 / fits[gemm].time_ratio(v) for v in x], color="0.3", lw=1, label="fit: 1 / (1 + a·u + b·u²)")
        ax.set(title=figures.label(gemm), xlabel="HBM traffic of the copy (GB/s, reads + writes)")
        ax.legend(fontsize=7.5, loc="lower left")
    axes[0][0].set_ylabel("GEMM rate beside the copy / alone")
    return fig


def draw_partition(partition: pd.DataFrame, gemms: dict):
    """GEMM rate on the SMs left over its all-SM rate, against SMs given to a copy: idle and running, one line per
    GEMM and state, and dashed the wave count's prediction for the GEMM `sm_pull` runs (`GemmFit.rate_on` at the
    partition's first shape; nothing fitted to these points). A Figure."""
    from ... import figures

    fig, ax = figures.subplots()
    colors = figures.colors_for(list(gemms))
    for (gemm, copy), part in partition.groupby(["gemm", "copy"]):
        part = part.sort_values("sms_given")
        ax.plot(part["sms_given"], part["rate_ratio"], marker={"idle": "o", "sm": "s", "tma": "^"}[copy],
                ls={"idle": "-", "sm": ":", "tma": "-."}[copy], color=colors[gemm],
                label=f"{figures.label(gemm)}, {'SMs idle' if copy == 'idle' else figures.label(copy) + ' copy on them'}")
    given = np.arange(0, int(partition["sms_given"].max()) + 1)
    fit = gemms[gemm_of("sm_pull")]  # the GEMM a schedule gives SMs away from: pkit's, planned again on fewer SMs
    m, n, k = partition[["m", "n", "k"]].iloc[0]
    ax.plot(given, [fit.rate_on(m, n, k, fit.sms - v) for v in given], color="0.35", lw=1.0, ls="--",
            drawstyle="steps-post", label=f"model: {figures.label(fit.implementation)} in whole waves")
    ax.set(xlabel="SMs given to communication (of all the GPU's)", ylabel="GEMM rate / its rate on every SM")
    ax.legend(fontsize=7.5)
    return fig


def draw_curves(frames: dict, measured: pd.DataFrame | None = None):
    """The model's fraction of the overlap bound per schedule against the swept size, one column per pattern, one
    row per system (`frames`: name → `pkit.experiments.overlap.model.curves` frame); measured points
    (`beside_measured` rows) drawn where given. Each schedule drawn as `pkit.figures.line_look` says (its marker
    on every point, so a curve lying on another's still shows), the serial one dashed; one legend, right of the
    panels, naming every schedule drawn. A Figure."""
    from ... import figures

    names = list(frames)
    patterns = list(dict.fromkeys(p for frame in frames.values() for p in frame["pattern"]))
    fig, axes = figures.subplots(len(names), len(patterns), figsize=(4.4 * len(patterns), 3.4 * len(names)),
                                 sharey=True, squeeze=False)
    for row, name in zip(axes, names):
        frame = frames[name]
        for ax, pattern in zip(row, patterns):
            for schedule, part in frame[frame["pattern"] == pattern].groupby("schedule", sort=False):
                look = {**figures.line_look(schedule), **({"ls": "--"} if schedule == "serial" else {})}
                ax.plot(part["inner"], part["fraction_of_bound"], lw=1.2, ms=4, **look)
            if measured is not None and len(measured):
                pts = measured[(measured["pattern"] == pattern) & (measured["gpus"] == frame["gpus"].iloc[0])]
                for schedule, part in pts.groupby("schedule"):
                    ax.plot(part["inner"], part["fraction_of_bound"], "o", color=figures.line_look(schedule)["color"],
                            ms=5, mec="black", mew=0.5)
            ax.set(xscale="log", title=f"{figures.label(pattern)}\n{name}", ylim=(0, 1.05))
            ax.title.set_fontsize(9)
            ax.set_xlabel(PATTERNS[pattern].swept)
    for row in axes:
        row[0].set_ylabel("bound / time (1 = at the bound)")
    legend_right(fig, axes.flat)
    return fig


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
    >>> from pkit.experiments.overlap.analysis import with_bounds
    >>> fig = draw(with_bounds(pd.DataFrame(rows)))
    >>> [t.get_text() for t in fig.legends[0].get_texts()]
    ['serial (NCCL + cuBLAS)', 'copy engine + flags', 'bound: max(T_c, T_l, T_m) + α', 'serial bound: T_c + T_l + α']
    >>> [ax.get_xlabel().split()[0] for ax in fig.axes[2:]], [t.get_text() for t in fig.axes[3].get_xticklabels()]
    (['N_local', 'K_local'], ['4096'])
    """
    from ... import figures

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
                   ylim=(0, fraction_axis_top(rows["fraction_of_bound"])))
        bottom.set_xscale("log", base=2)
        bottom.set_xticks(list(bounds["swept"]), [str(v) for v in bounds["swept"]])
        bottom.minorticks_off()
        bottom.yaxis.set_major_formatter(lambda v, _: f"{v:.0%}")
    legend_right(fig, axes[0])
    return fig
