"""Explorers for JupyterLab (ipywidgets): a datasheet roofline, recorded transfers, and `pkit eval` records.

Each explorer is a function returning an `ipywidgets.VBox` (its controls in `.controls`, its outputs in
`.outputs`); what it shows is computed by plain functions, without widgets, that its callbacks call and that
work anywhere:

- `roofline_explorer()`: `roofline_point(gpu, world_size, message_bytes, flops, dtype, collective)`, the
  datasheet-modelled floor of a step that computes and moves one message (`pkit.roofline`, `pkit.hardware`);
- `transfer_explorer(machine)`: `transfer_frame(machine)` gathers the recorded transfer results and
  `transfer_lookup(frame, mechanisms, nbytes, sms)` reads bandwidth and time at the nearest recorded point;
- `eval_browser(paths)`: `load_records`, `eval_table`, `filter_table` and `record_detail` over `pkit eval`
  JSONL files (docs/harness.md).

Example:
    >>> from pkit.widgets import roofline_point, transfer_frame, transfer_lookup
    >>> p = roofline_point("H200", world_size=8, message_bytes=1 << 30, flops=1e12, collective="all_reduce")
    >>> p["bound"], round(p["time_s"] * 1e3, 2), round(p["serial_s"] * 1e3, 2)
    ('link', 4.18, 5.19)
    >>> frame, provenance = transfer_frame("h200x2-nv18")
    >>> row = transfer_lookup(frame, ["sm_push"], nbytes=100 << 20, sms=40).iloc[0]
    >>> int(row["bytes"]) >> 20, int(row["sms"]), bool(row["exact"])
    (256, 48, False)
    >>> row["note"]
    'nearest recorded point: 256 MiB with 48 SMs (asked 100 MiB with 40 SMs)'
"""
from __future__ import annotations

import html
import io
import math
from pathlib import Path
from typing import Iterable, Sequence

import pandas as pd

from . import figures, results, studies
from .errors import PkitError
from .hardware import GPUS
from .ops.transfers import with_route
from .harness.records import CORRECT, STATUSES, read_jsonl
from .roofline import DTYPES, Ceilings, floor

# --- roofline ----------------------------------------------------------------------------------------------

COLLECTIVES = {
    "send": (lambda n: 1.0, "one GPU sends the whole message to one peer"),
    "all_gather": (lambda n: (n - 1) / n, "each GPU receives the (n-1)/n of the gathered message it lacks"),
    "reduce_scatter": (lambda n: (n - 1) / n, "each GPU sends the (n-1)/n of its message that others own"),
    "all_reduce": (lambda n: 2 * (n - 1) / n, "reduce-scatter then all-gather: 2(n-1)/n of the message"),
    "all_to_all": (lambda n: (n - 1) / n, "each GPU sends the (n-1)/n of its message meant for the others"),
}
"""Communication patterns: name → (link bytes per GPU as a multiple of the message size, given the world size
n; what moves). The multiples are nccl-tests' bus-bandwidth factors: the bytes each GPU must send or receive
over its links in one direction with the bandwidth-optimal algorithm."""

ROOFLINE_TERMS = (("compute_s", "compute (T_c)"), ("hbm_s", "HBM (T_m)"), ("link_s", "NVLink (T_l)"))


def _check_positive_int(name: str, value, low: int = 1) -> int:
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= low):
        raise ValueError(f"{name}: expected an integer >= {low}, got {value!r}")
    return value


def _as_int(value):
    """`value` as a Python int when it is an integer of any kind (NumPy's included), else unchanged."""
    import numbers

    return int(value) if isinstance(value, numbers.Integral) and not isinstance(value, bool) else value


def _check_nonnegative(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name}: expected a finite number >= 0, got {value!r}")
    return float(value)


def _seconds(t: float) -> str:
    """A time in the unit that reads best: ns, µs, ms or s, three significant figures."""
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")):
        if t >= scale:
            return f"{t / scale:.3g} {unit}"
    return f"{t / 1e-9:.3g} ns"


def roofline_point(gpu: str = "H200", world_size: int = 8, message_bytes: int = 1 << 30, flops: float = 0.0,
                   dtype: str = "bfloat16", collective: str = "all_reduce",
                   hbm_bytes: float | None = None) -> dict:
    """The datasheet-modelled floor of one step on each of `world_size` GPUs of kind `gpu`: `flops` FLOPs at the
    dense matmul rate of `dtype`, and a `collective` over a message of `message_bytes` per GPU on NVLink.

    Link bytes are the message times the collective's factor (`COLLECTIVES`); HBM bytes default to the message
    read once and written once (2 × message_bytes). Ceilings come from `Ceilings.datasheet(gpu)` (α = 0: a
    datasheet states no sync latency). Returns a dict: the inputs, `cost` (flops, hbm_bytes, link_bytes), the
    terms `compute_s`, `hbm_s`, `link_s`, the floor `time_s` = max of the terms (compute and communication
    overlapped), `serial_s` = T_c + T_l (one after the other), `bound` (compute, hbm or link), `balance_flops`
    (the FLOPs at which compute would take as long as the link), `origin` and a one-line `summary`.

    Example:
        >>> p = roofline_point("B200", world_size=2, message_bytes=1 << 20, flops=0, collective="send")
        >>> p["bound"], round(p["link_s"] * 1e6, 3)
        ('link', 1.165)
    """
    if gpu not in GPUS:
        raise ValueError(f"gpu: expected one of {list(GPUS)}, got {gpu!r}")
    if collective not in COLLECTIVES:
        raise ValueError(f"collective: expected one of {list(COLLECTIVES)}, got {collective!r}")
    _check_positive_int("world_size", world_size, 2)
    message = _check_nonnegative("message_bytes", message_bytes)
    flops = _check_nonnegative("flops", flops)
    hbm = 2 * message if hbm_bytes is None else _check_nonnegative("hbm_bytes", hbm_bytes)
    ceilings = Ceilings.datasheet(gpu)
    factor, _ = COLLECTIVES[collective]
    cost = {"flops": flops, "hbm_bytes": hbm, "link_bytes": factor(world_size) * message}
    f = floor(cost, ceilings, dtype)
    rate = ceilings.flops_rate(dtype)
    point = {"gpu": gpu, "world_size": world_size, "collective": collective, "message_bytes": message,
             "flops": flops, "dtype": dtype, "cost": cost, "compute_s": f.compute_s, "hbm_s": f.hbm_s,
             "link_s": f.link_s, "time_s": f.time_s, "serial_s": f.serial_s,
             "bound": f.bound if f.time_s > 0 else "none", "balance_flops": f.link_s * rate,
             "flops_per_s": rate, "link_bytes_per_s": ceilings.link_bytes_per_s,
             "hbm_bytes_per_s": ceilings.hbm_bytes_per_s, "origin": ceilings.origin}
    point["summary"] = _roofline_summary(point)
    return point


def _roofline_summary(p: dict) -> str:
    if p["bound"] == "none":
        return "nothing to do: no FLOPs and an empty message"
    words = {"compute": "compute-bound", "hbm": "HBM-bound", "link": "NVLink-bound"}[p["bound"]]
    return (f"{words}: floor {_seconds(p['time_s'])} with compute and communication overlapped, "
            f"{_seconds(p['serial_s'])} one after the other")


def roofline_html(point: dict) -> str:
    """The text the roofline explorer shows for `roofline_point`'s result (HTML)."""
    p = point
    link_gb = p["cost"]["link_bytes"] / 1e9
    rows = [("compute (T_c)", (f"{p['flops']:.3g} FLOP at {p['flops_per_s'] / 1e12:.4g} TFLOP/s "
                               f"({figures.label(p['dtype'])} dense)"), p["compute_s"]),
            ("HBM (T_m)", f"{p['cost']['hbm_bytes'] / 1e9:.3g} GB at {p['hbm_bytes_per_s'] / 1e12:.3g} TB/s",
             p["hbm_s"]),
            ("NVLink (T_l)", (f"{link_gb:.3g} GB ({COLLECTIVES[p['collective']][1]}) at "
                              f"{p['link_bytes_per_s'] / 1e9:.4g} GB/s one direction"), p["link_s"])]
    body = "".join(f"<tr><td>{html.escape(name)}</td><td>{html.escape(what)}</td>"
                   f"<td style='text-align:right'>{_seconds(t) if t > 0 else '0'}</td></tr>" for name, what, t in rows)
    balance = (f"Compute and the link take equally long at {p['balance_flops']:.3g} FLOP per GPU; more FLOPs than "
               "that and the step is compute-bound." if p["link_s"] > 0 else "No link traffic.")
    return (f"<b>{html.escape(p['summary'])}</b> ({p['gpu']} × {p['world_size']}, "
            f"{html.escape(figures.label(p['collective']))} of {figures.byte_label(int(p['message_bytes']))} "
            f"per GPU)<br><table>{body}</table>{html.escape(balance)}<br>"
            f"<i>Datasheet-modelled, not measured: {html.escape(p['origin'])}; no sync latency (α = 0).</i>")


def roofline_figure(point: dict):
    """A small horizontal bar chart of the roofline's terms, the binding one dark (a matplotlib Figure)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(5.2, 1.9), dpi=100, layout="constrained")
    ax = fig.subplots()
    names = [label for _, label in ROOFLINE_TERMS]
    times = [point[key] for key, _ in ROOFLINE_TERMS]
    bound = {"compute": 0, "hbm": 1, "link": 2}.get(point["bound"])
    colors = [figures.PALETTE[0] if i == bound else "#BBBBBB" for i in range(len(names))]
    top = max(times) or 1.0
    scale, unit = next(((s, u) for s, u in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")) if top >= s), (1e-9, "ns"))
    ax.barh(names[::-1], [t / scale for t in times[::-1]], color=colors[::-1])
    ax.set_xlabel(f"time ({unit})")
    ax.set_title(f"{point['gpu']} datasheet-modelled roofline (not measured)", fontsize=9)
    ax.tick_params(labelsize=8)
    return fig


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


def _sizes(low: int, high: int) -> list[tuple[str, int]]:
    """(label, bytes) for every power of two from `low` to `high`."""
    return [(figures.byte_label(1 << k), 1 << k) for k in range(low.bit_length() - 1, high.bit_length())]


def _box(children, controls: dict, outputs: dict, refresh):
    import ipywidgets as w

    box = w.VBox(children)
    box.controls, box.outputs, box.refresh = controls, outputs, refresh
    return box


def roofline_explorer(gpu: str = "H200", world_size: int = 8, message_bytes: int = 1 << 30, flops: float = 1e12,
                      dtype: str = "bfloat16", collective: str = "all_reduce"):
    """GPU generation, world size, collective, message size, FLOPs and dtype → the datasheet-modelled bound and
    bottleneck (`roofline_point`), as text and a bar chart of the terms. Controls: `.controls['gpu']`,
    'world_size', 'collective', 'message_bytes', 'flops', 'dtype'; outputs: `.outputs['text']` (HTML),
    'chart' (PNG Image)."""
    import ipywidgets as w

    roofline_point(gpu, world_size, message_bytes, flops, dtype, collective)  # argument errors before widgets
    style = {"description_width": "110px"}
    controls = {
        "gpu": w.Dropdown(options=list(GPUS), value=gpu, description="GPU", style=style),
        "world_size": w.IntSlider(value=world_size, min=2, max=max(8, world_size), description="world size",
                                  style=style),
        "collective": w.Dropdown(options=[(figures.label(c), c) for c in COLLECTIVES], value=collective,
                                 description="collective", style=style),
        "message_bytes": w.SelectionSlider(options=_sizes(1 << 10, max(1 << 34, message_bytes)),
                                           value=1 << (int(message_bytes).bit_length() - 1),
                                           description="message / GPU", style=style),
        "flops": w.FloatLogSlider(value=flops or 1.0, base=10, min=0, max=17, step=0.25, readout_format=".3g",
                                  description="FLOPs / GPU", style=style),
        "dtype": w.Dropdown(options=[(figures.label(d), d) for d in DTYPES], value=dtype, description="dtype",
                            style=style),
    }
    outputs = {"text": w.HTML(), "chart": w.Image(format="png")}

    def refresh(_=None):
        point = roofline_point(**{name: c.value for name, c in controls.items()})
        outputs["text"].value = roofline_html(point)
        outputs["chart"].value = _png(roofline_figure(point))

    for c in controls.values():
        c.observe(refresh, names="value")
    refresh()
    return _box([w.HBox([w.VBox(list(controls.values())[:3]), w.VBox(list(controls.values())[3:])]),
                 outputs["text"], outputs["chart"]], controls, outputs, refresh)


# --- recorded transfers ------------------------------------------------------------------------------------

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
    nbytes = _check_positive_int("nbytes", _as_int(nbytes))
    if sms is not None:
        sms = _check_positive_int("sms", _as_int(sms))
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


def transfer_explorer(machine: str = studies.FIGURES_MACHINE, *, root: Path | None = None):
    """Pick kernels, route, mechanism(s), message size and SMs → bandwidth and time from `machine`'s recorded
    results (`transfer_lookup`, nearest recorded point, said so), with the provenance line. Controls:
    `.controls['kernels']` (`KERNEL_SETS`), 'route', 'mechanisms', 'nbytes', 'default_grid', 'sms'; outputs: 'text'
    (HTML), 'chart' (PNG)."""
    import ipywidgets as w

    frame, provenance = transfer_frame(machine, root=root)
    kernel_sets = [k for k, studies in KERNEL_SETS.items() if frame["study"].isin(studies).any()]
    style = {"description_width": "90px"}
    recorded_sms = sorted(int(s) for s in frame["sms"].dropna().unique() if s > 0) or [1]
    controls = {
        "kernels": w.Dropdown(options=kernel_sets, value=kernel_sets[0], description="kernels", style=style),
        "route": w.Dropdown(description="route", style=style),
        "mechanisms": w.SelectMultiple(description="mechanisms", rows=5, style=style),
        "nbytes": w.SelectionSlider(options=_sizes(int(frame["bytes"].min()), int(frame["bytes"].max())),
                                    description="message", style=style),
        "default_grid": w.Checkbox(value=True, description="default grid (as the size sweeps ran)"),
        "sms": w.IntSlider(value=min(32, recorded_sms[-1]), min=1, max=recorded_sms[-1], description="SMs",
                           disabled=True, style=style),
    }
    controls["nbytes"].value = 1 << 20 if (1 << 20) in dict(controls["nbytes"].options).values() \
        else controls["nbytes"].options[0][1]
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
            outputs["chart"].value = _png(transfer_figure(part(), lookup))
        finally:
            state["busy"] = False

    for c in controls.values():
        c.observe(refresh, names="value")
    refresh()
    return _box([w.HBox([w.VBox([controls["kernels"], controls["route"], controls["mechanisms"]]),
                         w.VBox([controls["nbytes"], controls["default_grid"], controls["sms"]])]),
                 outputs["text"], outputs["chart"]], controls, outputs, refresh)


# --- pkit eval records -------------------------------------------------------------------------------------

ALL = "all"
FAILED = "failed (not correct)"


def load_records(paths) -> tuple[list[dict], list[str]]:
    """The records of `pkit eval` JSONL files and, for each, the name of its file. `paths`: a file, a folder
    (its *.jsonl files) or a list of them; None: every *.jsonl under results/."""
    if paths is None:
        paths = sorted(results.results_root().glob("*/*.jsonl"))
    if isinstance(paths, (str, Path)):
        paths = [paths]
    files = []
    for p in map(Path, paths):
        if p.is_dir():
            files += sorted(p.glob("*.jsonl"))
        elif p.is_file():
            files.append(p)
        else:
            raise ValueError(f"paths: {str(p)!r} is neither a JSONL file nor a folder")
    if not files:
        raise ValueError(f"paths: no *.jsonl files in {[str(p) for p in paths]}")
    records, names = [], []
    for f in files:
        got = read_jsonl(f)
        records += got
        names += [f"{f.parent.name}/{f.name}"] * len(got)
    return records, names


def eval_table(records: Sequence[dict], files: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per record (index: its position in `records`): file, model ('unnamed' when none), problem,
    category, solution, sample, status, speedup, world_size, error (its first line)."""
    from .harness.records import first_line

    rows = [{"file": files[i] if files else None, "model": r.get("model") or "unnamed", "problem": r.get("problem"),
             "category": r.get("category"), "solution": r.get("solution"), "sample": r.get("sample"),
             "status": r.get("status"), "speedup": r.get("speedup"), "world_size": r.get("world_size"),
             "error": first_line(r.get("error"), 120)} for i, r in enumerate(records)]
    return pd.DataFrame(rows, columns=["file", "model", "problem", "category", "solution", "sample", "status",
                                       "speedup", "world_size", "error"])


def filter_table(table: pd.DataFrame, model: str | None = None, problem: str | None = None,
                 status: str | Sequence[str] | None = None) -> pd.DataFrame:
    """The rows of `eval_table` with that model, problem and status (None or 'all': any; status may be a list,
    or 'failed (not correct)' for every status but the correct ones: faster, level, slower)."""
    keep = pd.Series(True, index=table.index)
    if model not in (None, ALL):
        keep &= table["model"] == model
    if problem not in (None, ALL):
        keep &= table["problem"] == problem
    if status == FAILED:
        keep &= ~table["status"].isin(CORRECT)
    elif isinstance(status, str) and status != ALL:
        if status not in STATUSES:
            raise ValueError(f"status: expected one of {list(STATUSES)}, {ALL!r} or {FAILED!r}, got {status!r}")
        keep &= table["status"] == status
    elif status is not None and not isinstance(status, str):
        keep &= table["status"].isin(list(status))
    return table[keep]


def record_detail(record: dict) -> dict:
    """What the browser shows for one record: status, error (the excerpt as recorded), reason (why it failed,
    `pkit.analysis.failure_cause`, with its confidence and evidence; None when correct), flags, per_rank (a
    DataFrame, one row per rank), timing (reference and candidate ms, speedup, roofline) and where it ran."""
    from .analysis import CAUSES, failure_cause, read_source, source_roots

    try:
        source = read_source(record, source_roots([record])) if record.get("solution") else None
    except OSError:
        source = None
    cause = failure_cause(record, source)
    reason = (f"{cause.label}: {CAUSES.get(cause.label, '')} [{cause.confidence} confidence; {cause.evidence}]"
              if cause else None)
    per_rank = pd.DataFrame(record.get("per_rank") or [])
    prov = record.get("provenance") or {}
    timing = {k: record.get(k) for k in ("ref_time_ms", "sol_time_ms", "speedup", "roofline_time_ms",
                                         "roofline_bound", "roofline_fraction", "trials", "trials_passed")}
    return {"title": f"{record.get('problem')} · {record.get('solution')} · {record.get('model') or 'unnamed'}"
                     + (f" sample {record['sample']}" if record.get("sample") is not None else ""),
            "status": record.get("status"), "error": record.get("error"), "reason": reason,
            "flags": list(record.get("flags") or []), "per_rank": per_rank, "timing": timing,
            "ran_on": f"{prov.get('machine', '?')}, world size {record.get('world_size')}, {record.get('device')}, "
                      f"{record.get('dtype')}, size {record.get('size')}, pkit {str(prov.get('pkit_commit'))[:12]}"}


def detail_html(record: dict) -> str:
    """`record_detail` as HTML."""
    d = record_detail(record)
    parts = [f"<b>{html.escape(d['title'])}</b>: <b>{html.escape(str(d['status']))}</b>",
             f"<br><small>ran on {html.escape(d['ran_on'])}</small>"]
    if d["reason"]:
        parts.append(f"<br><b>reason</b>: {html.escape(d['reason'])}")
    if d["flags"]:
        parts.append(f"<br><b>flags</b>: {html.escape(', '.join(d['flags']))}")
    t = {k: v for k, v in d["timing"].items() if v is not None}
    if t:
        parts.append("<br><b>timing</b>: " + html.escape(", ".join(
            f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in t.items())))
    if d["error"]:
        parts.append(f"<br><b>error</b><pre style='white-space:pre-wrap;max-height:16em;overflow:auto'>"
                     f"{html.escape(d['error'])}</pre>")
    if len(d["per_rank"]):
        parts.append("<b>per rank</b>" + d["per_rank"].to_html(index=False, na_rep="", float_format="{:.4g}".format))
    return "".join(parts)


def eval_browser(paths=None, *, max_rows: int = 200):
    """Browse `pkit eval` JSONL files (`load_records(paths)`): filter by model, problem and status, see the
    table, and pick a record to see its error, the reason it failed and its per-rank detail. Controls:
    `.controls['model']`, 'problem', 'status', 'record'; outputs: 'summary', 'table', 'detail' (HTML)."""
    import ipywidgets as w

    records, files = load_records(paths)
    table = eval_table(records, files)
    style = {"description_width": "70px"}
    controls = {
        "model": w.Dropdown(options=[ALL, *sorted(table["model"].unique())], description="model", style=style),
        "problem": w.Dropdown(options=[ALL, *sorted(table["problem"].dropna().unique())], description="problem",
                              style=style),
        "status": w.Dropdown(options=[ALL, FAILED, *STATUSES], description="status", style=style),
        "record": w.Select(description="record", rows=8, layout=w.Layout(width="95%"), style=style),
    }
    outputs = {"summary": w.HTML(), "table": w.HTML(), "detail": w.HTML()}
    state = {"busy": False}

    def show_detail(_=None):
        i = controls["record"].value
        outputs["detail"].value = detail_html(records[i]) if i is not None else "<i>No record selected.</i>"

    def refresh(_=None):
        if state["busy"]:
            return
        state["busy"] = True
        try:
            shown = filter_table(table, controls["model"].value, controls["problem"].value, controls["status"].value)
            counts = shown["status"].value_counts()
            outputs["summary"].value = (f"{len(shown)} of {len(table)} records from {len(set(files))} file(s): "
                                        + html.escape(", ".join(f"{s} {counts[s]}" for s in STATUSES if s in counts)))
            view = shown.drop(columns=["category"]).head(max_rows)
            outputs["table"].value = (view.to_html(na_rep="", float_format="{:.3g}".format)
                                      + (f"<i>first {max_rows} shown</i>" if len(shown) > max_rows else ""))
            previous = controls["record"].value
            controls["record"].options = [(f"#{i} {r.problem} · {r.solution} · {r.model} · {r.status}", i)
                                          for i, r in shown.iterrows()]
            controls["record"].value = previous if previous in shown.index else (
                shown.index[0] if len(shown) else None)
        finally:
            state["busy"] = False
        show_detail()

    for name in ("model", "problem", "status"):
        controls[name].observe(refresh, names="value")
    controls["record"].observe(show_detail, names="value")
    refresh()
    return _box([w.HBox([controls["model"], controls["problem"], controls["status"]]), outputs["summary"],
                 w.Accordion([outputs["table"]], titles=("table",)), controls["record"], outputs["detail"]],
                controls, outputs, refresh)
