"""Record the overlap studies from a shell: `python -m pkit.experiments.overlap STUDY... [--gpus G...] [--reps N]
[--record]` measures each study (MEASUREMENTS: gemm, the patterns' sweeps, PyTorch's, the timeline), prints its frame,
and with --record writes results/<machine>/overlap_<study>.{csv,json} with the parameters notebook 05 records.
"""
from __future__ import annotations

import pandas as pd

from .sweeps import MEASUREMENTS, measure, parameters


def main(argv=None) -> None:
    """Measure studies, print them; --record writes results/<machine>/overlap_<study>.{csv,json}."""
    import argparse

    import pkit

    parser = argparse.ArgumentParser(prog="python -m pkit.experiments.overlap", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("studies", nargs="+", choices=MEASUREMENTS)
    parser.add_argument("--gpus", type=int, nargs="+", default=None, help="GPU ids (default: every GPU here)")
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--record", action="store_true", help="write results/<machine>/overlap_<study>.{csv,json}")
    args = parser.parse_args(argv)
    if args.gpus is None:  # every GPU here: each study says at once what it needs that this machine lacks
        from ...studies import require_part

        for study in args.studies:
            require_part(f"overlap_{study}", prog="python -m pkit.experiments.overlap")
    for study in args.studies:
        frame = measure(study, args.gpus, args.reps)
        with pd.option_context("display.width", 200, "display.max_columns", None):
            print(frame, flush=True)
        if args.record:
            recorded_as = pkit.results.record(f"overlap_{study}", frame, parameters(args.gpus, args.reps))
            print(f"recorded {recorded_as.csv_path}", flush=True)
