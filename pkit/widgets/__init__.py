"""Explorers for JupyterLab (ipywidgets): a datasheet roofline, recorded transfers, and `pkit eval` records.

Each explorer is a function returning an `ipywidgets.VBox` (its controls in `.controls`, its outputs in
`.outputs`); what it shows is computed by plain functions, without widgets, that its callbacks call and that
work anywhere. One module per explorer, the pieces they share in `common`:

- `roofline_explorer()` (roofline.py): `roofline_point(gpu, world_size, message_bytes, flops, dtype, collective)`,
  the datasheet-modelled floor of a step that computes and moves one message (`pkit.roofline`, `pkit.hardware`;
  a collective's link bytes from the collective registry, pkit/ops/collective_ops.py);
- `transfer_explorer(machine)` (transfers.py): `transfer_frame(machine)` gathers the recorded transfer results and
  `transfer_lookup(frame, mechanisms, nbytes, sms)` reads bandwidth and time at the nearest recorded point;
- `overlap_explorer()` (overlap.py): `overlap_view(overlap_inputs(), link_GBps, pattern, inner, gpus)`, the overlap
  model's curves for a link of any rate and the nearest emulated points (pkit.experiments.overlap.emulated);
- `eval_browser(paths)` (evals.py): `load_records`, `eval_table`, `filter_table` and `record_detail` over
  `pkit eval` JSONL files (docs/harness.md).

Example:
    >>> from pkit.widgets import roofline_point, transfer_frame, transfer_lookup
    >>> p = roofline_point("H200", world_size=8, message_bytes=1 << 30, flops=1e12, collective="all_reduce")
    >>> p["bound"], round(p["time_s"] * 1e3, 2), round(p["serial_s"] * 1e3, 2)
    ('link', 4.18, 5.19)
    >>> p = roofline_point("B200", world_size=2, message_bytes=1 << 20, flops=0, collective="send")
    >>> p["bound"], round(p["link_s"] * 1e6, 3)
    ('link', 1.165)
    >>> frame, provenance = transfer_frame("h200x2-nv18")
    >>> row = transfer_lookup(frame, ["sm_push"], nbytes=100 << 20, sms=40).iloc[0]
    >>> int(row["bytes"]) >> 20, int(row["sms"]), bool(row["exact"])
    (256, 48, False)
    >>> row["note"]
    'nearest recorded point: 256 MiB with 48 SMs (asked 100 MiB with 40 SMs)'
"""
from .evals import ALL, FAILED, detail_html, eval_browser, eval_table, filter_table, load_records, record_detail
from .overlap import overlap_explorer, overlap_figure, overlap_html, overlap_inputs, overlap_view
from .roofline import (ROOFLINE_COLLECTIVES, ROOFLINE_TERMS, roofline_explorer, roofline_figure, roofline_html,
                       roofline_point)
from .transfers import (KERNEL_SETS, TRANSFER_STUDIES, transfer_explorer, transfer_figure, transfer_frame,
                        transfer_html, transfer_lookup)

__all__ = ["ALL", "ROOFLINE_COLLECTIVES", "FAILED", "KERNEL_SETS", "ROOFLINE_TERMS", "TRANSFER_STUDIES", "detail_html",
           "eval_browser", "eval_table", "filter_table", "load_records", "overlap_explorer", "overlap_figure",
           "overlap_html", "overlap_inputs", "overlap_view", "record_detail", "roofline_explorer",
           "roofline_figure", "roofline_html", "roofline_point", "transfer_explorer", "transfer_figure",
           "transfer_frame", "transfer_html", "transfer_lookup"]
