"""`pkit problems`: the problems' cost table, fitted to a terminal (docs/harness.md).

Example:
    $ pkit problems --world-size 2
"""
from __future__ import annotations

import math
import numbers
import re
import textwrap

from ..errors import PkitError
from .commands import ProblemsCommand, check_dtype, error, option_name
from .options import EvalOptions
from .problem import Problem, describe_sizes
from .problems import cost_table, narrow

TABLE_WIDTH = 100
"""Characters per line the default `pkit problems` output fits (`--wide`: every column, whatever the width)."""
LEFT_OUT_FIRST = ("category", "sync_steps", "roofline_measured_bound", "bound")
"""Columns the default `pkit problems` table leaves out, in this order, while it is wider than `TABLE_WIDTH`."""


def check_sizes(problems: list[Problem], sizes: list[str] | None) -> None:
    """ValueError naming --sizes unless each of `sizes` is a size of some selected problem."""
    unknown = [s for s in sizes or () if not any(p.has_size(s) for p in problems)]
    if unknown:
        raise ValueError(f"--sizes: expected sizes of the selected problems ({describe_sizes(problems)}), "
                         f"got {', '.join(unknown)}")


def run_problems(command: ProblemsCommand) -> int:
    """`pkit problems`: print the cost table."""
    source = command.source
    try:
        EvalOptions(world_size=source.world_size, ceilings=source.ceilings).validate(option_name)
        _, chosen = source.find("problems")
        check_dtype(chosen, source.dtype)
        check_sizes(chosen, command.sizes)
        table = cost_table(chosen, source.world_size, source.dtype, command.sizes, source.ceilings,
                           machine=command.machine)
    except (ValueError, PkitError) as e:
        return error("problems", e)
    if command.format == "csv":
        print(table.to_csv(index=False), end="")
    elif command.format == "json":
        print(table.to_json(orient="records", indent=1))
    elif command.wide:
        print(table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    else:
        shown, notes = narrow(table)
        text, left_out = fitted(shown, TABLE_WIDTH)
        notes = [f"every row's {note}" for note in notes]
        if left_out:
            notes.append(f"left out to fit {TABLE_WIDTH} columns: {', '.join(left_out)} (--wide: every column)")
        print(text)
        for note in notes:  # a long path stays whole on a line of its own
            print(textwrap.fill(note, TABLE_WIDTH, subsequent_indent="  ", break_long_words=False,
                                break_on_hyphens=False))
    return 0


def fitted(frame, width: int) -> tuple[str, list[str]]:
    """(`text_table` of `frame` in at most `width` characters where leaving out `LEFT_OUT_FIRST` columns, in that
    order, makes it fit; the columns left out).

    >>> import pandas as pd
    >>> text, left_out = fitted(pd.DataFrame({"problem": ["01_a"], "category": ["collectives"]}), 12)
    >>> print(text.strip()); left_out
    problem
    01_a
    ['category']
    """
    left_out = []
    text = text_table(frame)
    for name in LEFT_OUT_FIRST:
        if max(map(len, text.splitlines())) <= width:
            break
        if name in frame.columns:
            frame = frame.drop(columns=name)
            left_out.append(name)
            text = text_table(frame)
    return text, left_out


def text_table(frame) -> str:
    """`frame` as aligned text for a terminal: each column's name split at its first '_' over two header lines
    (`roofline` over `time_ms`), numbers to 3 significant digits right-aligned, text left-aligned, one space
    between columns, no trailing blanks.

    >>> import pandas as pd
    >>> print(text_table(pd.DataFrame({"problem": ["01_a"], "link_bytes": [134217728], "bound": ["link"]})))
               link
    problem   bytes bound
    01_a    1.34e+8 link
    """
    import pandas as pd

    heads = [name.split("_", 1) if "_" in name else ["", name] for name in frame.columns]
    cells = [[_cell(v) for v in frame[c]] for c in frame.columns]
    numeric = [pd.api.types.is_numeric_dtype(frame[c]) and not pd.api.types.is_bool_dtype(frame[c])
               for c in frame.columns]
    widths = [max(len(head[0]), len(head[1]), *map(len, column)) for head, column in zip(heads, cells)]

    def line(row) -> str:
        return " ".join(c.rjust(w) if n else c.ljust(w) for c, w, n in zip(row, widths, numeric)).rstrip()

    return "\n".join([line([h[0] for h in heads]), line([h[1] for h in heads]), *map(line, zip(*cells))])


def _cell(value) -> str:
    """One cell of `text_table`: '' for a missing value, whole numbers below 10^5 as they are, other numbers in 3
    significant digits with unpadded exponents.

    >>> _cell(2048), _cell(33554432), _cell(1.82e-05), _cell(float("nan"))
    ('2048', '3.36e+7', '1.82e-5', '')
    """
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        if math.isfinite(value) and value == int(value) and abs(value) < 1e5:
            return str(int(value))
        return re.sub(r"e([+-])0*(\d)", r"e\1\2", f"{value:.3g}")
    return str(value)
