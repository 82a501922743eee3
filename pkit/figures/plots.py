"""Plots several studies share, in pkit's looks (`pkit.figures.style`): sweeps as small multiples
(`facet_sweep`), copies by message size (`size_sweep`), heatmaps and grouped bars that never draw a missing
value as a number (`heatmap`, `grouped_bars`), and byte-size axes (`size_axis`).

Example:
    >>> import matplotlib; matplotlib.use("Agg")
    >>> import pandas as pd
    >>> fig = facet_sweep(pd.DataFrame({"bytes": [1, 2], "implementation": "nccl", "busbw_GBps": [1.0, 2.0]}),
    ...                   "busbw_GBps")
    >>> [line.get_label() for line in fig.axes[0].lines]
    ['NCCL']
"""
from __future__ import annotations

from .style import (LINE_STYLES, LINESTYLES, MARKERS, byte_label, byte_label_fraction, colors_for, label, line_look,
                    subplots)


def bandwidth_spread(frame):
    """Error-bar lengths (GB/s below, GB/s above the median's bandwidth) for timed copies: the interquartile range
    of their times (`time_iqr_us`, Q3 − Q1), centred on the median time (`time_median_us`), as bandwidth of
    `bytes`. A robust spread: one slow outlier among the repetitions does not stretch it, as it does a min-max bar.

    Example:
        >>> import pandas as pd
        >>> below, above = bandwidth_spread(pd.DataFrame({"bytes": [10**6], "time_median_us": [1.0],
        ...                                               "time_iqr_us": [0.2]}))
        >>> round(float(below[0]), 1), round(float(above[0]), 1)   # 1000 GB/s: 1.1 µs → 909, 0.9 µs → 1111
        (90.9, 111.1)
    """
    require_columns(frame, ("bytes", "time_median_us", "time_iqr_us"))
    nbytes, median, half = (frame[c].to_numpy(dtype=float) for c in ("bytes", "time_median_us", "time_iqr_us"))
    half = half / 2
    gbps = nbytes / median / 1e3
    return gbps - nbytes / (median + half) / 1e3, nbytes / (median - half) / 1e3 - gbps


def heatmap(ax, grid, *, cmap="Blues", norm=None, vmin=None, vmax=None, annot=None, fmt: str = ".0%",
            missing: str = "no data", colorbar: dict | None = None):
    """`grid` (a DataFrame: rows × columns, NaN where there is no value) as a seaborn heatmap on `ax`, NaN cells
    masked: drawn hatched grey and marked `missing`, never coloured like a value (so an empty cell cannot be
    read as 0%). `annot`: a same-shaped array of cell texts (default: each value formatted with `fmt`);
    `colorbar`: keyword arguments of the colour bar, None for none. Returns the QuadMesh, whose array is masked
    at the NaN cells.

    Example:
        >>> import matplotlib; matplotlib.use("Agg")
        >>> import numpy as np, pandas as pd
        >>> fig, ax = subplots()
        >>> mesh = heatmap(ax, pd.DataFrame([[0.0, np.nan], [0.5, 1.0]]), vmin=0, vmax=1)
        >>> mesh.get_array().mask.tolist()
        [[False, True], [False, False]]
        >>> [t.get_text() for t in ax.texts]
        ['0%', '50%', '100%', 'no data']
    """
    import numpy as np
    import seaborn as sns
    from matplotlib.patches import Rectangle

    values = grid.to_numpy(dtype=float)
    mask = np.isnan(values)
    if annot is None:
        annot = np.array([["" if np.isnan(v) else format(v, fmt) for v in row] for row in values], dtype=object)
    sns.heatmap(grid, mask=mask, ax=ax, cmap=cmap, norm=norm, vmin=None if norm else vmin,
                vmax=None if norm else vmax, annot=np.asarray(annot, dtype=object), fmt="", linewidths=1,
                linecolor="white", cbar=colorbar is not None, cbar_kws=colorbar or {}, annot_kws={"fontsize": 9})
    for i, j in zip(*np.nonzero(mask)):
        ax.add_patch(Rectangle((j, i), 1, 1, facecolor="#F4F4F4", edgecolor="#BBBBBB", hatch="///", lw=0,
                               zorder=0.5))
        ax.text(j + 0.5, i + 0.5, missing, ha="center", va="center", fontsize=8, color="#555555", style="italic")
    ax.grid(False)
    ax.tick_params(length=0)
    return ax.collections[0]


def size_axis(ax, sizes, every: int = 3) -> None:
    """A byte-size x axis on `ax`: log₂ scale, a tick every `every` powers of two from the smallest of `sizes`
    up to the largest, labelled by `byte_label`."""
    import math

    low, high = math.ceil(math.log2(min(sizes))), math.floor(math.log2(max(sizes)))
    ticks = [1 << k for k in range(low, high + 1, every)]
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, [byte_label(t) for t in ticks])


def facet_sweep(frame, y, *, facet: str | None = None, x: str = "bytes", hue: str = "implementation",
                style: str | None = None, colors: dict | None = None, title="{}", xlabel: str = "message size (bytes)",
                ylabel=None, xscale: str = "log", yscale="linear", marker: str | None = None, ncols: int = 2,
                panel_size: tuple[float, float] = (5.5, 3.75), legend: dict | str | None = None,
                across: str | None = None):
    """A sweep drawn as small multiples; returns the figure (its panels are `fig.axes`, in order).

    One panel per value of `facet` (sorted), or, when `y` is a list of columns, one panel per column; with
    `across` as well, a grid: a row per `facet` value, a column per `across` value (sorted), panels of a row
    sharing their y axis and `title` formatted with both values (default '{} ({})'); in each
    panel one line per value of `hue` and of `style`, against `x` on an `xscale` axis. A hue value's colour comes
    from `colors` (default `colors_for`: the same colour for a name in every figure), its marker from `marker`
    (default `MARKERS`, '.' for other names) and, without `style`, its line style from `LINESTYLES`; with
    `style`, line styles are `LINE_STYLES` in sorted order of its values. Lines are labelled through `label`
    ('hue (style)' with `style`). `title` is a format string for the panel's facet value or column (through
    `label`), or a list of titles; `ylabel` and `yscale` are one value or one per panel (default ylabel: the
    column). `legend`: keyword arguments of every panel's legend, 'figure' for one legend right of the panels
    (one entry per hue value, then one per style value), None for none. The x label goes under the bottom panels.

    Example:
        >>> import matplotlib; matplotlib.use("Agg")
        >>> import pandas as pd
        >>> df = pd.DataFrame({"op": ["all_reduce"] * 4 + ["all_gather"] * 4, "bytes": [1, 2] * 4,
        ...                    "implementation": (["nccl"] * 2 + ["pkit_sm"] * 2) * 2, "busbw_GBps": range(8)})
        >>> fig = facet_sweep(df, "busbw_GBps", facet="op", legend={"fontsize": 8})
        >>> [(ax.get_title(), [line.get_label() for line in ax.lines]) for ax in fig.axes]
        [('all-gather', ['NCCL', 'pkit SM']), ('all-reduce', ['NCCL', 'pkit SM'])]
    """
    ys = [y] if isinstance(y, str) else list(y)
    _check_sweep(frame, ys, x=x, hue=hue, style=style, facet=facet, across=across, legend=legend)
    panels = _panels(frame, ys, facet, across)
    cols = frame[across].nunique() if across else max(1, min(ncols, len(panels)))
    rows = -(-len(panels) // cols)
    title = "{} ({})" if across and title == "{}" else title
    hues = sorted(frame[hue].unique(), key=str)
    colors = colors or colors_for(hues)
    styles = dict(zip(sorted(frame[style].unique()), LINE_STYLES)) if style else {}
    fig, axes = subplots(rows, cols, figsize=(panel_size[0] * cols, panel_size[1] * rows), sharex=True,
                         sharey="row" if across else False, squeeze=False)

    def look(name, kind=None):
        return dict(color=colors.get(name), marker=marker or MARKERS.get(name, "."),
                    ls=styles[kind] if style else LINESTYLES.get(name, "-"))

    for i, (ax, (value, group, column)) in enumerate(zip(axes.flat, panels)):
        for key, g in group.groupby([hue, style] if style else [hue], sort=True):
            name, kind = key[0], (key[1] if style else None)
            g = g.sort_values(x)
            ax.plot(g[x], g[column], **look(name, kind), label=label(name) + (f" ({label(kind)})" if style else ""))
        values = value if isinstance(value, tuple) else (value,)
        ax.set(xscale=xscale, yscale=_each(yscale, i), ylabel=_each(ylabel, i) or column,
               title=_each(title, i) if isinstance(title, (list, tuple)) else title.format(*map(label, values)))
        if isinstance(legend, dict):
            ax.legend(**legend)
    if legend == "figure":
        _figure_legend(fig, [{**look(name, min(styles) if style else None), "label": label(name),
                              "ls": "-" if style else LINESTYLES.get(name, "-")} for name in hues], styles)
    _x_labels_below(axes, len(panels), xlabel)
    return fig


def _panels(frame, ys, facet, across) -> list:
    """`facet_sweep`'s panels in order, each (its facet value, or values with `across`; its rows; its column)."""
    if facet is None:
        return [(column, frame, column) for column in ys]
    return [(value, group, ys[0]) for value, group in frame.groupby([facet, across] if across else [facet], sort=True)]


def _figure_legend(fig, looks, styles: dict) -> None:
    """One legend right of `fig`'s panels: an entry per line look (`ax.plot`'s keyword arguments, with a label),
    then a grey one per line style in `styles` (value → line style)."""
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], **look) for look in looks]
    handles += [Line2D([], [], color="0.3", ls=ls, label=label(kind)) for kind, ls in styles.items()]
    fig.legend(handles=handles, loc="outside right upper", fontsize=8)


def _check_sweep(frame, ys, *, x, hue, style, facet, across, legend) -> None:
    """ValueError for `facet_sweep`'s arguments that do not go together, or columns `frame` lacks."""
    if facet is not None and len(ys) != 1:
        raise ValueError(f"y: expected one column when faceting by {facet!r}, got {ys}")
    if not (legend is None or legend == "figure" or isinstance(legend, dict)):
        raise ValueError(f"legend: expected keyword arguments (a dict), 'figure' or None, got {legend!r}")
    require_columns(frame, [c for c in (x, hue, style, facet, across, *ys) if c is not None])
    if across is not None and facet is None:
        raise ValueError(f"across: expected a facet to go with {across!r}, got facet=None")


def _each(value, i):
    """The `i`th of a per-panel list (or tuple), or `value` itself when it is one value for every panel."""
    return value[i] if isinstance(value, (list, tuple)) else value


def _x_labels_below(axes, n: int, xlabel: str) -> None:
    """Hide the panels of `axes` past the first `n`; the lowest shown panel of each column carries the x label and
    its tick labels."""
    rows, cols = axes.shape
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    for col in range(cols):
        bottom = axes[max(r for r in range(rows) if r * cols + col < n), col]
        bottom.set_xlabel(xlabel)
        bottom.xaxis.set_tick_params(labelbottom=True)


def size_sweep(frame, half=None, *, hue: str = "mechanism", small: int = 1 << 20, time: str = "time_median_us",
               panel_size: tuple[float, float] = (5.0, 4.0)):
    """Copies by message size (a transfer study's frame: route, `hue`, bytes, bandwidth_GBps, `time`) as small
    multiples, two panels a row; returns the figure. One bandwidth panel per route (linear GB/s from 0, each on
    its own scale, so a slow route is not flattened under a fast one), then one panel of the time per copy of
    messages up to `small` bytes (linear µs from 0: the fixed cost of a small copy, which a log axis over the whole
    sweep hides in one line), every route in it, a line style per route when there are several; it spans its row when it is alone
    there. Each `hue` value drawn as `line_look`. `half` (rows of route, `hue`, half_bytes, half_GBps, as
    `pkit.experiments.hierarchy.half_bandwidth_point` gives) marks n½ on each curve with a ◆ and gives it in the
    legend.

    Example:
        >>> import matplotlib; matplotlib.use("Agg")
        >>> import pandas as pd
        >>> df = pd.DataFrame({"route": "GPU0 → GPU1", "mechanism": ["ce"] * 3 + ["sm_pull"] * 3,
        ...                    "bytes": [1 << 12, 1 << 20, 1 << 30] * 2, "bandwidth_GBps": [1, 200, 400, 1, 190, 380],
        ...                    "time_median_us": [5.0, 5.2, 2700, 5.5, 5.6, 2800]})
        >>> half = pd.DataFrame({"route": ["GPU0 → GPU1"] * 2, "mechanism": ["ce", "sm_pull"],
        ...                      "half_bytes": [1 << 20, 1 << 21], "half_GBps": [200, 190]})
        >>> fig = size_sweep(df, half)
        >>> [ax.get_title() for ax in fig.axes]
        ['GPU0 → GPU1: bandwidth', 'time per copy up to 1 MiB']
        >>> [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
        ['copy engine (n½ 1 MiB)', 'SM pull (n½ 2 MiB)']
    """
    require_columns(frame, ("route", hue, "bytes", "bandwidth_GBps", time))
    routes = list(dict.fromkeys(frame["route"]))
    rows = len(routes) // 2 + 1  # two panels a row, the time panel last
    fig, axes = subplots(rows, 2, figsize=(panel_size[0] * 2, panel_size[1] * rows), squeeze=False)
    for ax, route in zip(axes.flat, routes):
        _bandwidth_panel(ax, frame[frame["route"] == route], route, hue,
                         half[half["route"] == route].set_index(hue) if half is not None else None)
    if len(routes) % 2:
        ax = axes.flat[len(routes)]
    else:  # alone in the last row: one panel across it
        grid = axes[-1, 0].get_gridspec()
        for extra in axes[-1]:
            extra.remove()
        ax = fig.add_subplot(grid[-1, :])
    _small_times_panel(ax, frame[frame["bytes"] <= small], routes, hue, time, small)
    return fig


def _bandwidth_panel(ax, here, route: str, hue: str, marks) -> None:
    """`size_sweep`'s panel of one route: bandwidth by message size, a line per `hue` value, n½ marked by `marks`."""
    for name, g in here.groupby(hue, sort=True):
        style = line_look(name)
        if marks is not None and name in marks.index:
            mark = marks.loc[name]
            style["label"] += f" (n½ {byte_label_fraction(mark['half_bytes'])})"
            ax.plot([mark["half_bytes"]], [mark["half_GBps"]], marker="D", ms=8, color=style["color"],
                    mec="black", ls="none", zorder=3)
        g = g.sort_values("bytes")
        ax.plot(g["bytes"], g["bandwidth_GBps"], **style)
    size_axis(ax, here["bytes"])
    ax.set(title=f"{route}: bandwidth", xlabel="message size", ylabel="bandwidth (GB/s)", ylim=(0, None))
    ax.legend(loc="upper left", fontsize=8)


def _small_times_panel(ax, shown, routes, hue: str, time: str, small: int) -> None:
    """`size_sweep`'s last panel: the time per copy of the messages `shown`, every route, a line style per route."""
    dashes = dict(zip(routes, LINE_STYLES))
    for (route, name), g in shown.groupby(["route", hue], sort=False):
        style = {**line_look(name), **({"ls": dashes[route]} if len(routes) > 1 else {})}
        ax.plot(g.sort_values("bytes")["bytes"], g.sort_values("bytes")[time], **{**style, "label": None})
    if len(routes) > 1:
        from matplotlib.lines import Line2D

        ax.legend(handles=[Line2D([], [], color="0.3", ls=ls, label=r) for r, ls in dashes.items()], fontsize=8,
                  loc="upper left")
    size_axis(ax, shown["bytes"], every=2)
    ax.set(title=f"time per copy up to {byte_label(small)}", xlabel="message size", ylabel="time per copy (µs)",
           ylim=(0, None))


def grouped_bars(ax, values, colors: dict, *, texts=None, texts_at: str = "top", missing: str = "not reported",
                 width: float = 0.8) -> dict:
    """`values` (a DataFrame: a group of bars per row, one bar per column, NaN where there is no value) as grouped
    bars on `ax`, a column's bars in its colour (`colors`: column → colour) and labelled with the column's name for
    a legend. A NaN draws no bar, only `missing` in small italic on the baseline: a missing value never gets a
    height. `texts`: a same-shaped frame of texts to write on the bars (default none): above each bar (`texts_at`
    'top'), or in white inside it at its foot ('base': the space above a bar stays free for marks drawn there). The
    groups' names become the x tick labels. Returns {(row, column): the bar's x}.

    Example:
        >>> import matplotlib; matplotlib.use("Agg")
        >>> import pandas as pd
        >>> from pkit.figures import BLUE, ORANGE
        >>> fig, ax = subplots()
        >>> where = grouped_bars(ax, pd.DataFrame({"a": [0.5, 0.4], "b": [0.3, None]}, index=["x", "y"]),
        ...                      {"a": BLUE, "b": ORANGE})
        >>> len(ax.patches), [t.get_text() for t in ax.texts], where[("y", "b")]
        (3, ['not reported'], 1.2)
    """
    if texts_at not in ("top", "base"):
        raise ValueError(f"texts_at: expected 'top' or 'base', got {texts_at!r}")
    m = len(values.columns)
    where = {}
    for j, column in enumerate(values.columns):
        for i, (row, value) in enumerate(values[column].items()):
            x = round(i + (j - (m - 1) / 2) * width / m, 6)
            where[(row, column)] = x
            if value != value:  # NaN: no bar
                ax.annotate(missing, (x, 0), xytext=(0, 3), textcoords="offset points", ha="center",
                            va="bottom", fontsize=8, style="italic", color="#555555")
                continue
            ax.bar(x, value, width / m * 0.95, color=colors[column], label=str(column) if i == 0 else None)
            if texts is not None:
                at_base = {"va": "bottom", "color": "white", "fontweight": "bold"} if texts_at == "base" else {}
                ax.annotate(texts.loc[row, column], (x, 0 if at_base else value), xytext=(0, 3),
                            textcoords="offset points", ha="center", fontsize=9, **at_base)
    ax.set_xticks(range(len(values)), [str(r) for r in values.index])
    ax.set_xlim(-0.5, len(values) - 0.5)  # every group whole, a missing bar's place too
    ax.grid(axis="x", visible=False)
    return where


def require_columns(frame, columns) -> None:
    """ValueError naming the `columns` that `frame` lacks."""
    missing = sorted(set(columns) - set(frame.columns))
    if missing:
        raise ValueError(f"frame: missing columns {missing}")
