"""The transfer explorer: recorded peer-copy results of one machine in one frame (`transfer_frame`), read at the
nearest recorded point (`transfer_lookup`), as text (`transfer_html`) and a chart (`transfer_figure`), behind
`transfer_explorer`'s controls."""
from __future__ import annotations

import html
import math
from pathlib import Path
from typing import Iterable, Sequence

import pandas as pd

from .. import figures, results, studies
from ..errors import PkitError
from ..ops.transfers import with_route
from .common import box, check_positive_int, png, size_options


def _as_int(value):
    """`value` as a Python int when it is an integer of any kind (NumPy's included), else unchanged."""
    import numbers

    return int(value) if isinstance(value, numbers.Integral) and not isinstance(value, bool) else value


TRANSFER_STUDIES = {e: studies.for_experiment(e)[1].description for e in studies.get("explorers").reads}
"""Recorded results the transfer explorer reads (the explorers study's `reads`): experiment → what it measured."""

KERNEL_SETS = {"pkit.ops.transfers": ("mechanisms_size_sweep", "mechanisms_sm_sweep"),
               "00_quickstart kernel": ("quickstart",)}
"""Which studies measured the same kernels: the explorer reads one set at a time."""

_TRANSFER_COLUMNS = ["study", "route", "mechanism", "sms", "bytes", "bandwidth_GBps", "time_median_us", "cv"]


def transfer_frame(machine: str = studies.FIGURES_MACHINE, studies: Iterable[str] = tuple(TRANSFER_STUDIES), *,
                   root: Path | None = None) -> tuple[pd.DataFrame, dict]:
    """The recorded transfer results of `machine` in one frame, and each study's provenance.

    Columns: study, route ('GPU0 → GPU1', or on one GPU 'GPU0 → GPU0', 'CPU → GPU0', 'GPU0 → CPU'), mechanism, sms
    (blocks given, one per SM; NaN: the mechanism's default grid; 0: the copy engine, which uses no SMs), bytes,
    bandwidth_GBps, time_median_us, cv. Studies not recorded for `machine` are left out; none recorded raises
    `PkitError` naming what is there.
    """
    frames, provenance, missing = [], {}, []
    for study in studies:
        if study not in TRANSFER_STUDIES:
            raise ValueError(f"studies: expected names from {list(TRANSFER_STUDIES)}, got {study!r}")
        try:
            rec = results.load(study, machine, root=root)
        except PkitError as e:
            missing.append(str(e))
            continue
        f = with_route(rec.frame).copy()
        f["study"] = study
        sms = f["blocks"].astype(float) if "blocks" in f.columns else pd.Series(float("nan"), index=f.index)
        f["sms"] = sms.where(f["mechanism"] != "ce", 0.0)
        frames.append(f[_TRANSFER_COLUMNS])
        provenance[study] = rec.provenance
    if not frames:
        raise PkitError(f"machine {machine!r}: no recorded transfer results; {'; '.join(missing)}")
    return pd.concat(frames, ignore_index=True), provenance


def _sms_text(sms) -> str:
    if sms is None or (isinstance(sms, float) and math.isnan(sms)):
        return "the default grid"
    return "no SMs (copy engine)" if sms == 0 else f"{int(sms)} SMs"


def transfer_lookup(frame: pd.DataFrame, mechanisms: Sequence[str], nbytes: int, sms: int | None = None,
                    route: str | None = None) -> pd.DataFrame:
    """Bandwidth and time of each of `mechanisms` copying `nbytes` with `sms` SMs (None: the default grid, as
    the size sweeps ran) along `route` (default: the frame's first), read from `transfer_frame`'s `frame` at the
    nearest recorded point: the smallest
    |log₂(bytes / nbytes)| + |log₂(sms / asked)| among that mechanism's rows with a grid of the kind asked
    (SMs given or default). The copy engine uses no SMs: only its size is matched.

    Columns: mechanism, route, study, asked_bytes, asked_sms, bytes, sms, bandwidth_GBps, time_median_us, cv,
    exact (the recorded point is the one asked), note (says which point was read when it is not).
    """
    if not isinstance(frame, pd.DataFrame) or not set(_TRANSFER_COLUMNS) <= set(frame.columns):
        raise ValueError(f"frame: expected transfer_frame's columns {_TRANSFER_COLUMNS}")
    routes = list(dict.fromkeys(frame["route"]))
    if route is not None and route not in routes:
        raise ValueError(f"route: expected one of the recorded routes {routes}, got {route!r}")
    route = route if route is not None else routes[0]
    frame = frame[frame["route"] == route]
    nbytes = check_positive_int("nbytes", _as_int(nbytes))
    if sms is not None:
        sms = check_positive_int("sms", _as_int(sms))
    known = sorted(frame["mechanism"].unique())
    unknown = [m for m in mechanisms if m not in known]
    if unknown or not mechanisms:
        raise ValueError(f"mechanisms: expected names from {known}, got {list(mechanisms)}")
    rows = []
    for mech in mechanisms:
        part = frame[frame["mechanism"] == mech]
        if mech == "ce":
            sweeps = part[part["study"] != "mechanisms_sm_sweep"]  # the size sweep when there is one
            part = sweeps if len(sweeps) else part
            dist = (part["bytes"] / nbytes).map(math.log2).abs()
        elif sms is None:
            part = part[part["sms"].isna()]
            dist = (part["bytes"] / nbytes).map(math.log2).abs()
        else:
            part = part[part["sms"].notna()]
            dist = (part["bytes"] / nbytes).map(math.log2).abs() + (part["sms"] / sms).map(math.log2).abs()
        if part.empty:
            rows.append({"mechanism": mech, "route": route, "study": None, "asked_bytes": nbytes, "asked_sms": sms,
                         "exact": False,
                         "note": f"no recorded point with {_sms_text(sms)} for {mech}"})
            continue
        best = part.loc[dist.sort_values(kind="stable").index[0]]
        exact = bool(best["bytes"] == nbytes and (mech == "ce" or (sms is None or best["sms"] == sms)))
        asked = f"{figures.byte_label(nbytes)} with {_sms_text(sms)}"
        got = f"{figures.byte_label(int(best['bytes']))} with {_sms_text(best['sms'])}"
        note = "recorded point" if exact else f"nearest recorded point: {got} (asked {asked})"
        if mech == "ce" and sms is not None:
            note += "; the copy engine uses no SMs"
        rows.append({"mechanism": mech, "route": route, "study": best["study"], "asked_bytes": nbytes, "asked_sms": sms,
                     "bytes": int(best["bytes"]), "sms": best["sms"], "bandwidth_GBps": best["bandwidth_GBps"],
                     "time_median_us": best["time_median_us"], "cv": best["cv"], "exact": exact, "note": note})
    return pd.DataFrame(rows, columns=["mechanism", "route", "study", "asked_bytes", "asked_sms", "bytes", "sms",
                                       "bandwidth_GBps", "time_median_us", "cv", "exact", "note"])


def transfer_html(lookup: pd.DataFrame, provenance: dict) -> str:
    """The text the transfer explorer shows: one line per mechanism, then where the numbers came from."""
    lines = []
    for _, r in lookup.iterrows():
        name = html.escape(figures.label(r["mechanism"]))
        if pd.isna(r["study"]) or pd.isna(r["bandwidth_GBps"]):
            lines.append(f"<li><b>{name}</b>: {html.escape(r['note'])}</li>")
            continue
        lines.append(f"<li><b>{name}</b>: {r['bandwidth_GBps']:.1f} GB/s, {r['time_median_us']:.4g} µs per copy "
                     f"(median, cv {r['cv']:.3f}) — {html.escape(r['note'])} [{html.escape(r['study'])}]</li>")
    used = [s for s in dict.fromkeys(lookup["study"].dropna()) if s in provenance]
    prov = "".join(f"<br><small>{html.escape(s)}: {html.escape(results.describe(provenance[s]))}</small>"
                   for s in used)
    return f"<ul>{''.join(lines)}</ul><i>Recorded measurements, read at the nearest recorded point.</i>{prov}"


def transfer_figure(frame: pd.DataFrame, lookup: pd.DataFrame):
    """Bandwidth by message size (default grid) and by SMs (where recorded) of the looked-up mechanisms, each
    read point ringed (a matplotlib Figure)."""
    from matplotlib.figure import Figure

    mechs = list(lookup["mechanism"])
    by_size = frame[frame["mechanism"].isin(mechs) & (frame["sms"].isna() | (frame["mechanism"] == "ce"))
                    & (frame["study"] != "mechanisms_sm_sweep")]
    by_sms = frame[frame["mechanism"].isin(mechs) & (frame["study"] == "mechanisms_sm_sweep")
                   & (frame["mechanism"] != "ce")]
    fig = Figure(figsize=(8.5, 2.9), dpi=100, layout="constrained")
    axes = fig.subplots(1, 2 if len(by_sms) else 1, squeeze=False)[0]
    colors = figures.colors_for(frame["mechanism"].unique())  # the figures' fixed colour per mechanism
    ax = axes[0]
    for mech, part in by_size.groupby("mechanism", sort=False):
        part = part.sort_values("bytes")
        ax.plot(part["bytes"], part["bandwidth_GBps"], marker=".", color=colors[mech], label=figures.label(mech))
    if len(by_size):
        figures.size_axis(ax, list(by_size["bytes"]))
    ax.set_xlabel("message size (default grid)")
    ax.set_ylabel("bandwidth (GB/s)")
    if len(by_sms):
        sizes = sorted(by_sms["bytes"].unique())
        ax2 = axes[1]
        for mech, part in by_sms.groupby("mechanism", sort=False):
            part = part.sort_values("sms")
            ax2.plot(part["sms"], part["bandwidth_GBps"], marker=".", color=colors[mech], label=figures.label(mech))
        ax2.set_xscale("log", base=2)
        ticks = [t for t in (1, 2, 4, 8, 16, 32, 64, 128) if by_sms["sms"].min() <= t <= by_sms["sms"].max()]
        ax2.set_xticks(ticks, [str(t) for t in ticks])
        ax2.set_xlabel(f"SMs given (at {', '.join(figures.byte_label(int(s)) for s in sizes)})")
    for _, r in lookup.dropna(subset=["bandwidth_GBps"]).iterrows():
        on_sms = r["study"] == "mechanisms_sm_sweep" and r["mechanism"] != "ce" and len(by_sms)
        (axes[1] if on_sms else ax).plot(r["sms"] if on_sms else r["bytes"], r["bandwidth_GBps"], "o", ms=11,
                                         mfc="none", mec="black", mew=1.5)
    ax.legend(fontsize=8, loc="upper left")
    for a in axes:
        a.tick_params(labelsize=8)
    fig.suptitle("recorded measurements; ringed: the points read", fontsize=9)
    return fig


def _transfer_controls(frame: pd.DataFrame) -> dict:
    """The transfer explorer's controls over a `transfer_frame`: the kernel sets it recorded, route and mechanisms
    (filled as the kernels are picked), message size (1 MiB where recorded), default grid and SMs."""
    import ipywidgets as w

    kernel_sets = [k for k, studies in KERNEL_SETS.items() if frame["study"].isin(studies).any()]
    style = {"description_width": "90px"}
    recorded_sms = sorted(int(s) for s in frame["sms"].dropna().unique() if s > 0) or [1]
    controls = {
        "kernels": w.Dropdown(options=kernel_sets, value=kernel_sets[0], description="kernels", style=style),
        "route": w.Dropdown(description="route", style=style),
        "mechanisms": w.SelectMultiple(description="mechanisms", rows=5, style=style),
        "nbytes": w.SelectionSlider(options=size_options(int(frame["bytes"].min()), int(frame["bytes"].max())),
                                    description="message", style=style),
        "default_grid": w.Checkbox(value=True, description="default grid (as the size sweeps ran)"),
        "sms": w.IntSlider(value=min(32, recorded_sms[-1]), min=1, max=recorded_sms[-1], description="SMs",
                           disabled=True, style=style),
    }
    controls["nbytes"].value = 1 << 20 if (1 << 20) in dict(controls["nbytes"].options).values() \
        else controls["nbytes"].options[0][1]
    return controls


def transfer_explorer(machine: str = studies.FIGURES_MACHINE, *, root: Path | None = None):
    """Pick kernels, route, mechanism(s), message size and SMs → bandwidth and time from `machine`'s recorded
    results (`transfer_lookup`, nearest recorded point, said so), with the provenance line. Controls:
    `.controls['kernels']` (`KERNEL_SETS`), 'route', 'mechanisms', 'nbytes', 'default_grid', 'sms'; outputs: 'text'
    (HTML), 'chart' (PNG)."""
    import ipywidgets as w

    frame, provenance = transfer_frame(machine, root=root)
    controls = _transfer_controls(frame)
    outputs = {"text": w.HTML(), "chart": w.Image(format="png")}
    state = {"busy": False}

    def kernels() -> pd.DataFrame:
        return frame[frame["study"].isin(KERNEL_SETS[controls["kernels"].value])]

    def part() -> pd.DataFrame:
        return kernels()[kernels()["route"] == controls["route"].value]

    def set_routes():
        routes = list(dict.fromkeys(kernels()["route"]))
        controls["route"].options = routes
        controls["route"].value = controls["route"].value if controls["route"].value in routes else routes[0]

    def set_mechanisms():
        names = list(dict.fromkeys(part()["mechanism"]))
        keep = [m for m in controls["mechanisms"].value if m in names] or names[:3]
        controls["mechanisms"].options = [(figures.label(m), m) for m in names]
        controls["mechanisms"].value = tuple(keep)

    def refresh(change=None):
        if state["busy"]:
            return
        state["busy"] = True
        try:
            if change is None or change["owner"] is controls["kernels"]:
                set_routes()
            if change is None or change["owner"] in (controls["kernels"], controls["route"]):
                set_mechanisms()
            controls["sms"].disabled = controls["default_grid"].value
            mechs = list(controls["mechanisms"].value)
            if not mechs:
                outputs["text"].value = "<i>Pick one or more mechanisms.</i>"
                return
            sms = None if controls["default_grid"].value else controls["sms"].value
            lookup = transfer_lookup(part(), mechs, controls["nbytes"].value, sms)
            outputs["text"].value = transfer_html(lookup, provenance)
            outputs["chart"].value = png(transfer_figure(part(), lookup))
        finally:
            state["busy"] = False

    for c in controls.values():
        c.observe(refresh, names="value")
    refresh()
    return box([w.HBox([w.VBox([controls["kernels"], controls["route"], controls["mechanisms"]]),
                        w.VBox([controls["nbytes"], controls["default_grid"], controls["sms"]])]),
                outputs["text"], outputs["chart"]], controls, outputs, refresh)
