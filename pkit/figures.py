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
