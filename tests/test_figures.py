"""pkit.figures on CPU: the faceted sweep helper draws one panel per facet and one line per implementation."""
import matplotlib

matplotlib.use("Agg")

import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from pkit import figures  # noqa: E402

OPS = ["all_gather", "all_reduce", "all_to_all", "reduce_scatter", "broadcast"]


def sweep_frame() -> pd.DataFrame:
    rows = [{"op": op, "implementation": impl, "dtype": dtype, "bytes": 1 << p, "busbw_GBps": float(p), "time_us": 1.0}
            for op in OPS for impl in ("nccl", "pkit_ll", "pkit_sm") for dtype in ("bfloat16", "float32")
            for p in (16, 18, 20)]
    return pd.DataFrame(rows)


def test_facet_sweep_draws_a_panel_per_facet_and_a_line_per_hue_and_style():
    df = sweep_frame()
    colors = {"nccl": "#000000", "pkit_ll": "#0072B2", "pkit_sm": "#E69F00"}
    fig = figures.facet_sweep(df[df["dtype"] == "bfloat16"], "busbw_GBps", facet="op", colors=colors,
                              title="{} (bf16)", legend={"fontsize": 8})
    shown = [ax for ax in fig.axes if ax.get_visible()]
    assert len(fig.axes) == 6 and len(shown) == 5  # 3 rows of 2, the sixth cell hidden
    assert [ax.get_title() for ax in shown] == ["all-gather (bf16)", "all-reduce (bf16)", "all-to-all (bf16)",
                                                "broadcast (bf16)", "reduce-scatter (bf16)"]
    for ax in shown:
        assert [line.get_label() for line in ax.lines] == ["nccl", "pkit_ll", "pkit_sm"]
        assert [line.get_color() for line in ax.lines] == list(colors.values())
        assert list(ax.lines[0].get_xdata()) == [1 << 16, 1 << 18, 1 << 20] and ax.get_xscale() == "log"
        assert ax.get_legend() is not None
    assert [bool(ax.get_xlabel()) for ax in shown] == [False, False, False, True, True]  # the lowest of each column
    styled = figures.facet_sweep(df, "busbw_GBps", facet="op", style="dtype", legend=None)
    lines = styled.axes[0].lines
    assert len(lines) == 6 and styled.axes[0].get_legend() is None
    assert [line.get_label() for line in lines[:2]] == ["nccl (bf16)", "nccl (fp32)"]
    assert [line.get_linestyle() for line in lines[:2]] == ["-", ":"]


def test_facet_sweep_draws_one_panel_per_column_when_given_several():
    fig = figures.facet_sweep(sweep_frame(), ["busbw_GBps", "time_us"], hue="implementation", yscale=["linear", "log"],
                              ylabel=["busbw (GB/s)", None], title=["bandwidth", "time"])
    assert [(ax.get_title(), ax.get_ylabel(), ax.get_yscale(), len(ax.lines)) for ax in fig.axes] == [
        ("bandwidth", "busbw (GB/s)", "linear", 3), ("time", "time_us", "log", 3)]


def test_facet_sweep_argument_errors():
    df = sweep_frame()
    with pytest.raises(ValueError, match=r"frame: missing columns \['speedup'\]"):
        figures.facet_sweep(df, "speedup", facet="op")
    with pytest.raises(ValueError, match="y: expected one column when faceting"):
        figures.facet_sweep(df, ["busbw_GBps", "time_us"], facet="op")


def test_size_axis_ticks_powers_of_two_in_range():
    fig, ax = figures.subplots()
    ax.plot([4096, 1 << 30], [1, 2])
    figures.size_axis(ax, [4096, 1 << 30])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["4 KiB", "32 KiB", "256 KiB", "2 MiB", "16 MiB",
                                                            "128 MiB", "1 GiB"]
    assert figures.label("ce") == "copy engine" and figures.label("unknown_thing") == "unknown_thing"
