"""pkit's looks: the style every figure is drawn in, and one colour, marker, line style and label per name of
pkit's (a transfer mechanism, a collective implementation, an overlap schedule, an eval status...), the same in
every figure.

Example:
    >>> from pkit.figures import style
    >>> style.label("sm_pull"), style.colors_for(["nccl"]) == {"nccl": style.BLACK}
    ('SM pull', True)
"""
from __future__ import annotations

from ..ops.collective_ops import COLLECTIVES as _COLLECTIVES
from ..ops.overlap_patterns import PATTERNS as _OVERLAP_PATTERNS
from ..ops.overlap_patterns import schedules as _overlap_schedules
from ..vocabulary import DIRECTIONS, FAMILIES, mechanism

STYLE = {
    "figure.figsize": (7.0, 4.2),
    "figure.dpi": 110,
    "savefig.dpi": 150,
    "font.family": "DejaVu Sans",
    "font.size": 10,
    "axes.titlesize": 11,
    "axes.titleweight": "bold",
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linewidth": 0.6,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.prop_cycle": None,  # filled below
    "legend.frameon": False,
    "lines.linewidth": 1.8,
    "lines.markersize": 5,
    "svg.hashsalt": "pkit",
    "svg.fonttype": "path",
    "path.simplify": False,
}
# Okabe–Ito's colours (distinguishable with the common colour-vision deficiencies) without its yellow, which
# is too pale on white, plus Tol's wine and a mid grey: nine colours, each at least 2:1 against white.
BLUE, ORANGE, GREEN, VERMILLION, PURPLE, SKY = "#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9"
WINE, BLACK, GREY = "#882255", "#000000", "#999999"
HUES = {"blue": BLUE, "orange": ORANGE, "green": GREEN, "vermillion": VERMILLION, "purple": PURPLE, "sky": SKY,
        "wine": WINE, "black": BLACK, "grey": GREY}
"""The palette by name, as registries outside this module name a colour (pkit.ops.overlap_patterns' looks)."""
PALETTE = list(HUES.values())
# Overlap schedules with a look of their own (pkit.ops.overlap_patterns: the registry says how each is drawn; the
# ones named after a transfer mechanism are drawn as that mechanism)
_DRAWN = {name: s for name, s in _overlap_schedules().items() if s.look}

# One colour per name, the same in every figure: transfer mechanisms (pkit.ops.transfers) and collective
# mechanisms (pkit.ops.collectives) by mechanism (the copy engine is always orange, SM/register-level blue);
# collective implementations (pkit.experiments.collectives, torch baselines) with NCCL black and pkit's
# variants in the colour of their mechanism; GEMMs (cuBLAS black like NCCL, the vendor's library); overlap
# schedules (from their registry: the serial NCCL + cuBLAS one black, PyTorch's grey and wine, dashed); mechanisms
# candidates use (pkit.analysis); eval statuses (six of the
# colours that stay furthest apart under simulated colour-vision deficiencies: bars carry no marker). Within each
# such set no two names share a colour; names outside get `colors_for`'s spares.
COLORS = {
    "ce": ORANGE, "sm_push": BLUE, "sm_pull": SKY, "tma_push": GREEN, "tma_pull": PURPLE,
    "sm": BLUE, "ll": VERMILLION, "tma": GREEN, "auto": BLACK,
    "nccl": BLACK, "pkit_sm": BLUE, "pkit_sm_one_shot": SKY, "pkit_sm_two_shot": GREEN, "pkit_ll": VERMILLION,
    "pkit_ce": ORANGE, "torch_nccl": GREY, "torch_symm_one_shot": WINE, "torch_symm_two_shot": PURPLE,
    "torch_symm": WINE,
    "empty_kernel": GREY, "pkit_gemm": BLUE, "pkit_gemm_flags": SKY, "cublas": BLACK,
    **{name: HUES[s.look.hue] for name, s in _DRAWN.items()},
    "torch_distributed": BLACK, "nvshmem": WINE, "multicast": VERMILLION, "none": GREY, "unknown": PURPLE,
    "compile_error": GREY, "runtime_error": WINE, "timeout": BLACK, "wrong_result": VERMILLION,
    "correct_slower": SKY, "correct_level": ORANGE, "correct_faster": BLUE,
}
# A marker per name as well (a second cue where two colours come close for some readers), and dashed lines for
# baselines that are not NCCL itself (torch's), so a baseline lying on NCCL's curve still shows, and for transfers
# that pull (run on the destination), beside the push of the same mechanism in a shade of the same hue.
MARKERS = {
    "ce": "P", "sm_push": "s", "sm_pull": "D", "tma_push": "^", "tma_pull": "v", "sm": "s", "tma": "^",
    "nccl": "o", "pkit_sm": "s", "pkit_sm_one_shot": "^", "pkit_sm_two_shot": "v", "pkit_ll": "D", "pkit_ce": "P",
    "torch_nccl": "x", "torch_symm_one_shot": "<", "torch_symm_two_shot": ">", "torch_symm": "<", "pkit_gemm": "s",
    "pkit_gemm_flags": "D", "cublas": "o",
    **{name: s.look.marker for name, s in _DRAWN.items()},
}
LINESTYLES = {"torch_nccl": "--", "torch_symm_one_shot": "--", "torch_symm_two_shot": "--", "torch_symm": "--",
              "sm_pull": "--", "tma_pull": "--", **{name: "--" for name, s in _DRAWN.items() if s.look.dashed}}

# How figures name pkit's identifiers: transfer mechanisms (pkit.ops.transfers), collective mechanisms
# (pkit.ops.collectives) and implementations (pkit.experiments.collectives, the torch baselines), GEMMs and
# overlap patterns and schedules (their registry, pkit.ops.overlap_patterns), mechanisms found in candidates
# (pkit.analysis), eval statuses, dtypes, collective ops and roofline bounds (pkit.roofline.Floor.bound). Anything
# else is shown as it is spelled.
LABELS = {
    **{f.name: f.label for f in FAMILIES.values()}, "auto": "auto (pkit picks)",
    **{mechanism(f, d): f"{f.upper()} {d}" for f in ("sm", "tma") for d in DIRECTIONS},
    "nccl": "NCCL", "pkit_sm": "pkit SM", "pkit_sm_one_shot": "pkit SM one-shot", "pkit_sm_two_shot": "pkit SM two-shot",
    "pkit_ll": "pkit LL packets", "pkit_ce": "pkit copy engine", "torch_nccl": "torch.distributed (NCCL)",
    "torch_symm_one_shot": "torch symm. memory one-shot", "torch_symm_two_shot": "torch symm. memory two-shot",
    "torch_symm": "torch symm. memory",
    "empty_kernel": "empty kernel", "pkit_gemm": "pkit GEMM", "pkit_gemm_flags": "pkit GEMM, ready flags set",
    "cublas": "cuBLAS",
    **{name: s.label for name, s in _DRAWN.items()}, **{p.name: p.title for p in _OVERLAP_PATTERNS.values()},
    "torch_distributed": "torch.distributed", "nvshmem": "NVSHMEM", "multicast": "NVLink multicast",
    "none": "none found", "unknown": "unknown",
    "compile_error": "compile error", "runtime_error": "runtime error", "timeout": "timeout",
    "wrong_result": "wrong result", "correct_slower": "correct, slower",
    "correct_level": "correct, level (a tie)", "correct_faster": "correct, faster",
    "bfloat16": "bf16", "float32": "fp32",
    **{op: op.replace("_", "-") for op in _COLLECTIVES},
    "hbm": "HBM", "sync": "latency/sync",
}
LINE_STYLES = ("-", ":", "--", "-.")


def label(name) -> str:
    """The words a figure shows for one of pkit's names (`LABELS`); other names unchanged.

    Example:
        >>> [label(n) for n in ("ce", "sm_push", "bfloat16", "pkit_ll", "torch_nccl", "my_kernel")]
        ['copy engine', 'SM push', 'bf16', 'pkit LL packets', 'torch.distributed (NCCL)', 'my_kernel']
    """
    return LABELS.get(name, str(name))


def colors_for(names) -> dict:
    """{name: colour} for the names a figure draws: each name's fixed colour (`COLORS`), and for names without
    one, the `PALETTE` colours not already taken in this set, in sorted order of the names (colours repeat only
    when a figure draws more names than `PALETTE` has colours).

    Example:
        >>> colors_for(["pkit_ll", "nccl"]) == {"pkit_ll": VERMILLION, "nccl": BLACK}
        True
        >>> colors_for(["shipped", "example", "ce"]) == {"ce": ORANGE, "example": BLUE, "shipped": GREEN}
        True
    """
    import itertools

    names = sorted(set(names), key=str)
    out = {n: COLORS[n] for n in names if n in COLORS}
    spare = itertools.cycle([c for c in PALETTE if c not in out.values()] or PALETTE)  # repeats only past 9 colours
    return {n: out[n] if n in out else next(spare) for n in names}


def marker(name, default: str = "o") -> str:
    """The marker of a name in line plots (`MARKERS`), else `default`."""
    return MARKERS.get(name, default)


def line_look(name, default_marker: str = ".") -> dict:
    """How a line of one of pkit's names is drawn, as keyword arguments of `ax.plot`: its colour (`COLORS`, else
    `colors_for`'s first spare), marker (`MARKERS`, else `default_marker`), line style (`LINESTYLES`, else solid)
    and label (`label`).

    Example:
        >>> line_look("sm_pull") == {"color": SKY, "marker": "D", "ls": "--", "label": "SM pull"}
        True
    """
    return {"color": colors_for([name])[name], "marker": marker(name, default_marker), "ls": LINESTYLES.get(name, "-"),
            "label": label(name)}


def apply_style() -> None:
    """Set pkit's matplotlib style for the rest of the session."""
    import matplotlib as mpl
    from cycler import cycler

    mpl.rcParams.update({**STYLE, "axes.prop_cycle": cycler(color=PALETTE)})


def subplots(*args, **kwargs):
    """`plt.subplots` under pkit's style, with a constrained layout."""
    import matplotlib.pyplot as plt

    apply_style()
    kwargs.setdefault("layout", "constrained")
    return plt.subplots(*args, **kwargs)


def byte_label(nbytes: int) -> str:
    """A byte count as figures print it: B, KiB, MiB or GiB, whole numbers (meant for powers of two).

    Example:
        >>> [byte_label(n) for n in (512, 4096, 16 << 20, 1 << 30)]
        ['512 B', '4 KiB', '16 MiB', '1 GiB']
    """
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if nbytes >= 1 << shift:
            return f"{int(nbytes) >> shift} {unit}"
    return f"{int(nbytes)} B"


def byte_label_fraction(nbytes: float) -> str:
    """A byte count that need not be a power of two, to two significant digits in the largest unit ≥ 1.

    Example:
        >>> [byte_label_fraction(n) for n in (2.3 * 2**20, 262144, 700)]
        ['2.3 MiB', '256 KiB', '700 B']
    """
    for shift, unit in ((30, "GiB"), (20, "MiB"), (10, "KiB")):
        if nbytes >= 1 << shift:
            value = nbytes / (1 << shift)
            return f"{value:.2g} {unit}" if value < 100 else f"{value:.0f} {unit}"
    return f"{nbytes:.3g} B"
