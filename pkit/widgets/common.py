"""What every explorer of pkit.widgets shares: argument checks, the PNG of a figure, byte-size slider options and
the box an explorer returns."""
from __future__ import annotations

import io

from .. import figures


def check_positive_int(name: str, value, low: int = 1) -> int:
    """`value`, or a ValueError naming argument `name` unless it is an integer >= `low`."""
    if not (isinstance(value, int) and not isinstance(value, bool) and value >= low):
        raise ValueError(f"{name}: expected an integer >= {low}, got {value!r}")
    return value


def png(fig) -> bytes:
    """A matplotlib figure as PNG bytes, without the software tag (same figure, same bytes)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", metadata={"Software": None})
    return buf.getvalue()


def size_options(low: int, high: int) -> list[tuple[str, int]]:
    """(label, bytes) for every power of two from `low` to `high` bytes: a size slider's options."""
    return [(figures.byte_label(1 << k), 1 << k) for k in range(low.bit_length() - 1, high.bit_length())]


def box(children, controls: dict, outputs: dict, refresh):
    """An explorer: an ipywidgets VBox of `children` with its `.controls`, `.outputs` and `.refresh` attached."""
    import ipywidgets as w

    vbox = w.VBox(children)
    vbox.controls, vbox.outputs, vbox.refresh = controls, outputs, refresh
    return vbox
