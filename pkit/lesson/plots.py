"""The lesson's figure: the overlap timeline of step 6 as bars, one lane per rank and kind (µs).

Example:
    >>> import matplotlib; matplotlib.use("Agg"); import pandas as pd
    >>> draw_timeline(pd.DataFrame({"rank": [0], "kind": ["copy"], "start_us": [0.0], "end_us": [4.0]})).get_xlabel()
    "time since the rank's first event (µs)"
"""
from __future__ import annotations


def draw_timeline(frame, ax=None):
    """Draw a `pkit.experiments.overlap.timeline` frame (rank, kind, start_us, end_us) as bars: one lane per rank
    and kind, copies in the copy engine's orange, GEMMs in blue; returns the axes.

    >>> import matplotlib; matplotlib.use("Agg"); import pandas as pd
    >>> ax = draw_timeline(pd.DataFrame({"rank": [0, 0], "kind": ["copy", "gemm"], "start_us": [0.0, 5.0],
    ...                                  "end_us": [4.0, 9.0]}))
    >>> [t.get_text() for t in ax.get_yticklabels()]
    ['GPU 0 copy', 'GPU 0 gemm']
    """
    from .. import figures

    missing = {"rank", "kind", "start_us", "end_us"} - set(frame.columns)
    if missing:
        raise ValueError(f"frame: expected timeline's columns, missing {sorted(missing)}")
    lanes = list(frame.groupby(["rank", "kind"]))
    if ax is None:
        _, ax = figures.subplots(figsize=(7.0, 1.0 + 0.5 * len(lanes)))
    colors = {"copy": figures.ORANGE, "gemm": figures.BLUE}
    for i, ((_, kind), rows) in enumerate(lanes):
        ax.broken_barh(list(zip(rows["start_us"], rows["end_us"] - rows["start_us"])), (i - 0.4, 0.8),
                       color=colors.get(kind, figures.GREY))
    ax.set_yticks(range(len(lanes)), [f"GPU {rank} {kind}" for (rank, kind), _ in lanes])
    ax.set_xlabel("time since the rank's first event (µs)")
    ax.grid(axis="y", visible=False)
    return ax
