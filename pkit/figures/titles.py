"""Titles that say where a figure's numbers come from: `suptitle` puts the machine the recorded results were
measured on (`machine`) or a note (datasheets, published numbers) under the figure's title, `caption` says what the
marks mean, and `drawn_from` reads back from a titled figure which machines' results it shows.

Example:
    >>> import matplotlib; matplotlib.use("Agg")
    >>> from pkit.figures import subplots
    >>> fig, ax = subplots()
    >>> _ = suptitle(fig, "Peer copy", {"machine": "h200x1", "gpus": ["NVIDIA H200"]})
    >>> drawn_from(fig)
    ['h200x1']
"""
from __future__ import annotations

import re
import textwrap

from ..results import hardware_words
from .style import STYLE

_WHERE = re.compile(r"\(([^()\s]+)\),\s+world size")  # the slug in `machine`'s words, wherever a title wraps them


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
        >>> from pkit.figures import subplots
        >>> fig, ax = subplots()
        >>> suptitle(fig, "Peer copy", {"machine": "h200x2-nv18", "gpus": ["NVIDIA H200"] * 2}).get_text()
        'Peer copy\\n2× NVIDIA H200 (h200x2-nv18), world size 2'
    """
    if provenance is None and note is None:
        raise ValueError("provenance or note: expected the recorded provenance, or a note saying where the numbers "
                         "come from (e.g. 'vendor datasheets, nothing measured')")
    where = machine(provenance, world_size) if provenance is not None else note
    if provenance is not None and note:
        where += f"; {note}"
    width = int(fig.get_figwidth() * 11)  # characters of bold 11-point text per line
    return fig.suptitle("\n".join(balanced_fill(line, width) for line in (text, where)),
                        fontsize=STYLE["axes.titlesize"], fontweight="bold")


def balanced_fill(text: str, width: int) -> str:
    """`text` wrapped in as few lines of at most `width` characters as textwrap gives, but of even lengths: no last
    line holding a lone word, no hyphenated word cut at its hyphen.

    Example:
        >>> balanced_fill("one two three four five six seven", 30)
        'one two three four\\nfive six seven'
    """
    def wrap(w: int) -> list[str]:  # hyphenated words stay whole ("per-tensor")
        return textwrap.wrap(text, w, break_on_hyphens=False)

    first = wrap(width)
    if len(first) < 2:
        return "\n".join(first)
    return "\n".join(next(wrapped for w in range(-(-len(text) // len(first)), width + 1)
                          if len(wrapped := wrap(w)) <= len(first)))


def caption(fig, text: str, width: int | None = None):
    """A caption under `fig` (what the marks, bars and terms mean), wrapped to the figure's width; returns
    its Text. `width`: characters per line (default: 15 per inch of figure width, room for 8-point text whose
    letters run wider than average)."""
    width = width or int(fig.get_figwidth() * 15)
    lines = [textwrap.fill(part, width) for part in text.split("\n")]
    return fig.supxlabel("\n".join(lines), x=0.01, ha="left", multialignment="left", fontsize=8, color="#333333")


def drawn_from(fig) -> list[str]:
    """The machines (slugs) whose recorded results `fig` shows, as its `suptitle` names them (`machine`'s words),
    in sorted order; [] for a figure that shows none (datasheets, published numbers) or has no title.

    Example:
        >>> import matplotlib; matplotlib.use("Agg")
        >>> from pkit.figures import subplots
        >>> fig, ax = subplots()
        >>> _ = suptitle(fig, "Growth", note="vendor datasheets, nothing measured")
        >>> drawn_from(fig)
        []
    """
    title = fig._suptitle.get_text() if fig._suptitle is not None else ""
    return sorted(set(_WHERE.findall(title)))
