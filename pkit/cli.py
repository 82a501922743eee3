"""The `pkit` command: info, list, figures, eval, problems."""
from __future__ import annotations

import argparse
import os
import sys
import textwrap

from .arguments import OneLineParser

WIDTH = 110  # characters per line of a listing printed one block per entry


def info(args: argparse.Namespace) -> int:
    """GPUs, link matrix, peer access and software versions on one screen."""
    from . import gpus as D
    from .results import _versions, machine_slug

    versions = _versions()
    print("pkit", __import__("pkit").__version__, "|", ", ".join(f"{k} {v}" for k, v in versions.items() if v))
    gpus = D.devices()
    if not gpus:
        print("No CUDA GPU visible to this process: kernels still compile for an explicit arch (e.g. sm_90a), "
              "and notebooks replay recorded results.")
        return 0
    print(f"machine {machine_slug()} | driver {D.driver_version()}")
    for g in gpus:
        print(f"  GPU{g.index}: {g.name} (sm_{g.compute_capability.replace('.', '')}, {g.sms} SMs, "
              f"{g.memory_bytes / 2**30:.0f} GiB, L2 {g.l2_bytes / 2**20:.0f} MiB, PCI {g.pci_bus_id})")
    if len(gpus) > 1:
        topo = D.topology()
        print("links:")
        print(topo)
        print("peer access (P2P / P2P atomics):")
        for row in topo.to_frame().itertuples():
            print(f"  GPU{row.src} -> GPU{row.dst}: {'yes' if row.p2p else 'no'} / {'yes' if row.p2p_atomics else 'no'}")
    return 0


# What `pkit list` shows: name -> (module, function returning a DataFrame, one line on what it lists)
LISTINGS = {
    "studies": ("pkit.studies", "list_studies", "what each study records, its notebook, what it needs of this machine"),
    "collectives": ("pkit.ops.collectives", "list_collectives", "collective ops and the mechanisms that run them"),
    "schedules": ("pkit.ops.overlap", "list_schedules", "compute/communication overlap schedules per pattern"),
    "systems": ("pkit.experiments.roofline_gap.projection", "list_systems",
                "systems the roofline projection models (datasheets)"),
}


def list_registry(args: argparse.Namespace) -> int:
    """Print one of pkit's registries (LISTINGS) as a table."""
    from importlib import import_module

    import pandas as pd

    module, function, _ = LISTINGS[args.registry]
    frame = getattr(import_module(module), function)()
    frame = frame.reset_index() if frame.index.name else frame  # a registry keyed by name keeps it as a column
    with pd.option_context("display.width", 200, "display.max_columns", None, "display.max_colwidth", 90):
        table = frame.to_string(index=False)
    if max(map(len, table.splitlines())) <= 200:  # a table that fits a wide terminal
        print(table)
        return 0
    for row in frame.astype(str).itertuples(index=False):  # too wide for a terminal: one block per entry
        (key, name), *rest = zip(frame.columns, row)
        print(f"{key}: {name}")
        width = max(len(c) for c, _ in rest)
        for column, value in rest:
            print("  " + textwrap.fill(f"{column + ':':<{width + 1}} {value}", WIDTH, subsequent_indent=" " * (width + 4)))
    return 0


def figures(args: argparse.Namespace) -> int:
    """Regenerate figures by executing notebooks."""
    # papermill validates notebooks with nbformat, which imports jsonschema, which compiles the grammar of IRIs
    # (rfc3987_syntax, 1.5-2 s) for a format check nothing here makes: this process goes without it.
    sys.modules.setdefault("rfc3987_syntax", None)
    from .notebooks import NotebookFailed, check_arguments, run_all

    try:
        check_arguments(args.mode, args.only, args.machine)
    except ValueError as e:
        print(f"pkit figures: error: {e}", file=sys.stderr)
        return 2
    try:
        runs = run_all(args.mode, args.only, args.machine, verbose=args.verbose)
    except NotebookFailed as e:
        print(f"pkit figures: {e}", file=sys.stderr)
        return 1
    counts = {what: sum(1 for r in runs if test(r)) for what, test in (
        ("measured", lambda r: not r.skipped and r.mode == "measure"),
        ("replayed", lambda r: not r.skipped and r.mode == "replay"), ("skipped", lambda r: r.skipped))}
    print(", ".join(f"{n} {what}" for what, n in counts.items() if n) + "; figures: figures/ (another machine's in "
          "figures/<machine>/); runs: build/notebooks/")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="pkit", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("info", help="GPUs, links, peer access, versions",
                   description="Show this machine's GPUs, their links and peer access, and the versions of the "
                               "software pkit uses; without a GPU, say so (exit 0).").set_defaults(func=info)
    listing = sub.add_parser("list", help=f"one of pkit's registries ({', '.join(LISTINGS)})",
                             description="Print one of pkit's registries as a table: " + "; ".join(
                                 f"{name}: {what}" for name, (_, _, what) in LISTINGS.items()) + ".")
    listing.add_argument("registry", choices=tuple(LISTINGS), help="which registry")
    listing.set_defaults(func=list_registry)
    fig = sub.add_parser("figures", help="run the notebooks through papermill and regenerate figures/",
                         description="Run the notebooks through papermill: measure what this machine can, replay "
                                     "the recorded results (results/<machine>/) for the rest, and write figures/ "
                                     "(another machine's in figures/<machine>/) and the executed copies in "
                                     "build/notebooks/.")
    fig.add_argument("--mode", choices=("auto", "measure", "replay"), default="auto",
                     help="auto: measure what this machine can (pkit list studies), replay the rest; measure: "
                          "the same, but say what each study that only replays would need")
    fig.add_argument("--only", nargs="+", metavar="NAME", help="notebook stems or prefixes, e.g. 00 01_compute")
    fig.add_argument("--machine", help="recorded results to replay (default: the machine of the committed figures, "
                     "pkit.studies.FIGURES_MACHINE; measuring: this machine)")
    fig.add_argument("--verbose", action="store_true",
                     help="each progress line in full (why a notebook was skipped, how to record what it lacks); "
                          "without it, one line of at most 120 characters per notebook")
    fig.set_defaults(func=figures)
    try:
        from .harness.cli import register
    except ImportError:
        register = None
    if register is not None:
        register(sub)
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:  # the reader (`| head`, a pager) stopped early: not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
