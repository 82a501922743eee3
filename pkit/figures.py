"""House style for pkit figures and a deterministic `save`.

`save(fig, name)` writes `figures/<name>.png` and `.svg` with no timestamps or tool versions in their
metadata and a fixed SVG id salt, so re-running a notebook in replay mode on the same package versions
rewrites byte-identical files; a notebook shows the PNG written.

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

from .ops.collective_ops import COLLECTIVES as _COLLECTIVES
from .ops.overlap_patterns import PATTERNS as _OVERLAP_PATTERNS
from .ops.overlap_patterns import schedules as _overlap_schedules
from .results import REPO_ROOT, hardware_words
from .vocabulary import DIRECTIONS, FAMILIES, mechanism

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
# Okabe–Ito's colours (distinguishable with the common colour-vision deficiencies) without its yellow, which
# is too pale on white, plus Tol's wine and a mid grey: nine colours, each at least 2:1 against white.
BLUE, ORANGE, GREEN, VERMILLION, PURPLE, SKY = "#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9"
WINE, BLACK, GREY = "#882255", "#000000", "#999999"
HUES = {"blue": BLUE, "orange": ORANGE, "green": GREEN, "vermillion": VERMILLION, "purple": PURPLE, "sky": SKY,
        "wine": WINE, "black": BLACK, "grey": GREY}
"""The palette by name, as registries outside this module name a colour (pkit.ops.overlap_patterns' looks)."""
PALETTE = list(HUES.values())
# Overlap schedules with a look of their own (pkit.ops.overlap_patterns: the registry says how each is drawn; the
# ones named after a transfer mechanism are drawn as that mechanism)
_DRAWN = {name: s for name, s in _overlap_schedules().items() if s.look}

# One colour per name, the same in every figure: transfer mechanisms (pkit.ops.transfers) and collective
# mechanisms (pkit.ops.collectives) by mechanism (the copy engine is always orange, SM/register-level blue);
# collective implementations (pkit.experiments.collectives, torch baselines) with NCCL black and pkit's
# variants in the colour of their mechanism; GEMMs (cuBLAS black like NCCL, the vendor's library); overlap
# schedules (from their registry: the serial NCCL + cuBLAS one black, PyTorch's grey and wine, dashed); mechanisms
# candidates use (pkit.analysis); eval statuses (six of the
# colours that stay furthest apart under simulated colour-vision deficiencies: bars carry no marker). Within each
# such set no two names share a colour; names outside get `colors_for`'s spares.
COLORS = {
    "ce": ORANGE, "sm_push": BLUE, "sm_pull": SKY, "tma_push": GREEN, "tma_pull": PURPLE,
    "sm": BLUE, "ll": VERMILLION, "tma": GREEN, "auto": BLACK,
    "nccl": BLACK, "pkit_sm": BLUE, "pkit_sm_one_shot": SKY, "pkit_sm_two_shot": GREEN, "pkit_ll": VERMILLION,
    "pkit_ce": ORANGE, "torch_nccl": GREY, "torch_symm_one_shot": WINE, "torch_symm_two_shot": PURPLE,
    "empty_kernel": GREY, "pkit_gemm": BLUE, "cublas": BLACK,
    **{name: HUES[s.look.hue] for name, s in _DRAWN.items()},
    "torch_distributed": BLACK, "nvshmem": WINE, "multicast": VERMILLION, "none": GREY, "unknown": PURPLE,
    "compile_error": GREY, "runtime_error": WINE, "timeout": BLACK, "wrong_result": VERMILLION,
    "correct_slower": SKY, "correct_level": ORANGE, "correct_faster": BLUE,
}
# A marker per name as well (a second cue where two colours come close for some readers), and dashed lines for
# baselines that are not NCCL itself (torch's), so a baseline lying on NCCL's curve still shows, and for transfers
# that pull (run on the destination), beside the push of the same mechanism in a shade of the same hue.
MARKERS = {
    "ce": "P", "sm_push": "s", "sm_pull": "D", "tma_push": "^", "tma_pull": "v", "sm": "s", "tma": "^",
    "nccl": "o", "pkit_sm": "s", "pkit_sm_one_shot": "^", "pkit_sm_two_shot": "v", "pkit_ll": "D", "pkit_ce": "P",
    "torch_nccl": "x", "torch_symm_one_shot": "<", "torch_symm_two_shot": ">", "pkit_gemm": "s", "cublas": "o",
    **{name: s.look.marker for name, s in _DRAWN.items()},
}
LINESTYLES = {"torch_nccl": "--", "torch_symm_one_shot": "--", "torch_symm_two_shot": "--", "sm_pull": "--",
              "tma_pull": "--", **{name: "--" for name, s in _DRAWN.items() if s.look.dashed}}

# How figures name pkit's identifiers: transfer mechanisms (pkit.ops.transfers), collective mechanisms
# (pkit.ops.collectives) and implementations (pkit.experiments.collectives, the torch baselines), GEMMs and
# overlap patterns and schedules (their registry, pkit.ops.overlap_patterns), mechanisms found in candidates
# (pkit.analysis), eval statuses, dtypes, collective ops and roofline bounds (pkit.roofline.Floor.bound). Anything
# else is shown as it is spelled.
LABELS = {
    **{f.name: f.label for f in FAMILIES.values()}, "auto": "auto (pkit picks)",
    **{mechanism(f, d): f"{f.upper()} {d}" for f in ("sm", "tma") for d in DIRECTIONS},
    "nccl": "NCCL", "pkit_sm": "pkit SM", "pkit_sm_one_shot": "pkit SM one-shot", "pkit_sm_two_shot": "pkit SM two-shot",
    "pkit_ll": "pkit LL packets", "pkit_ce": "pkit copy engine", "torch_nccl": "torch.distributed (NCCL)",
    "torch_symm_one_shot": "torch symm. memory one-shot", "torch_symm_two_shot": "torch symm. memory two-shot",
    "empty_kernel": "empty kernel", "pkit_gemm": "pkit GEMM", "cublas": "cuBLAS",
    **{name: s.label for name, s in _DRAWN.items()}, **{p.name: p.title for p in _OVERLAP_PATTERNS.values()},
    "torch_distributed": "torch.distributed", "nvshmem": "NVSHMEM", "multicast": "NVLink multicast",
    "none": "none found", "unknown": "unknown",
    "compile_error": "compile error", "runtime_error": "runtime error", "timeout": "timeout",
    "wrong_result": "wrong result", "correct_slower": "correct, slower",
    "correct_level": "correct, level (a tie)", "correct_faster": "correct, faster",
    "bfloat16": "bf16", "float32": "fp32",
    **{op: op.replace("_", "-") for op in _COLLECTIVES},
    "hbm": "HBM", "sync": "latency/sync",
}
LINE_STYLES = ("-", ":", "--", "-.")


def label(name) -> str:
    """The words a figure shows for one of pkit's names (`LABELS`); other names unchanged.

    Example:
        >>> [label(n) for n in ("ce", "sm_push", "bfloat16", "pkit_ll", "torch_nccl", "my_kernel")]
        ['copy engine', 'SM push', 'bf16', 'pkit LL packets', 'torch.distributed (NCCL)', 'my_kernel']
    """
    return LABELS.get(name, str(name))


def colors_for(names) -> dict:
    """{name: colour} for the names a figure draws: each name's fixed colour (`COLORS`), and for names without
    one, the `PALETTE` colours not already taken in this set, in sorted order of the names (colours repeat only
    when a figure draws more names than `PALETTE` has colours).

    Example:
        >>> colors_for(["pkit_ll", "nccl"]) == {"pkit_ll": VERMILLION, "nccl": BLACK}
        True
        >>> colors_for(["shipped", "example", "ce"]) == {"ce": ORANGE, "example": BLUE, "shipped": GREEN}
        True
    """
    import itertools

    names = sorted(set(names), key=str)
    out = {n: COLORS[n] for n in names if n in COLORS}
    spare = itertools.cycle([c for c in PALETTE if c not in out.values()] or PALETTE)  # repeats only past 9 colours
    return {n: out[n] if n in out else next(spare) for n in names}


def marker(name, default: str = "o") -> str:
    """The marker of a name in line plots (`MARKERS`), else `default`."""
    return MARKERS.get(name, default)


def line_look(name, default_marker: str = ".") -> dict:
    """How a line of one of pkit's names is drawn, as keyword arguments of `ax.plot`: its colour (`COLORS`, else
    `colors_for`'s first spare), marker (`MARKERS`, else `default_marker`), line style (`LINESTYLES`, else solid)
    and label (`label`).

    Example:
        >>> line_look("sm_pull") == {"color": SKY, "marker": "D", "ls": "--", "label": "SM pull"}
        True
    """
    return {"color": colors_for([name])[name], "marker": marker(name, default_marker), "ls": LINESTYLES.get(name, "-"),
            "label": label(name)}


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
    _require(frame, ("bytes", "time_median_us", "time_iqr_us"))
    nbytes, median, half = (frame[c].to_numpy(dtype=float) for c in ("bytes", "time_median_us", "time_iqr_us"))
    half = half / 2
    gbps = nbytes / median / 1e3
    return gbps - nbytes / (median + half) / 1e3, nbytes / (median - half) / 1e3 - gbps


def machine(provenance: dict, world_size: int | None = None) -> str:
    """Where recorded numbers were measured, in words for a figure's title: the GPUs, their links, the machine
    slug and the world size (`world_size`, else the provenance's GPU count).

    Example:
        >>> machine({"machine": "h200x2-nv18", "gpus": ["NVIDIA H200"] * 2, "gpu_count": 2,
        ...          "link_matrix": [["X", "NV18"], ["NV18", "X"]]})
        '2× NVIDIA H200, NV18 links (h200x2-nv18), world size 2'
        >>> machine({"machine": "cpu", "gpus": [], "gpu_count": 0}, world_size=2)
        'CPU only, no GPU (cpu), world size 2'
    """
    what = hardware_words(provenance, none="CPU only, no GPU")
    size = world_size if world_size is not None else (provenance.get("gpu_count") or len(provenance.get("gpus") or []))
    return f"{what} ({provenance.get('machine', 'unknown machine')}), world size {size}"


def records_machine(records) -> str:
    """`machine` for `pkit eval` records (dicts with `provenance` and `world_size`), each distinct one once,
    joined by '; '.

    Example:
        >>> prov = {"machine": "cpu", "gpus": [], "gpu_count": 0}
        >>> records_machine([{"provenance": prov, "world_size": 2}] * 3)
        'CPU only, no GPU (cpu), world size 2'
    """
    seen = dict.fromkeys(machine(r.get("provenance") or {}, r.get("world_size")) for r in records)
    return "; ".join(seen) or "no records"


def suptitle(fig, text: str, provenance: dict | None = None, *, world_size: int | None = None,
             note: str | None = None):
    """Title `fig` with `text` and, on a second line, where its numbers come from: `machine(provenance,
    world_size)` for recorded results, else `note` (e.g. 'vendor datasheets, nothing measured'). Returns the
    title's Text.

    Example:
        >>> import matplotlib; matplotlib.use("Agg")
        >>> fig, ax = subplots()
        >>> suptitle(fig, "Peer copy", {"machine": "h200x2-nv18", "gpus": ["NVIDIA H200"] * 2}).get_text()
        'Peer copy\\n2× NVIDIA H200 (h200x2-nv18), world size 2'
    """
    if provenance is None and note is None:
        raise ValueError("provenance or note: expected the recorded provenance, or a note saying where the numbers "
                         "come from (e.g. 'vendor datasheets, nothing measured')")
    import textwrap

    where = machine(provenance, world_size) if provenance is not None else note
    if provenance is not None and note:
        where += f"; {note}"
    width = int(fig.get_figwidth() * 11)  # characters of bold 11-point text per line
    return fig.suptitle("\n".join(textwrap.fill(line, width) for line in (text, where)),
                        fontsize=STYLE["axes.titlesize"], fontweight="bold")


def caption(fig, text: str, width: int | None = None):
    """A caption under `fig` (what the marks, bars and terms mean), wrapped to the figure's width; returns
    its Text. `width`: characters per line (default: about 17 per inch of figure width)."""
    import textwrap

    width = width or int(fig.get_figwidth() * 17)
    lines = [textwrap.fill(part, width) for part in text.split("\n")]
    return fig.supxlabel("\n".join(lines), x=0.01, ha="left", multialignment="left", fontsize=8, color="#333333")


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
    """Write `<root>/<name>.png` and `.svg` deterministically; returns the two paths. In a notebook the cell then
    shows that PNG, the very file written, instead of drawing the figure again (`_show_saved`)."""
    import matplotlib as mpl

    if not isinstance(name, str) or not name or "/" in name or name.startswith("."):
        raise ValueError(f"name: expected a file stem such as 'quickstart_bandwidth', got {name!r}")
    folder = Path(root) if root is not None else figures_root()
    folder.mkdir(parents=True, exist_ok=True)
    png, svg = folder / f"{name}.png", folder / f"{name}.svg"
    with mpl.rc_context({"svg.hashsalt": "pkit"}):
        fig.savefig(png, metadata={"Software": None})
        fig.savefig(svg, metadata={"Date": None, "Creator": None})
    if "inline" in mpl.get_backend():
        _show_saved(fig, png)
    return [png, svg]


def _show_saved(fig, png: Path) -> None:
    """In a notebook (matplotlib's inline backend): show the PNG just written, at the size the inline display
    gives the figure, and close the figure, which the backend would otherwise draw once more after the cell."""
    import matplotlib.pyplot as plt
    from IPython.display import Image, display

    display(Image(data=png.read_bytes(), width=round(fig.get_figwidth() * fig.dpi)))
    plt.close(fig)


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
    from matplotlib.lines import Line2D

    ys = [y] if isinstance(y, str) else list(y)
    if facet is not None and len(ys) != 1:
        raise ValueError(f"y: expected one column when faceting by {facet!r}, got {ys}")
    if not (legend is None or legend == "figure" or isinstance(legend, dict)):
        raise ValueError(f"legend: expected keyword arguments (a dict), 'figure' or None, got {legend!r}")
    columns = [c for c in (x, hue, style, facet, across, *ys) if c is not None]
    missing = sorted(set(columns) - set(frame.columns))
    if missing:
        raise ValueError(f"frame: missing columns {missing}")
    if across is not None and facet is None:
        raise ValueError(f"across: expected a facet to go with {across!r}, got facet=None")
    keys = [facet, across] if across else [facet]
    panels = [(value, group, ys[0]) for value, group in frame.groupby(keys, sort=True)] if facet else \
        [(column, frame, column) for column in ys]
    n = len(panels)
    cols = frame[across].nunique() if across else max(1, min(ncols, n))
    rows = -(-n // cols)
    title = "{} ({})" if across and title == "{}" else title
    hues = sorted(frame[hue].unique(), key=str)
    colors = colors or colors_for(hues)
    styles = dict(zip(sorted(frame[style].unique()), LINE_STYLES)) if style else {}
    fig, axes = subplots(rows, cols, figsize=(panel_size[0] * cols, panel_size[1] * rows), sharex=True,
                         sharey="row" if across else False, squeeze=False)

    def each(value, i):
        return value[i] if isinstance(value, (list, tuple)) else value

    def look(name, kind=None):
        return dict(color=colors.get(name), marker=marker or MARKERS.get(name, "."),
                    ls=styles[kind] if style else LINESTYLES.get(name, "-"))

    for i, (ax, (value, group, column)) in enumerate(zip(axes.flat, panels)):
        for key, g in group.groupby([hue, style] if style else [hue], sort=True):
            name, kind = key[0], (key[1] if style else None)
            g = g.sort_values(x)
            ax.plot(g[x], g[column], **look(name, kind), label=label(name) + (f" ({label(kind)})" if style else ""))
        values = value if isinstance(value, tuple) else (value,)
        ax.set(xscale=xscale, yscale=each(yscale, i), ylabel=each(ylabel, i) or column,
               title=each(title, i) if isinstance(title, (list, tuple)) else title.format(*map(label, values)))
        if isinstance(legend, dict):
            ax.legend(**legend)
    if legend == "figure":
        handles = [Line2D([], [], **{**look(name, min(styles) if style else None), "ls": "-" if style else
                                     LINESTYLES.get(name, "-")}, label=label(name)) for name in hues]
        handles += [Line2D([], [], color="0.3", ls=ls, label=label(kind)) for kind, ls in styles.items()]
        fig.legend(handles=handles, loc="outside right upper", fontsize=8)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    for col in range(cols):  # the lowest panel of each column carries the x label and tick labels
        bottom = axes[max(r for r in range(rows) if r * cols + col < n), col]
        bottom.set_xlabel(xlabel)
        bottom.xaxis.set_tick_params(labelbottom=True)
    return fig


def size_sweep(frame, half=None, *, hue: str = "mechanism", small: int = 1 << 20, time: str = "time_median_us",
               panel_size: tuple[float, float] = (5.0, 4.0)):
    """Copies by message size (a transfer study's frame: route, `hue`, bytes, bandwidth_GBps, `time`) as small
    multiples; returns the figure. One bandwidth panel per route (linear GB/s from 0, each on its own scale, so a
    slow route is not flattened under a fast one), then one panel of the time per copy of messages up to `small`
    bytes (linear µs from 0: the fixed cost of a small copy, which a log axis over the whole sweep hides in one
    line), every route in it, a line style per route when there are several. Each `hue` value drawn as
    `line_look`. `half` (rows of route, `hue`, half_bytes, half_GBps, as
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
    _require(frame, ("route", hue, "bytes", "bandwidth_GBps", time))
    routes = list(dict.fromkeys(frame["route"]))
    n = len(routes) + 1
    cols = n if n <= 3 else 2
    rows = -(-n // cols)
    fig, axes = subplots(rows, cols, figsize=(panel_size[0] * cols, panel_size[1] * rows), squeeze=False)
    for ax, route in zip(axes.flat, routes):
        here = frame[frame["route"] == route]
        marks = half[half["route"] == route].set_index(hue) if half is not None else None
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
    ax = axes.flat[len(routes)]
    shown = frame[frame["bytes"] <= small]
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
    for extra in axes.flat[n:]:
        extra.set_visible(False)
    return fig


def byte_label_fraction(nbytes: float) -> str:
    """A byte count that need not be a power of two, to two significant digits in the largest unit ≥ 1.

    Example:
        >>> [byte_label_fraction(n) for n in (2.3 * 2**20, 262144, 700)]
        ['2.3 MiB', '256 KiB', '700 B']
    """
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if nbytes >= 1 << shift:
            value = nbytes / (1 << shift)
            return f"{value:.2g} {unit}" if value < 100 else f"{value:.0f} {unit}"
    return f"{nbytes:.3g} B"


def grouped_bars(ax, values, colors: dict, *, texts=None, missing: str = "not reported", width: float = 0.8) -> dict:
    """`values` (a DataFrame: a group of bars per row, one bar per column, NaN where there is no value) as grouped
    bars on `ax`, a column's bars in its colour (`colors`: column → colour) and labelled with the column's name for
    a legend. A NaN draws no bar, only `missing` in small italic on the baseline: a missing value never gets a
    height. `texts`: a same-shaped frame of texts to write above the bars (default none). The groups' names become
    the x tick labels. Returns {(row, column): the bar's x}.

    Example:
        >>> import matplotlib; matplotlib.use("Agg")
        >>> import pandas as pd
        >>> fig, ax = subplots()
        >>> where = grouped_bars(ax, pd.DataFrame({"a": [0.5, 0.4], "b": [0.3, None]}, index=["x", "y"]),
        ...                      {"a": BLUE, "b": ORANGE})
        >>> len(ax.patches), [t.get_text() for t in ax.texts], where[("y", "b")]
        (3, ['not reported'], 1.2)
    """
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
                ax.annotate(texts.loc[row, column], (x, value), xytext=(0, 3), textcoords="offset points",
                            ha="center", fontsize=9)
    ax.set_xticks(range(len(values)), [str(r) for r in values.index])
    ax.set_xlim(-0.5, len(values) - 0.5)  # every group whole, a missing bar's place too
    ax.grid(axis="x", visible=False)
    return where


def _require(frame, columns) -> None:
    """ValueError naming the `columns` that `frame` lacks."""
    missing = sorted(set(columns) - set(frame.columns))
    if missing:
        raise ValueError(f"frame: missing columns {missing}")


def _world_size(frame, world_size: int | None) -> int | None:
    """`world_size`, else the frame's one world size (None when it has none or several)."""
    sizes = frame["world_size"].dropna().unique() if "world_size" in frame.columns else []
    return world_size if world_size is not None else (int(sizes[0]) if len(sizes) == 1 else None)


def _problem_axis(ax, problems) -> None:
    """One row per problem on `ax`'s y axis, the first at the top, and a percentage x axis."""
    import numpy as np

    ax.set_yticks(np.arange(len(problems)), list(problems), fontsize=8)
    ax.invert_yaxis()
    ax.xaxis.set_major_formatter(lambda v, _: f"{v:.0%}")


def roofline_fractions(gap, provenance: dict | None = None, *, note: str | None = None, threshold: float = 0.5,
                       world_size: int | None = None):
    """Each problem's fraction of its roofline as a bar (a `pkit.experiments.roofline_gap.gap_table`: problem,
    category, fraction, bound, ceilings), in the table's order, coloured by category, each labelled with its
    bounding term (and, when rows use different ceilings, 'datasheet' where no measured ones were used; else the
    title names the ceilings); a dashed line at `threshold` and the share of problems below it in the title. Rows
    without a fraction are left out (the title counts the rest). Title as `suptitle(provenance, note)`. Returns
    the figure.

    Example:
        >>> import matplotlib; matplotlib.use("Agg")
        >>> import pandas as pd
        >>> gap = pd.DataFrame({"problem": ["a", "b"], "category": ["moe", "fused"], "fraction": [0.2, 0.8],
        ...                     "bound": ["link", "sync"], "ceilings": ["measured", "datasheet"]})
        >>> fig = roofline_fractions(gap, note="synthetic")
        >>> fig._suptitle.get_text().splitlines()[0]
        'PyTorch + NCCL references: 50% of 2 problems below 50% of their roofline'
        >>> [t.get_text() for t in fig.axes[0].texts]
        [' link', ' latency/sync (datasheet)']
    """
    from matplotlib.patches import Patch

    _require(gap, ("problem", "category", "fraction", "bound", "ceilings"))
    shown = gap[gap["fraction"].notna()]
    colours = colors_for(shown["category"])
    mixed = shown["ceilings"].nunique() > 1  # then each bar says which ceilings, else the title does
    fig, ax = subplots(figsize=(7.0, 0.26 * len(shown) + 2.2))
    ax.barh(range(len(shown)), shown["fraction"], color=[colours[c] for c in shown["category"]])
    for i, r in enumerate(shown.itertuples()):
        ax.annotate(f" {label(r.bound)}" + (f" ({r.ceilings})" if mixed and r.ceilings != "measured" else ""),
                    (r.fraction, i), va="center", fontsize=7, color="#333333")
    ax.axvline(threshold, color="0.3", ls="--", lw=1)
    _problem_axis(ax, shown["problem"])
    ax.set(xlabel="fraction of the roofline (roofline time / reference time, %)")
    ax.legend(handles=[Patch(color=colours[c], label=label(c).replace("_", " ")) for c in colours],
              loc="upper right", fontsize=8, title="category (bar label: bounding term)", title_fontsize=8)
    below = float((shown["fraction"] < threshold).mean()) if len(shown) else float("nan")
    which = "" if mixed or shown.empty else f" ({shown['ceilings'].iloc[0]} ceilings)"
    suptitle(fig, f"PyTorch + NCCL references: {below:.0%} of {len(shown)} problems below {threshold:.0%} of their "
                  f"roofline{which}", provenance, world_size=_world_size(gap, world_size), note=note)
    return fig


def roofline_pairs(table, provenance: dict | None = None, *, note: str | None = None, target: float = 0.7,
                   world_size: int | None = None):
    """Per problem, the reference's and pkit's solution's fractions of the same roofline (a
    `pkit.experiments.roofline_gap.solutions_vs_baselines` table: problem, baseline_fraction, pkit_fraction,
    correct), joined by a line, in the table's order; a pkit solution that is not correct is a cross on the
    reference's point. A dashed line at `target`. Returns the figure.

    Example:
        >>> import matplotlib; matplotlib.use("Agg")
        >>> import pandas as pd
        >>> t = pd.DataFrame({"problem": ["a", "b"], "baseline_fraction": [0.3, 0.5],
        ...                   "pkit_fraction": [0.8, float("nan")], "correct": [True, False]})
        >>> fig = roofline_pairs(t, note="synthetic")
        >>> [line.get_label() for line in fig.axes[0].lines][:3]
        ['PyTorch + NCCL reference', 'pkit solution', 'pkit solution not correct']
    """
    import numpy as np

    _require(table, ("problem", "baseline_fraction", "pkit_fraction", "correct"))
    y = np.arange(len(table))
    wrong = ~table["correct"].astype(bool).to_numpy()
    fig, ax = subplots(figsize=(7.0, 0.3 * len(table) + 2.2))
    ax.hlines(y, table["baseline_fraction"], table["pkit_fraction"], color=GREY, lw=1)
    ax.plot(table["baseline_fraction"], y, "o", color=BLACK, label="PyTorch + NCCL reference")
    ax.plot(table["pkit_fraction"], y, "s", color=BLUE, label="pkit solution")
    ax.plot(table["baseline_fraction"][wrong], y[wrong], "x", color=VERMILLION, ms=9, mew=2,
            label="pkit solution not correct")
    ax.axvline(target, color="0.3", ls="--", lw=1, label=f"{target:.0%} of the roofline (target)")
    _problem_axis(ax, table["problem"])
    ax.set(xlabel="fraction of the roofline (roofline time / each one's median time, %)")
    ax.legend(fontsize=8, loc="lower right")
    suptitle(fig, "Fraction of the roofline: PyTorch + NCCL reference vs pkit solution", provenance,
             world_size=_world_size(table, world_size), note=note)
    return fig
