"""The roofline explorer: the datasheet-modelled floor of a step that computes and moves one message
(`roofline_point`, from `pkit.roofline` and `pkit.hardware`), as text (`roofline_html`) and a bar chart
(`roofline_figure`), behind `roofline_explorer`'s controls."""
from __future__ import annotations

import html
import math

from .. import figures
from ..hardware import GPUS
from ..ops.collective_ops import COLLECTIVES
from ..roofline import DTYPES, Ceilings, floor
from .common import box, check_positive_int, png, size_options

ROOFLINE_COLLECTIVES = {"send": (lambda n: 1.0, "one GPU sends the whole message to one peer"),
                        **{name: (op.bus_factor, op.traffic) for name, op in COLLECTIVES.items()}}
"""Communication patterns: a point-to-point send and every registered collective (pkit/ops/collective_ops.py),
name → (link bytes per GPU as a multiple of the message size, given the world size n; what moves). A collective's
multiple is its nccl-tests bus-bandwidth factor: the bytes each GPU must send or receive over its links in one
direction with the bandwidth-optimal algorithm."""

ROOFLINE_TERMS = (("compute_s", "compute (T_c)"), ("hbm_s", "HBM (T_m)"), ("link_s", "NVLink (T_l)"))


def _check_nonnegative(name: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{name}: expected a finite number >= 0, got {value!r}")
    return float(value)


def _unit(t: float) -> tuple[float, str]:
    """(scale, name) of the time unit that reads `t` seconds best: s, ms, µs or ns."""
    return next(((s, u) for s, u in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")) if t >= s), (1e-9, "ns"))


def _seconds(t: float) -> str:
    """A time in the unit that reads best: ns, µs, ms or s, three significant figures."""
    scale, unit = _unit(t)
    return f"{t / scale:.3g} {unit}"


def roofline_point(gpu: str = "H200", world_size: int = 8, message_bytes: int = 1 << 30, flops: float = 0.0,
                   dtype: str = "bfloat16", collective: str = "all_reduce",
                   hbm_bytes: float | None = None) -> dict:
    """The datasheet-modelled floor of one step on each of `world_size` GPUs of kind `gpu`: `flops` FLOPs at the
    dense matmul rate of `dtype`, and a `collective` over a message of `message_bytes` per GPU on NVLink.

    Link bytes are the message times the collective's factor (`ROOFLINE_COLLECTIVES`); HBM bytes default to the
    message read once and written once (2 × message_bytes). Ceilings come from `Ceilings.datasheet(gpu)` (α = 0: a
    datasheet states no sync latency). Returns a dict: the inputs, `cost` (flops, hbm_bytes, link_bytes), the
    terms `compute_s`, `hbm_s`, `link_s`, the floor `time_s` = max of the terms (compute and communication
    overlapped), `serial_s` = T_c + T_l (one after the other), `bound` (compute, hbm or link), `balance_flops`
    (the FLOPs at which compute would take as long as the link), `origin` and a one-line `summary`.
    """
    if gpu not in GPUS:
        raise ValueError(f"gpu: expected one of {list(GPUS)}, got {gpu!r}")
    if collective not in ROOFLINE_COLLECTIVES:
        raise ValueError(f"collective: expected one of {list(ROOFLINE_COLLECTIVES)}, got {collective!r}")
    check_positive_int("world_size", world_size, 2)
    message = _check_nonnegative("message_bytes", message_bytes)
    flops = _check_nonnegative("flops", flops)
    hbm = 2 * message if hbm_bytes is None else _check_nonnegative("hbm_bytes", hbm_bytes)
    ceilings = Ceilings.datasheet(gpu)
    factor, _ = ROOFLINE_COLLECTIVES[collective]
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
            ("NVLink (T_l)", (f"{link_gb:.3g} GB ({ROOFLINE_COLLECTIVES[p['collective']][1]}) at "
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
    scale, unit = _unit(top)
    ax.barh(names[::-1], [t / scale for t in times[::-1]], color=colors[::-1])
    ax.set_xlabel(f"time ({unit})")
    ax.set_title(f"{point['gpu']} datasheet-modelled roofline (not measured)", fontsize=9)
    ax.tick_params(labelsize=8)
    return fig


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
        "collective": w.Dropdown(options=[(figures.label(c), c) for c in ROOFLINE_COLLECTIVES], value=collective,
                                 description="collective", style=style),
        "message_bytes": w.SelectionSlider(options=size_options(1 << 10, max(1 << 34, message_bytes)),
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
        outputs["chart"].value = png(roofline_figure(point))

    for c in controls.values():
        c.observe(refresh, names="value")
    refresh()
    return box([w.HBox([w.VBox(list(controls.values())[:3]), w.VBox(list(controls.values())[3:])]),
                outputs["text"], outputs["chart"]], controls, outputs, refresh)
