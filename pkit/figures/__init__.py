"""pkit's figures: house style and a deterministic `save`.

`save(fig, name)` writes `figures/<name>.png` and `.svg` with no timestamps or tool versions in their
metadata and a fixed SVG id salt, so re-running a notebook in replay mode on the same package versions
rewrites byte-identical files; a notebook shows the PNG written.

The rest, by job: `pkit.figures.style` (the looks: style, palette, each name's colour, marker and label),
`pkit.figures.titles` (titles that say which machine's results a figure shows), `pkit.figures.plots` (plots
several studies share). Their public names are this module's too; a study's own figures live beside it
(`pkit.experiments.<study>_draw`).

Example:
    >>> import matplotlib, tempfile; matplotlib.use("Agg")
    >>> import pkit.figures as F
    >>> fig, ax = F.subplots()
    >>> _ = ax.plot([1, 2], [3, 4])
    >>> paths = F.save(fig, "doc_example", root=tempfile.mkdtemp())
    >>> sorted(p.suffix for p in paths)
    ['.png', '.svg']
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from ..results import REPO_ROOT
from .plots import bandwidth_spread, facet_sweep, grouped_bars, heatmap, size_axis, size_sweep
from .style import (BLACK, BLUE, COLORS, GREEN, GREY, HUES, LABELS, LINE_STYLES, LINESTYLES, MARKERS, ORANGE,
                    PALETTE, PURPLE, SKY, STYLE, VERMILLION, WINE, apply_style, byte_label, byte_label_fraction,
                    colors_for, label, line_look, marker, subplots)
from .titles import caption, drawn_from, machine, records_machine, suptitle

__all__ = ["BLACK", "BLUE", "COLORS", "GREEN", "GREY", "HUES", "LABELS", "LINE_STYLES", "LINESTYLES", "MARKERS",
           "ORANGE", "PALETTE", "PURPLE", "SKY", "STYLE", "VERMILLION", "WINE", "apply_style", "bandwidth_spread",
           "byte_label", "byte_label_fraction", "caption", "colors_for", "drawn_from", "facet_sweep", "figures_root",
           "grouped_bars", "heatmap", "label", "line_look", "machine", "marker", "records_machine", "save",
           "size_axis", "size_sweep", "subplots", "suptitle"]

LOG_VARIABLE = "PKIT_FIGURES_LOG"
"""The environment variable naming a file to which `save` adds a line per figure written (JSON: the figure's name,
its folder and `drawn_from`): `pkit figures` reads it to say which machine each figure shows."""


def figures_root() -> Path:
    """Where figures go: $PKIT_FIGURES, else `figures/` at the repository root."""
    return Path(os.environ.get("PKIT_FIGURES", REPO_ROOT / "figures"))


def save(fig, name: str, root: str | Path | None = None) -> list[Path]:
    """Write `<root>/<name>.png` and `.svg` deterministically; returns the two paths. In a notebook the cell then
    shows that PNG, the very file written, instead of drawing the figure again (`_show_saved`). Where
    $PKIT_FIGURES_LOG is set, a line there says what was written and which machines' results it shows."""
    import matplotlib as mpl

    if not isinstance(name, str) or not name or "/" in name or name.startswith("."):
        raise ValueError(f"name: expected a file stem such as 'quickstart_bandwidth', got {name!r}")
    folder = Path(root) if root is not None else figures_root()
    folder.mkdir(parents=True, exist_ok=True)
    png, svg = folder / f"{name}.png", folder / f"{name}.svg"
    with mpl.rc_context({"svg.hashsalt": "pkit"}):
        fig.savefig(png, metadata={"Software": None})
        fig.savefig(svg, metadata={"Date": None, "Creator": None})
    if os.environ.get(LOG_VARIABLE):
        with open(os.environ[LOG_VARIABLE], "a") as log:
            log.write(json.dumps({"figure": name, "folder": str(folder), "drawn_from": drawn_from(fig)}) + "\n")
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
