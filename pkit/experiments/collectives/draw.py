"""Notebook 04's figures: bus bandwidth (`plot_busbw`), speedup over NCCL (`plot_speedup`, each mechanism's
fastest algorithm: `best_per_mechanism`) and small all-reduce latency (`plot_latency`), from
`pkit.experiments.collectives`' frames.

Example:
    >>> import matplotlib; matplotlib.use("Agg")
    >>> from pkit import results
    >>> run = results.load("collectives_pkit_nccl", "h200x2-nv18")
    >>> len(plot_busbw(run.frame, run.provenance).axes)
    4
"""
from __future__ import annotations

import pandas as pd

from ... import figures
from ...ops.collective_ops import COLLECTIVES
from . import latency_floors, speedups

SIZE_NOTE = ("S, as nccl-tests counts it: the whole buffer per GPU (all-reduce, all-to-all), the gathered output "
             "(all-gather), the scattered input (reduce-scatter).")


def _timed(provenance: dict) -> str:
    """How each point of a sweep was timed, in words for a caption."""
    return (f"median of {provenance.get('parameters', {}).get('reps', 'the')} calls, each timed between its own pair "
            "of events")


def _size_axes(fig, sizes) -> None:
    """Every panel of `fig`: a byte-size axis over `sizes`, a tick every two powers of two, labels tilted."""
    for ax in fig.axes:
        figures.size_axis(ax, sizes, every=2)
        ax.tick_params(axis="x", labelrotation=30)


def plot_busbw(frame: pd.DataFrame, provenance: dict, dtype: str = "bfloat16"):
    """busbw (GB/s) by message size of one dtype's rows, a panel per op and a line per implementation. Returns the
    figure.

    Example:
        >>> import matplotlib; matplotlib.use("Agg")
        >>> df = pd.DataFrame({"implementation": ["nccl", "pkit_sm"] * 2, "op": ["all_gather"] * 4,
        ...                    "dtype": ["bfloat16"] * 4, "bytes": [1 << 16] * 2 + [1 << 20] * 2,
        ...                    "busbw_GBps": [3.6, 4.2, 60.0, 70.0]})
        >>> [ax.get_title() for ax in plot_busbw(df, {"machine": "m", "gpus": ["G"] * 2}).axes]
        ['all-gather (bf16)']
    """
    fig = figures.facet_sweep(frame[frame["dtype"] == dtype], "busbw_GBps", facet="op",
                              title=f"{{}} ({figures.label(dtype)})",
                              ylabel="busbw (GB/s)", xlabel="message size S (bytes, nccl-tests' S)", legend="figure")
    _size_axes(fig, frame["bytes"])
    figures.suptitle(fig, "Bus bandwidth: pkit's collectives beside NCCL and torch", provenance)
    figures.caption(fig, "busbw: algbw × 2(n−1)/n for all-reduce, × (n−1)/n for the other ops, with n = 2 GPUs and "
                         f"algbw = S / time ({_timed(provenance)}); it is comparable with one GPU's link bandwidth "
                         f"across ops. {SIZE_NOTE}")
    return fig


def best_per_mechanism(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` (`speedups`' rows) less every implementation slower than another of the same mechanism at the same
    op, dtype and size, each row's `mechanism` being its implementation's name less a registered algorithm
    (`pkit.ops.collective_ops`: pkit_sm_one_shot → pkit_sm, torch_symm_two_shot → torch_symm).

    Example:
        >>> df = pd.DataFrame({"implementation": ["pkit_sm_one_shot", "pkit_sm_two_shot", "pkit_ll"],
        ...                    "op": "all_reduce", "dtype": "bfloat16", "bytes": 1 << 20, "speedup": [1.1, 1.3, 0.9]})
        >>> best_per_mechanism(df)[["mechanism", "implementation"]].values.tolist()
        [['pkit_ll', 'pkit_ll'], ['pkit_sm', 'pkit_sm_two_shot']]
    """
    algorithms = sorted({a for op in COLLECTIVES.values() for names in op.algorithms.values() for a in names})
    ours = frame.reset_index(drop=True)
    ours = ours.assign(mechanism=ours["implementation"].str.replace(f"_({'|'.join(algorithms)})$", "", regex=True))
    best = ours.groupby(["op", "dtype", "bytes", "mechanism"], sort=True)["speedup"].idxmax()
    return ours.loc[best.to_numpy()].reset_index(drop=True)


def plot_speedup(frame: pd.DataFrame, provenance: dict, baseline: str = "nccl"):
    """Each mechanism's speedup over `baseline` (`speedups`) by message size, its fastest algorithm at each size
    (`best_per_mechanism`): a row of panels per op, a column per dtype (rows share their y axis), a line per
    mechanism, a dashed line at 1×. Returns the figure.

    Example:
        >>> import matplotlib; matplotlib.use("Agg")
        >>> df = pd.DataFrame({"implementation": ["nccl", "pkit_ll"] * 2, "op": ["all_gather"] * 4,
        ...                    "dtype": ["bfloat16"] * 2 + ["float32"] * 2, "bytes": [1 << 16] * 4,
        ...                    "time_median_us": [9.2, 7.8, 9.5, 8.0]})
        >>> [ax.get_title() for ax in plot_speedup(df, {"machine": "m", "gpus": ["G"] * 2}).axes]
        ['all-gather (bf16)', 'all-gather (fp32)']
    """
    sp = speedups(frame, baseline)
    best = best_per_mechanism(sp[sp["implementation"] != baseline])
    fig = figures.facet_sweep(best, "speedup", facet="op", across="dtype", hue="mechanism", panel_size=(5.0, 3.0),
                              ylabel=f"speedup over {figures.label(baseline)} (×)",
                              xlabel="message size S (bytes, nccl-tests' S)", legend="figure")
    for ax in fig.axes:
        ax.axhline(1.0, color="0.4", ls="--", lw=1)
    _size_axes(fig, sp["bytes"])
    figures.suptitle(fig, f"Speedup over {figures.label(baseline)}, same op, dtype and size", provenance)
    figures.caption(fig, f"Speedup: {figures.label(baseline)}'s time over the implementation's, both the "
                         f"{_timed(provenance)}, in the same run; above the dashed line (1×) faster. A line per "
                         "mechanism, at each size its fastest algorithm (pkit SM: one-shot or two-shot where the op "
                         "has both; torch symm. memory: the same). A row per op, a column per dtype. "
                         f"{SIZE_NOTE}")
    return fig


def plot_latency(latency: pd.DataFrame, provenance: dict):
    """A `latency_sweep` frame (with the torch baselines') as time per call (µs, from 0) by message size, a line
    per implementation, with half of NCCL's time (the target) and the empty kernel's floor (`latency_floors`).
    Returns the figure.

    Example:
        >>> import matplotlib; matplotlib.use("Agg")
        >>> from pkit import results
        >>> run = results.load("collectives_latency", "h200x2-nv18")
        >>> [line.get_label() for line in plot_latency(run.frame, run.provenance).axes[0].lines][-2:]
        ['NCCL / 2 (target)', 'empty kernel on both GPUs']
    """
    curves = latency[latency["implementation"] != "empty_kernel"]
    nccl = curves[curves["implementation"] == "nccl"].set_index("bytes")["time_median_us"]
    fig = figures.facet_sweep(curves, "time_median_us", panel_size=(7.0, 4.2), ylabel="time per call (µs)",
                              xlabel="message size S (bytes: the whole buffer per GPU)", title=[""])
    ax = fig.axes[0]
    ax.plot(nccl.index, nccl / 2, color="0.4", ls=(0, (4, 2)), lw=1, label="NCCL / 2 (target)")
    ax.axhline(latency_floors(latency).loc["empty_kernel", "time_us"], color="0.3", ls=":", lw=1,
               label="empty kernel on both GPUs")
    figures.size_axis(ax, curves["bytes"])
    ax.set_ylim(0, None)
    ax.legend(fontsize=7.5, ncol=2, loc="upper left")
    per = provenance.get("parameters", {})
    figures.suptitle(fig, "Small all-reduce (bf16): time per call", provenance)
    figures.caption(fig, f"Each point: median of {per.get('reps')} samples, each the mean time of "
                         f"{per.get('calls_per_sample')} back-to-back calls (as nccl-tests times). Dashed grey: half "
                         "of NCCL's time, the target; dotted: an empty kernel launched on both GPUs, a floor no "
                         "collective can beat.")
    return fig
