"""House style for pkit figures and a deterministic `save`.

`save(fig, name)` writes `figures/<name>.png` and `.svg` with no timestamps or tool versions in their
metadata and a fixed SVG id salt, so re-running a notebook in replay mode on the same package versions
rewrites byte-identical files.

Example:
    >>> import matplotlib; matplotlib.use("Agg")
    >>> import pkit.figures as F
    >>> fig, ax = F.subplots()
    >>> _ = ax.plot([1, 2], [3, 4])
    >>> paths = F.save(fig, "doc_example", root="/tmp/pkit-doc-figures")
    >>> sorted(p.suffix for p in paths)
    ['.png', '.svg']
"""
from __future__ import annotations

import os
from pathlib import Path

from .results import REPO_ROOT

STYLE = {
    "figure.figsize": (7.0, 4.2),
    "figure.dpi": 110,
    "savefig.dpi": 150,
    "font.family": "DejaVu Sans",
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.titleweight": "bold",
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linewidth": 0.6,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.prop_cycle": None,  # filled below
    "legend.frameon": False,
    "lines.linewidth": 1.8,
    "lines.markersize": 5,
    "svg.hashsalt": "pkit",
    "svg.fonttype": "path",
    "path.simplify": False,
}
# Okabe–Ito palette (distinguishable with the common colour-vision deficiencies), then grey and Tol's wine.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000", "#999999",
           "#882255"]

# How figures name pkit's identifiers: transfer mechanisms (pkit.ops.transfers), collective mechanisms
# (pkit.ops.collectives), dtypes and collective ops. Anything else is shown as it is spelled.
LABELS = {
    "ce": "copy engine", "sm": "SM (register-level)", "ll": "LL packets",
    "sm_push": "SM push", "sm_pull": "SM pull", "tma_push": "TMA push", "tma_pull": "TMA pull",
    "bfloat16": "bf16", "float32": "fp32",
    "all_reduce": "all-reduce", "all_gather": "all-gather", "reduce_scatter": "reduce-scatter",
    "all_to_all": "all-to-all",
}
LINE_STYLES = ("-", ":", "--", "-.")


def label(name) -> str:
    """The words a figure shows for one of pkit's names (`LABELS`); other names unchanged.

    Example:
        >>> [label(n) for n in ("ce", "sm_push", "bfloat16", "pkit_ll")]
        ['copy engine', 'SM push', 'bf16', 'pkit_ll']
    """
    return LABELS.get(name, str(name))


def apply_style() -> None:
    """Set pkit's matplotlib style for the rest of the session."""
    import matplotlib as mpl
    from cycler import cycler

    mpl.rcParams.update({**STYLE, "axes.prop_cycle": cycler(color=PALETTE)})


def subplots(*args, **kwargs):
    """`plt.subplots` under pkit's style, with a constrained layout."""
    import matplotlib.pyplot as plt

    apply_style()
    kwargs.setdefault("layout", "constrained")
    return plt.subplots(*args, **kwargs)


def figures_root() -> Path:
    """Where figures go: $PKIT_FIGURES, else `figures/` at the repository root."""
    return Path(os.environ.get("PKIT_FIGURES", REPO_ROOT / "figures"))


def save(fig, name: str, root: str | Path | None = None) -> list[Path]:
    """Write `<root>/<name>.png` and `.svg` deterministically; returns the two paths."""
    import matplotlib as mpl

    if not isinstance(name, str) or not name or "/" in name or name.startswith("."):
        raise ValueError(f"name: expected a file stem such as 'quickstart_bandwidth', got {name!r}")
    folder = Path(root) if root is not None else figures_root()
    folder.mkdir(parents=True, exist_ok=True)
    png, svg = folder / f"{name}.png", folder / f"{name}.svg"
    with mpl.rc_context({"svg.hashsalt": "pkit"}):
        fig.savefig(png, metadata={"Software": None})
        fig.savefig(svg, metadata={"Date": None, "Creator": None})
    return [png, svg]


def byte_label(nbytes: int) -> str:
    """A byte count as figures print it: B, KiB, MiB or GiB, whole numbers (meant for powers of two).

    Example:
        >>> [byte_label(n) for n in (512, 4096, 16 << 20, 1 << 30)]
        ['512 B', '4 KiB', '16 MiB', '1 GiB']
    """
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if nbytes >= 1 << shift:
            return f"{int(nbytes) >> shift} {unit}"
    return f"{int(nbytes)} B"


def size_axis(ax, sizes, every: int = 3) -> None:
    """A byte-size x axis on `ax`: log₂ scale, a tick every `every` powers of two from the smallest of `sizes`
    up to the largest, labelled by `byte_label`."""
    import math

    low, high = math.ceil(math.log2(min(sizes))), math.floor(math.log2(max(sizes)))
    ticks = [1 << k for k in range(low, high + 1, every)]
    ax.set_xscale("log", base=2)
    ax.set_xticks(ticks, [byte_label(t) for t in ticks])


def facet_sweep(frame, y, *, facet: str | None = None, x: str = "bytes", hue: str = "implementation",
                style: str | None = None, colors: dict | None = None, title="{}", xlabel: str = "S (bytes)",
                ylabel=None, xscale: str = "log", yscale="linear", marker: str = ".", ncols: int = 2,
                panel_size: tuple[float, float] = (5.5, 3.75), legend: dict | None = None):
    """A sweep drawn as small multiples; returns the figure (its panels are `fig.axes`, in order).

    One panel per value of `facet` (sorted), or, when `y` is a list of columns, one panel per column; in each
    panel one line per value of `hue` (colours from `colors`, default `PALETTE` in sorted order) and of
    `style` (line styles `LINE_STYLES` in sorted order; labels 'hue (style)'), against `x` on an `xscale`
    axis. `title` is a format string for the panel's facet value or column (through `label`), or a list of
    titles; `ylabel` and `yscale` are one value or one per panel (default ylabel: the column). `legend`:
    keyword arguments of every panel's legend, None for none. The x label goes under the bottom panels.

    Example:
        >>> import matplotlib; matplotlib.use("Agg")
        >>> import pandas as pd
        >>> df = pd.DataFrame({"op": ["all_reduce"] * 4 + ["all_gather"] * 4, "bytes": [1, 2] * 4,
        ...                    "implementation": (["nccl"] * 2 + ["pkit_sm"] * 2) * 2, "busbw_GBps": range(8)})
        >>> fig = facet_sweep(df, "busbw_GBps", facet="op", legend={"fontsize": 8})
        >>> [(ax.get_title(), len(ax.lines)) for ax in fig.axes]
        [('all-gather', 2), ('all-reduce', 2)]
    """
    ys = [y] if isinstance(y, str) else list(y)
    if facet is not None and len(ys) != 1:
        raise ValueError(f"y: expected one column when faceting by {facet!r}, got {ys}")
    columns = [c for c in (x, hue, style, facet, *ys) if c is not None]
    missing = sorted(set(columns) - set(frame.columns))
    if missing:
        raise ValueError(f"frame: missing columns {missing}")
    panels = [(value, group, ys[0]) for value, group in frame.groupby(facet, sort=True)] if facet else \
        [(column, frame, column) for column in ys]
    n = len(panels)
    cols = max(1, min(ncols, n))
    rows = -(-n // cols)
    colors = colors or dict(zip(sorted(frame[hue].unique()), PALETTE))
    styles = dict(zip(sorted(frame[style].unique()), LINE_STYLES)) if style else {}
    fig, axes = subplots(rows, cols, figsize=(panel_size[0] * cols, panel_size[1] * rows), sharex=True,
                         squeeze=False)

    def each(value, i):
        return value[i] if isinstance(value, (list, tuple)) else value

    for i, (ax, (value, group, column)) in enumerate(zip(axes.flat, panels)):
        for key, g in group.groupby([hue, style] if style else [hue], sort=True):
            name, kind = key[0], (key[1] if style else None)
            g = g.sort_values(x)
            ax.plot(g[x], g[column], marker=marker, color=colors.get(name), ls=styles.get(kind, "-"),
                    label=label(name) + (f" ({label(kind)})" if style else ""))
        ax.set(xscale=xscale, yscale=each(yscale, i), ylabel=each(ylabel, i) or column,
               title=each(title, i) if isinstance(title, (list, tuple)) else title.format(label(value)))
        if legend is not None:
            ax.legend(**legend)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    for col in range(cols):  # the lowest panel of each column carries the x label and tick labels
        bottom = axes[max(r for r in range(rows) if r * cols + col < n), col]
        bottom.set_xlabel(xlabel)
        bottom.xaxis.set_tick_params(labelbottom=True)
    return fig
