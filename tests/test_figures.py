"""pkit.figures on CPU: the house style (a fixed, colour-blind-safe colour per name, legend words for every recorded
name, titles naming machine and world size, heatmaps that mask empty cells) and the faceted sweep helper."""
import itertools
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from pkit import analysis, figures, results  # noqa: E402
from pkit.experiments import collectives, overlap  # noqa: E402
from pkit.harness.records import STATUSES  # noqa: E402
from pkit.ops import collectives as collective_ops  # noqa: E402
from pkit.ops import transfers  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OPS = list(collective_ops.COLLECTIVES)  # every registered op


def sweep_frame() -> pd.DataFrame:
    rows = [{"op": op, "implementation": impl, "dtype": dtype, "bytes": 1 << p, "busbw_GBps": float(p), "time_us": 1.0}
            for op in OPS for impl in ("nccl", "pkit_ll", "pkit_sm") for dtype in ("bfloat16", "float32")
            for p in (16, 18, 20)]
    return pd.DataFrame(rows)


def recorded_names(column: str, experiments: str = "*") -> set:
    """Every value of `column` in the recorded CSVs under results/ whose name matches `experiments`."""
    names = set()
    for path in sorted((ROOT / "results").glob(f"*/{experiments}.csv")):
        frame = pd.read_csv(path)
        if column in frame.columns:
            names |= set(frame[column].dropna().astype(str))
    return names


IMPLEMENTATIONS = sorted(set(collectives.implementation_names())
                         | recorded_names("implementation", "collectives*") - {"empty_kernel"})
TRANSFER_MECHANISMS = sorted(set(transfers.ALL_MECHANISMS) | recorded_names("mechanism"))
# A transfer figure draws the mechanisms of one kind of route: the peer ones, or those of a one-GPU route.
TRANSFER_SETS = {f"{kind} transfer mechanisms": list(names) for kind, names in transfers.ROUTE_MECHANISMS.items()}
# The sets drawn as colours in one figure: collective implementations (collectives_*), transfer mechanisms
# (quickstart, hierarchy_sizes, mechanisms_*), GEMMs (overlap), eval statuses (llm_mechanisms); LINES: the ones
# drawn as lines with markers.
COLOUR_SETS = {"implementations": IMPLEMENTATIONS, **TRANSFER_SETS,
               "GEMMs": list(overlap.gemm.STUDY_IMPLEMENTATIONS), "statuses": list(STATUSES)}
LINES = {"implementations", *TRANSFER_SETS, "GEMMs"}

# Colour-vision deficiency simulation: Machado, Oliveira and Fernandes (2009), severity 1, on linear RGB.
MACHADO = {
    "protanopia": [[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216], [-0.003882, -0.048116, 1.051998]],
    "deuteranopia": [[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413], [-0.011820, 0.042940, 0.968881]],
    "tritanopia": [[1.255528, -0.076749, -0.178779], [-0.078411, 0.930809, 0.147602], [0.004733, 0.691367, 0.303900]],
    "normal vision": np.eye(3).tolist(),
}


def linear_rgb(hex_colour: str) -> np.ndarray:
    c = np.array([int(hex_colour[i:i + 2], 16) for i in (1, 3, 5)]) / 255
    return np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)


def lab(rgb: np.ndarray) -> np.ndarray:
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]) @ rgb
    f = np.cbrt(np.maximum(xyz / [0.95047, 1.0, 1.08883], 0.008856))
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def delta_e(a: str, b: str, vision: str) -> float:
    """CIE76 colour difference of two colours as seen with `vision`."""
    m = np.asarray(MACHADO[vision])
    return float(np.linalg.norm(lab(np.clip(m @ linear_rgb(a), 0, 1)) - lab(np.clip(m @ linear_rgb(b), 0, 1))))


def contrast_on_white(colour: str) -> float:
    """WCAG contrast ratio of `colour` against a white background."""
    luminance = float(linear_rgb(colour) @ [0.2126, 0.7152, 0.0722])
    return 1.05 / (luminance + 0.05)


def test_label_covers_every_recorded_implementation_and_mechanism():
    names = (set(IMPLEMENTATIONS) | set(TRANSFER_MECHANISMS) | set(collective_ops.COLLECTIVE_MECHANISMS)
             | set(analysis.DETECTED_MECHANISMS) | set(STATUSES) | set(overlap.gemm.STUDY_IMPLEMENTATIONS)
             | recorded_names("implementation") | recorded_names("first") | recorded_names("second"))
    unlabelled = sorted(n for n in names if n not in figures.LABELS)
    assert not unlabelled, f"figures.LABELS lacks {unlabelled}"
    assert not [n for n in names if figures.label(n) == n and "_" in n], "a legend shows a raw identifier"
    assert figures.label("ce") == "copy engine" and figures.label("unknown_thing") == "unknown_thing"
    assert figures.label("nccl") == "NCCL" and figures.label("torch_nccl") == "torch.distributed (NCCL)"
    for name in [n for names in COLOUR_SETS.values() for n in names]:
        assert name in figures.COLORS, f"{name} has no fixed colour"


def test_palette_mapping_is_fixed_whatever_else_is_drawn():
    assert figures.colors_for(["nccl"])["nccl"] == figures.BLACK
    assert figures.colors_for(["ce"])["ce"] == figures.colors_for(TRANSFER_MECHANISMS)["ce"] == figures.ORANGE
    everything = figures.colors_for(IMPLEMENTATIONS)
    for name in IMPLEMENTATIONS:  # a name's colour does not depend on the other names in the figure
        assert figures.colors_for([name, "some_model"])[name] == everything[name] == figures.COLORS[name]
    assert figures.COLORS["pkit_ce"] == figures.COLORS["ce"] and figures.COLORS["pkit_sm"] == figures.COLORS["sm"]
    spare = figures.colors_for(["shipped", "example", "nccl", "pkit_sm"])  # unmapped names take unused colours
    assert spare["example"] != spare["shipped"] and {spare["example"], spare["shipped"]}.isdisjoint(
        {figures.BLACK, figures.BLUE})
    assert figures.colors_for(["b", "a"]) == figures.colors_for(["a", "b", "a"])  # order and repeats do not matter


def test_palette_is_colour_blind_safe_within_each_figure_set():
    assert "#F0E442" not in figures.PALETTE  # Okabe-Ito's yellow: too pale on white
    for colour in set(figures.PALETTE) | set(figures.COLORS.values()):
        assert contrast_on_white(colour) >= 2.0, f"{colour} is low-contrast on white"
    for what, names in COLOUR_SETS.items():
        colours = figures.colors_for(names)
        assert len(set(colours.values())) == len(names), f"{what}: two names share a colour: {colours}"
        if what in LINES:
            markers = [figures.marker(n) for n in names]
            assert len(set(markers)) == len(names), f"{what}: two names share a marker"
        for a, b in itertools.combinations(names, 2):
            closest = min(delta_e(colours[a], colours[b], vision) for vision in MACHADO)
            # colours that come close for some readers must differ in a second cue (lines: marker, style)
            assert closest >= 15 or (what in LINES and figures.marker(a) != figures.marker(b)), (what, a, b, closest)
    assert figures.LINESTYLES["torch_nccl"] != "-"  # NCCL's twin through torch stays visible on NCCL's curve


def test_titles_name_machine_and_world_size_from_a_recorded_frame():
    run = results.load("collectives_pkit_nccl", "h200x2-nv18")
    df = run.frame[run.frame["dtype"] == "bfloat16"]
    fig = figures.facet_sweep(df, "busbw_GBps", facet="op", legend="figure")
    title = figures.suptitle(fig, "Bus bandwidth", run.provenance).get_text()
    gpus = run.provenance["gpus"]
    assert title.splitlines()[0] == "Bus bandwidth"
    assert f"{len(gpus)}× {gpus[0]}" in title and "h200x2-nv18" in title and "NV18" in title
    assert f"world size {run.provenance['gpu_count']}" in title
    assert "world size 1" in figures.suptitle(fig, "one GPU", run.provenance, world_size=1).get_text()
    cpu = figures.records_machine([{"provenance": {"machine": "cpu", "gpus": [], "gpu_count": 0}, "world_size": 2}])
    assert cpu == "CPU only, no GPU (cpu), world size 2"
    assert "datasheets" in figures.suptitle(fig, "Trend", note="vendor datasheets").get_text()
    with pytest.raises(ValueError, match="provenance or note"):
        figures.suptitle(fig, "Where from?")
    legend = fig.legends[0]
    assert [t.get_text() for t in legend.get_texts()] == [figures.label(n) for n in sorted(df["implementation"].unique())]
    caption = figures.caption(fig, "bars: min–max over 20 repetitions " * 10)
    assert caption.get_text().count("\n") >= 1 and "bars: min–max" in caption.get_text()


def test_heatmap_masks_empty_cells_distinctly_from_zero():
    grid = pd.DataFrame([[0.0, np.nan, 0.5], [np.nan, 1.0, 0.25]], index=["all", "moe"], columns=["a", "b", "c"])
    fig, ax = figures.subplots()
    mesh = figures.heatmap(ax, grid, vmin=0, vmax=1, missing="no data", colorbar={"label": "share"})
    values = mesh.get_array()
    assert np.ma.isMaskedArray(values)
    assert np.asarray(np.ma.getmaskarray(values)).reshape(grid.shape).tolist() == np.isnan(grid.to_numpy()).tolist()
    texts = [t.get_text() for t in ax.texts]
    assert texts.count("no data") == 2 and "0%" in texts and texts.count("") == 0
    hatched = [p for p in ax.patches if p.get_hatch()]
    assert sorted((p.get_x(), p.get_y()) for p in hatched) == [(0, 1), (1, 0)]  # (column, row) of the NaN cells
    zero_colour = mesh.cmap(mesh.norm(0.0))
    assert all(not np.allclose(matplotlib.colors.to_rgba(p.get_facecolor()), zero_colour) for p in hatched)
    custom = figures.heatmap(figures.subplots()[1], grid, annot=[["x", "", "y"], ["", "z", "w"]])
    assert [t.get_text() for t in custom.axes.texts][:4] == ["x", "y", "z", "w"]


def test_facet_sweep_draws_a_panel_per_facet_and_a_line_per_hue_and_style():
    df = sweep_frame()
    colors = {"nccl": "#000000", "pkit_ll": "#0072B2", "pkit_sm": "#E69F00"}
    fig = figures.facet_sweep(df[df["dtype"] == "bfloat16"], "busbw_GBps", facet="op", colors=colors,
                              title="{} (bf16)", legend={"fontsize": 8})
    shown = [ax for ax in fig.axes if ax.get_visible()]
    rows = -(-len(OPS) // 2)
    assert len(fig.axes) == 2 * rows and len(shown) == len(OPS)  # rows of 2, a last odd cell hidden
    assert [ax.get_title() for ax in shown] == [f"{figures.label(op)} (bf16)" for op in sorted(OPS)]
    for ax in shown:
        assert [line.get_label() for line in ax.lines] == ["NCCL", "pkit LL packets", "pkit SM"]
        assert [line.get_color() for line in ax.lines] == list(colors.values())
        assert [line.get_marker() for line in ax.lines] == [figures.marker(n) for n in colors]
        assert list(ax.lines[0].get_xdata()) == [1 << 16, 1 << 18, 1 << 20] and ax.get_xscale() == "log"
        assert ax.get_legend() is not None
    lowest = {max(i for i in range(len(OPS)) if i % 2 == column) for column in (0, 1)}
    assert [bool(ax.get_xlabel()) for ax in shown] == [i in lowest for i in range(len(OPS))]  # each column's lowest
    styled = figures.facet_sweep(df, "busbw_GBps", facet="op", style="dtype", legend=None)
    lines = styled.axes[0].lines
    assert len(lines) == 6 and styled.axes[0].get_legend() is None and not styled.legends
    assert [line.get_label() for line in lines[:2]] == ["NCCL (bf16)", "NCCL (fp32)"]
    assert [line.get_linestyle() for line in lines[:2]] == ["-", ":"]
    assert [line.get_color() for line in lines[::2]] == [figures.COLORS[n] for n in ("nccl", "pkit_ll", "pkit_sm")]
    one = figures.facet_sweep(df, "busbw_GBps", facet="op", style="dtype", legend="figure")
    assert [t.get_text() for t in one.legends[0].get_texts()] == ["NCCL", "pkit LL packets", "pkit SM", "bf16", "fp32"]
    assert all(ax.get_legend() is None for ax in one.axes)


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
    with pytest.raises(ValueError, match="legend: expected"):
        figures.facet_sweep(df, "busbw_GBps", facet="op", legend="everywhere")


def test_size_axis_ticks_powers_of_two_in_range():
    fig, ax = figures.subplots()
    ax.plot([4096, 1 << 30], [1, 2])
    figures.size_axis(ax, [4096, 1 << 30])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["4 KiB", "32 KiB", "256 KiB", "2 MiB", "16 MiB",
                                                            "128 MiB", "1 GiB"]


def test_drawn_from_reads_the_machines_a_title_names_and_save_logs_them(tmp_path, monkeypatch):
    """`pkit figures` says which machine each figure shows from what `save` logs: the machines of its title."""
    fig, _ = figures.subplots(figsize=(2.0, 2.0))  # a narrow figure: the title wraps inside the machine's words
    figures.suptitle(fig, "Copies", {"machine": "h200x1", "gpus": ["NVIDIA H200"]},
                     note="links: " + figures.machine({"machine": "h200x2-nv18", "gpus": ["NVIDIA H200"] * 2}))
    assert figures.drawn_from(fig) == ["h200x1", "h200x2-nv18"]
    trend, _ = figures.subplots()
    figures.suptitle(trend, "Growth", note="vendor datasheets, nothing measured")
    assert figures.drawn_from(trend) == [] and figures.drawn_from(figures.subplots()[0]) == []
    log = tmp_path / "figures.jsonl"
    monkeypatch.setenv(figures.LOG_VARIABLE, str(log))
    figures.save(fig, "copies", root=tmp_path)
    figures.save(trend, "trend", root=tmp_path)
    assert [json.loads(line) for line in log.read_text().splitlines()] == [
        {"figure": "copies", "folder": str(tmp_path), "drawn_from": ["h200x1", "h200x2-nv18"]},
        {"figure": "trend", "folder": str(tmp_path), "drawn_from": []}]


def test_captions_fit_the_figure():
    """A caption's longest line, as drawn, stays inside its figure (it once ran past a wide figure's edge)."""
    for width in (5.0, 11.2, 15.0):
        fig, _ = figures.subplots(figsize=(width, 4.0))
        text = figures.caption(fig, "Each point: median over 5 alternating pairs (GEMM alone, GEMM beside the copy) "
                                    "of the rate ratio, bars the quartiles; shapes 8192×2048×8192, bf16. " * 4)
        fig.canvas.draw()
        box = text.get_window_extent()
        assert box.x1 <= fig.bbox.x1, (width, box.x1, fig.bbox.x1)


def test_size_sweep_puts_two_panels_a_row():
    """Two routes: their bandwidth panels side by side, the time panel across the row below (not three in a strip)."""
    rows = [{"route": route, "mechanism": m, "bytes": 1 << p, "bandwidth_GBps": float(p), "time_median_us": 1.0 + p}
            for route in ("GPU0 → GPU0", "CPU → GPU0") for m in ("ce", "sm") for p in range(12, 31, 2)]
    fig = figures.size_sweep(pd.DataFrame(rows))
    width, height = fig.get_size_inches()
    assert height > width / 2  # not a strip
    first, second, time = (ax.get_position() for ax in fig.axes)
    assert first.y0 == pytest.approx(second.y0) and time.y1 < first.y0  # the time panel below the two
    assert time.width > 1.5 * first.width  # across the row
    one = figures.size_sweep(pd.DataFrame([r for r in rows if r["route"] == "CPU → GPU0"]))
    assert len(one.axes) == 2 and one.axes[0].get_position().y0 == pytest.approx(one.axes[1].get_position().y0)


def test_grouped_bars_write_texts_on_top_or_at_the_foot():
    values = pd.DataFrame({"a": [0.5, 0.4]}, index=["x", "y"])
    texts = pd.DataFrame({"a": ["5/10", "4/10"]}, index=["x", "y"])
    for at, ys in (("top", [0.5, 0.4]), ("base", [0, 0])):
        ax = figures.subplots()[1]
        figures.grouped_bars(ax, values, {"a": figures.BLUE}, texts=texts, texts_at=at)
        assert [t.xy[1] for t in ax.texts] == ys and [t.get_text() for t in ax.texts] == ["5/10", "4/10"]
    with pytest.raises(ValueError, match="texts_at: expected 'top' or 'base', got 'middle'"):
        figures.grouped_bars(figures.subplots()[1], values, {"a": figures.BLUE}, texts=texts, texts_at="middle")


def test_speedup_draws_each_mechanism_once_a_panel():
    """A line per mechanism, its fastest algorithm at each size: the recorded sweep's eight implementations of an
    all-reduce, NCCL aside, are five lines."""
    from pkit.experiments.collectives import draw as collectives_draw

    ours, torch = (results.load(e, "h200x2-nv18") for e in ("collectives_pkit_nccl", "collectives_torch"))
    fig = collectives_draw.plot_speedup(pd.concat([ours.frame, torch.frame]), ours.provenance)
    drawn = {ax.get_title(): [line.get_label() for line in ax.lines if not line.get_label().startswith("_")]
             for ax in fig.axes}
    assert max(len(labels) for labels in drawn.values()) <= 5
    assert sorted(drawn["all-reduce (bf16)"]) == sorted(figures.label(n) for n in
                                                         ("pkit_ce", "pkit_ll", "pkit_sm", "torch_nccl", "torch_symm"))
