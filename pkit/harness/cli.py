"""`pkit eval` and `pkit problems`: the harness's command line (docs/harness.md).

`register(subparsers)` adds both subcommands to pkit's argparse parser, each parsed once into its command's
arguments (`pkit.harness.commands`) and run by `eval_command` or `problems_command`; `main(argv)` runs them
standalone (`python -m pkit.harness.cli eval ...`). Each command returns an exit code: 0 done, 2 bad arguments or a run
that would select nothing. Every argument is checked before any worker starts, and a bad one is one line on
stderr naming the option, what was expected and what was given (`--atol: expected a number >= 0, got -1`).

Example:
    $ pkit problems --world-size 2
    $ pkit eval --solutions samples --problems 01_all_reduce --trials 5 --perf --out runs/samples.jsonl
    $ pkit eval --pkb-root ~/ParallelKernelBench --solutions ~/ParallelKernelBench/solutions_cuda --out pkb.jsonl
    $ pkit eval --baselines --size large      # on a machine with GPUs: results/<machine>/baselines.csv
    $ pkit eval --shard 0/4 --out runs/shard-0.jsonl    # one of four shards (a Slurm array task)
    $ pkit eval merge runs/all.jsonl runs/shard-*.jsonl
    $ pkit eval --ray local --out runs/all.jsonl        # every shard as a Ray task
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..arguments import OneLineParser
from ..studies import FIGURES_MACHINE
from .commands import EvalCommand, MergeCommand, ProblemsCommand
from .eval_command import run_eval, run_merge
from .options import EvalOptions
from .problems import default_root
from .problems_command import TABLE_WIDTH, run_problems


def register(subparsers) -> None:
    """Add `eval` (with `eval merge`) and `problems` to an argparse subparsers object."""
    _add_eval(subparsers)
    _add_problems(subparsers)


def _add_eval(subparsers) -> None:
    ev = subparsers.add_parser("eval", help="evaluate candidate solutions (JSONL records)",
                               description="Evaluate candidates: one fresh set of worker processes per candidate; "
                                           "writes one JSON line per (problem, solution, sample).")
    _problem_source_args(ev)
    ev.add_argument("--solutions", type=Path, default=None,
                    help="folder of candidates (layouts in docs/harness.md) or one candidate file (its problem from "
                         "its path, or the one problem of --problems); default: the problems root, i.e. the shipped "
                         "problems/*/solutions/*.py; required with --pkb-root")
    ev.add_argument("--reference-as-candidate", action="store_true",
                    help="also evaluate each selected problem's own reference as a candidate")
    ev.add_argument("--model", default=None, help="model name for candidates whose path names none")
    ev.add_argument("--size", default="auto", help="size name (tiny, large, ...; PKB: MxN); auto = tiny on CPU, "
                                                   "large on GPUs (PKB: 1024x1024)")
    _timing_args(ev)
    _run_args(ev)
    ev.set_defaults(func=lambda args: run_eval(EvalCommand.from_namespace(args)))
    actions = ev.add_subparsers(dest="eval_command", metavar="merge", required=False)
    mg = actions.add_parser("merge", help="join the JSONL files of shards into one",
                            description="Join the JSONL files of a split run into OUT (written anew), one record "
                                        "per key; refuses records of different harness versions, problem files, "
                                        "candidate files or settings, and duplicates whose statuses differ.")
    mg.add_argument("merged", type=Path, metavar="OUT", help="JSONL file to write")
    mg.add_argument("inputs", type=Path, nargs="+", metavar="SHARD", help="JSONL files of pkit eval --out")
    mg.set_defaults(func=lambda args: run_merge(MergeCommand.from_namespace(args)))



def _timing_args(ev: argparse.ArgumentParser) -> None:
    """`pkit eval`'s options of how each candidate is checked and timed."""
    ev.add_argument("--trials", type=int, default=5, help="random-input trials per candidate (default 5)")
    ev.add_argument("--seed", type=int, default=0, help="seed of trial 0; trial t uses seed+t (default 0)")
    ev.add_argument("--perf", action="store_true",
                    help="full timing (--warmup/--iters, L2 rotation); without it a quick timing only decides "
                         "correct_faster, correct_level or correct_slower")
    ev.add_argument("--warmup", type=int, default=25, help="warm-up calls with --perf (default 25)")
    ev.add_argument("--iters", type=int, default=100, help="measured calls with --perf (default 100)")
    ev.add_argument("--timeout", type=float, default=300.0, help="seconds per candidate before all ranks are "
                                                                 "killed (default 300)")
    ev.add_argument("--fresh-mib", type=float, default=None,
                    help="MiB of distinct timed input sets a rank holds at once; past it the timed calls come back "
                         "to sets already used (default 4096 on GPUs, 512 on CPUs)")
    ev.add_argument("--output-mib", type=float, default=EvalOptions.output_mib,
                    help="MiB of one rank's stdout and stderr kept on disk; past it the output is counted and dropped "
                         f"and the record flagged loud_output (default {EvalOptions.output_mib:g})")
    ev.add_argument("--atol", type=float, default=None, help="absolute tolerance (default: by dtype)")
    ev.add_argument("--rtol", type=float, default=None, help="relative tolerance (default: by dtype)")


def _run_args(ev: argparse.ArgumentParser) -> None:
    """`pkit eval`'s options of where the run goes and how it is split."""
    ev.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                    help="cuda: one process per GPU with NCCL; cpu: gloo (auto: cuda when enough GPUs)")
    ev.add_argument("--out", type=Path, default=None,
                    help="JSONL file to write (required unless --baselines); a file that holds records already is "
                         "resumed: the candidates recorded there are skipped")
    ev.add_argument("--shard", default=None, metavar="K/N",
                    help="evaluate only shard K of N (K from 0: $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT under "
                         "#SBATCH --array=0-(N-1)); the N shards partition the candidates alike on every machine")
    ev.add_argument("--ray", default=None, metavar="ADDRESS",
                    help="run the shards as Ray tasks on the cluster at ADDRESS ('local': start one here; 'auto': "
                         "the one `ray start` made); records are written to --out by this process. Needs "
                         "pip install 'pkit[ray]'")
    ev.add_argument("--shards", type=int, default=None, metavar="N",
                    help="with --ray: N shards, one task each (default: as many as the cluster runs at once)")
    ev.add_argument("--baselines", action="store_true",
                    help="time every problem's reference and record results/<machine>/baselines.csv")
    ev.add_argument("--machine", default=None, help="machine slug for --baselines (default: this machine's)")
    ev.add_argument("--force", action="store_true",
                    help="run --baselines or --size large on a machine without GPUs (refused otherwise: CPU times "
                         "of large inputs take minutes per problem)")
    ev.add_argument("--dry-run", action="store_true",
                    help="check the arguments and list what would run, starting no worker")


def _add_problems(subparsers) -> None:
    pr = subparsers.add_parser("problems", help="list problems with category and cost model",
                               description="List problems with category and per-GPU cost (FLOPs, HBM bytes, link "
                                           "bytes) and roofline time at each size.")
    _problem_source_args(pr)
    pr.add_argument("--sizes", nargs="+", default=None, help="sizes to list (default: all of each problem)")
    pr.add_argument("--format", choices=("table", "csv", "json"), default="table", help="output format")
    pr.add_argument("--machine", default=FIGURES_MACHINE,
                    help="whose measured ceilings (results/<machine>/ceilings.csv) give the measured roofline "
                         f"(default {FIGURES_MACHINE})")
    pr.add_argument("--wide", action="store_true",
                    help=f"the table with every column (default: fits {TABLE_WIDTH} characters: repeated and empty "
                         "columns left out, what every row shares said once under it, then the least needed columns "
                         "left out until it fits)")
    pr.set_defaults(func=lambda args: run_problems(ProblemsCommand.from_namespace(args)))



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



def main(argv: list[str] | None = None) -> int:
    """Run `eval` or `problems` as a standalone program."""
    parser = OneLineParser(prog="pkit", description="pkit harness: eval and problems")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
