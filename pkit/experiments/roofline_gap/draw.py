"""Notebook 06's figures: each PyTorch + NCCL reference's fraction of its communication-aware roofline
(`roofline_fractions`), and the reference beside pkit's solution on the same roofline (`roofline_pairs`), from
`pkit.experiments.roofline_gap`'s tables."""
from __future__ import annotations

from ...figures import BLACK, BLUE, GREY, VERMILLION, colors_for, label, subplots, suptitle
from ...figures.plots import require_columns


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

    require_columns(gap, ("problem", "category", "fraction", "bound", "ceilings"))
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

    require_columns(table, ("problem", "baseline_fraction", "pkit_fraction", "correct"))
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
