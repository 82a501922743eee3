"""`pkit eval` and `pkit problems`: the harness's command line (docs/harness.md).

`register(subparsers)` adds both subcommands to pkit's argparse parser; `main(argv)` runs them standalone
(`python -m pkit.harness.cli eval ...`). Each command returns an exit code: 0 done, 2 bad arguments.

Example:
    $ pkit problems --world-size 2
    $ pkit eval --solutions samples --problems 01_all_reduce --trials 5 --perf --out runs/samples.jsonl
    $ pkit eval --pkb-root ~/ParallelKernelBench --solutions ~/ParallelKernelBench/solutions_cuda --out pkb.jsonl
    $ pkit eval --baselines --size large      # on a machine with GPUs: results/<machine>/baselines.csv
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from ..errors import PkitError
from ..studies import FIGURES_MACHINE
from . import pkb, solutions
from .contain import Interrupted
from .problems import cost_table, default_root, discover, select
from .records import status_counts
from .runner import EvalOptions, evaluate, reference_candidate


def register(subparsers) -> None:
    """Add `eval` and `problems` to an argparse subparsers object."""
    ev = subparsers.add_parser("eval", help="evaluate candidate solutions (JSONL records)",
                               description="Evaluate candidates: one fresh set of worker processes per candidate; "
                                           "writes one JSON line per (problem, solution, sample).")
    _problem_source_args(ev)
    ev.add_argument("--solutions", type=Path, default=None,
                    help="folder of candidates (layouts in docs/harness.md) or one candidate file (its problem from its "
                         "path, or the one problem of --problems); default: the problems root, i.e. the "
                         "shipped problems/*/solutions/*.py; required with --pkb-root")
    ev.add_argument("--reference-as-candidate", action="store_true",
                    help="also evaluate each selected problem's own reference as a candidate")
    ev.add_argument("--model", default=None, help="model name for candidates whose path names none")
    ev.add_argument("--size", default="auto", help="size name (tiny, large, ...; PKB: MxN); auto = tiny on CPU, "
                                                   "large on GPUs (PKB: 1024x1024)")
    ev.add_argument("--trials", type=int, default=5, help="random-input trials per candidate (default 5)")
    ev.add_argument("--seed", type=int, default=0, help="seed of trial 0; trial t uses seed+t (default 0)")
    ev.add_argument("--perf", action="store_true",
                    help="full timing (--warmup/--iters, L2 rotation); without it a quick timing only decides "
                         "correct_faster vs correct_slower")
    ev.add_argument("--warmup", type=int, default=25, help="warm-up calls with --perf (default 25)")
    ev.add_argument("--iters", type=int, default=100, help="measured calls with --perf (default 100)")
    ev.add_argument("--timeout", type=float, default=300.0, help="seconds per candidate before all ranks are "
                                                                 "killed (default 300)")
    ev.add_argument("--atol", type=float, default=None, help="absolute tolerance (default: by dtype)")
    ev.add_argument("--rtol", type=float, default=None, help="relative tolerance (default: by dtype)")
    ev.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                    help="cuda: one process per GPU with NCCL; cpu: gloo (auto: cuda when enough GPUs)")
    ev.add_argument("--out", type=Path, default=None, help="JSONL file to write (required unless --baselines)")
    ev.add_argument("--baselines", action="store_true",
                    help="time every problem's reference and record results/<machine>/baselines.csv")
    ev.add_argument("--machine", default=None, help="machine slug for --baselines (default: this machine's)")
    ev.set_defaults(func=run_eval)

    pr = subparsers.add_parser("problems", help="list problems with category and cost model",
                               description="List problems with category and per-GPU cost (FLOPs, HBM bytes, link "
                                           "bytes) and roofline time at each size.")
    _problem_source_args(pr)
    pr.add_argument("--sizes", nargs="+", default=None, help="sizes to list (default: all of each problem)")
    pr.add_argument("--format", choices=("table", "csv", "json"), default="table", help="output format")
    pr.add_argument("--machine", default=FIGURES_MACHINE,
                    help="whose measured ceilings (results/<machine>/ceilings.csv) give the measured roofline "
                         f"(default {FIGURES_MACHINE})")
    pr.set_defaults(func=run_problems)


def _problem_source_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--problems", nargs="+", default=None, metavar="NAME",
                        help="problems to use: folder name, META name or number (default: all)")
    parser.add_argument("--problems-root", type=Path, default=None,
                        help=f"folder of <NN>_<slug>/problem.py (default: {default_root()})")
    parser.add_argument("--pkb-root", type=Path, default=None,
                        help="a ParallelKernelBench checkout: use its reference/ problems and input builder")
    parser.add_argument("--world-size", type=int, default=2, help="ranks, one process each (default 2)")
    parser.add_argument("--dtype", default=None, help="dtype name (default: each problem's first)")
    parser.add_argument("--ceilings", default="H200", help="GPU whose datasheet gives the roofline (default H200)")


def _problems(args):
    if args.pkb_root is not None and args.problems_root is not None:
        raise ValueError("--pkb-root and --problems-root: give one of them, not both")
    found = pkb.discover(args.pkb_root) if args.pkb_root is not None else discover(args.problems_root)
    return found, select(found, args.problems)


def run_problems(args) -> int:
    """`pkit problems`: print the cost table."""
    try:
        _, chosen = _problems(args)
        table = cost_table(chosen, args.world_size, args.dtype, args.sizes, args.ceilings, machine=args.machine)
    except (ValueError, PkitError) as e:
        print(f"pkit problems: error: {e}", file=sys.stderr)
        return 2
    if args.format == "csv":
        print(table.to_csv(index=False), end="")
    elif args.format == "json":
        print(table.to_json(orient="records", indent=1))
    else:
        print(table.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    return 0


def run_eval(args) -> int:
    """`pkit eval`: evaluate candidates (or, with --baselines, record reference times)."""
    try:
        options = EvalOptions(world_size=args.world_size, size=args.size, dtype=args.dtype, trials=args.trials,
                              seed=args.seed, perf=args.perf, warmup=args.warmup, iters=args.iters,
                              timeout_s=args.timeout, atol=args.atol, rtol=args.rtol, device=args.device,
                              ceilings=args.ceilings)
        options.validate()
        if args.baselines:
            return _run_baselines(args, options)
        if args.out is None:
            raise ValueError("--out: a JSONL file to write is required (or pass --baselines)")
        found, chosen = _problems(args)
        pairs = _pairs(args, found, chosen)
        if not pairs:
            raise ValueError(f"--solutions: no candidates for {[p.name for p in chosen]} under "
                             f"{args.solutions or default_root()} (layouts: docs/harness.md)")
        from ..results import provenance

        parameters = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "func"}
        records = evaluate(pairs, options, args.out, provenance=provenance(parameters))
    except (ValueError, PkitError) as e:
        print(f"pkit eval: error: {e}", file=sys.stderr)
        return 2
    except Interrupted as e:
        print(f"pkit eval: {e}; workers killed, temp folders removed; records so far are in {args.out}",
              file=sys.stderr)
        return 128 + e.signum
    counts = ", ".join(f"{k} {v}" for k, v in status_counts(records).items() if v)
    print(f"{len(records)} records → {args.out}: {counts}")
    return 0


def _pairs(args, found, chosen) -> list:
    if args.pkb_root is not None and args.solutions is None:
        raise ValueError("--solutions: required with --pkb-root (e.g. <checkout>/solutions_cuda)")
    folder = args.solutions if args.solutions is not None else (args.problems_root or default_root())
    aliases = {a: p.name for p in found for a in p.aliases}
    if folder.is_file():
        candidates, unmatched = [solutions.single_file(folder, aliases, [p.name for p in chosen])], []
    else:
        candidates, unmatched = solutions.discover(folder, aliases)
    for rel in unmatched:
        print(f"pkit eval: skipping {rel}: its path names no known problem", file=sys.stderr)
    by_name = {p.name: p for p in chosen}
    pairs = [(by_name[c.problem], c) for c in candidates if c.problem in by_name]
    if args.model:
        pairs = [(p, c if c.model else replace(c, model=args.model)) for p, c in pairs]
    if args.reference_as_candidate:
        pairs = [(p, reference_candidate(p)) for p in chosen] + pairs
    return pairs


def _run_baselines(args, options: EvalOptions) -> int:
    from .baseline import baselines

    if args.pkb_root is not None:
        raise ValueError("--baselines: records pkit problems only; drop --pkb-root")
    size = "large" if args.size == "auto" else args.size
    frame = baselines(size=size, dtype=args.dtype, world_size=args.world_size, problems_root=args.problems_root,
                      names=args.problems, trials=args.trials,
                      warmup=args.warmup, iters=args.iters, timeout_s=args.timeout, device=args.device,
                      machine=args.machine, out=args.out)
    print(frame.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run `eval` or `problems` as a standalone program."""
    parser = argparse.ArgumentParser(prog="pkit", description="pkit harness: eval and problems")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
