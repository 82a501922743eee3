"""`pkit eval` and `pkit problems`: the harness's command line (docs/harness.md).

`register(subparsers)` adds both subcommands to pkit's argparse parser; `main(argv)` runs them standalone
(`python -m pkit.harness.cli eval ...`). Each command returns an exit code: 0 done, 2 bad arguments or a run
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
import math
import numbers
import re
import sys
import textwrap
from dataclasses import dataclass, replace
from pathlib import Path

from ..errors import PkitError
from ..studies import FIGURES_MACHINE
from . import pkb, ray_pool, shards, solutions
from .contain import Interrupted
from .merge import merge, write
from .paths import check_out, kind
from .problem import Problem, describe_sizes
from .problems import cost_table, default_root, discover, narrow, not_problems, select
from .records import read_lines, status_counts
from .resume import Recorded, sole_writer
from .options import EvalOptions, pick_device, unsupported
from .shards import Shard
from .solutions import by_problem, reference_candidate

TABLE_WIDTH = 100
"""Characters per line the default `pkit problems` output fits (`--wide`: every column, whatever the width)."""
LEFT_OUT_FIRST = ("category", "sync_steps", "roofline_measured_bound", "bound")
"""Columns the default `pkit problems` table leaves out, in this order, while it is wider than `TABLE_WIDTH`."""
SHOWN = 3
"""How many names a one-line message lists before '... (N in all)'."""


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
    ev.set_defaults(func=run_eval)
    actions = ev.add_subparsers(dest="eval_command", metavar="merge", required=False)
    mg = actions.add_parser("merge", help="join the JSONL files of shards into one",
                            description="Join the JSONL files of a split run into OUT (written anew), one record "
                                        "per key; refuses records of different harness versions, problem files, "
                                        "candidate files or settings, and duplicates whose statuses differ.")
    mg.add_argument("merged", type=Path, metavar="OUT", help="JSONL file to write")
    mg.add_argument("inputs", type=Path, nargs="+", metavar="SHARD", help="JSONL files of pkit eval --out")
    mg.set_defaults(func=run_merge)

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


def option_name(field: str) -> str:
    """The command-line option of an `EvalOptions` field, for messages.

    >>> option_name("timeout_s"), option_name("world_size")
    ('--timeout', '--world-size')
    """
    return "--timeout" if field == "timeout_s" else "--" + field.replace("_", "-")


def listed(names: list[str]) -> str:
    """`names` joined for a one-line message: the first `SHOWN`, then how many in all.

    >>> listed(["a", "b"]), listed(["a", "b", "c", "d", "e"])
    ('a, b', 'a, b, c, ... (5 in all)')
    """
    return ", ".join(names) if len(names) <= SHOWN else ", ".join(names[:SHOWN]) + f", ... ({len(names)} in all)"


def _note(command: str, line: str) -> None:
    print(f"pkit {command}: {line}", file=sys.stderr, flush=True)


def _problems(args, command: str) -> tuple[list[Problem], list[Problem]]:
    """(every problem found, the ones `--problems` selects); ValueError naming the option when there are none."""
    if args.pkb_root is not None and args.problems_root is not None:
        raise ValueError("--pkb-root and --problems-root: give one of them, not both")
    if args.pkb_root is not None:
        if not args.pkb_root.is_dir():
            raise ValueError(f"--pkb-root: expected a ParallelKernelBench checkout (a folder holding reference/), got "
                             f"{args.pkb_root} ({kind(args.pkb_root) or 'no such folder'})")
        found = pkb.discover(args.pkb_root)
    else:
        root = args.problems_root or default_root()
        found = discover(root) if root.is_dir() else []
        if not found:
            why = "none there" if root.is_dir() else kind(root) or "no such folder"
            raise ValueError(f"--problems-root: expected a folder of <NN>_<name>/problem.py, got {root} ({why})")
        others = not_problems(root)
        if others:
            _note(command, f"{len(others)} folder(s) under {root} hold no problem.py and are not problems: "
                           f"{listed([d.name for d in others])}")
    return found, select(found, args.problems, "--problems")


def check_dtype(problems: list[Problem], dtype: str | None) -> None:
    """ValueError naming --dtype unless `dtype` (None: each problem's first) is one of a problem's dtypes."""
    dtypes = list(dict.fromkeys(d for p in problems for d in p.dtypes))
    if dtype is not None and dtype not in dtypes:
        raise ValueError(f"--dtype: expected a dtype of the selected problems ({', '.join(dtypes)}), got {dtype!r}")


def check_sizes(problems: list[Problem], sizes: list[str] | None) -> None:
    """ValueError naming --sizes unless each of `sizes` is a size of some selected problem."""
    unknown = [s for s in sizes or () if not any(p.has_size(s) for p in problems)]
    if unknown:
        raise ValueError(f"--sizes: expected sizes of the selected problems ({describe_sizes(problems)}), "
                         f"got {', '.join(unknown)}")


def run_problems(args) -> int:
    """`pkit problems`: print the cost table."""
    try:
        EvalOptions(world_size=args.world_size, ceilings=args.ceilings).validate(option_name)
        _, chosen = _problems(args, "problems")
        check_dtype(chosen, args.dtype)
        check_sizes(chosen, args.sizes)
        table = cost_table(chosen, args.world_size, args.dtype, args.sizes, args.ceilings, machine=args.machine)
    except (ValueError, PkitError) as e:
        return _error("problems", e)
    if args.format == "csv":
        print(table.to_csv(index=False), end="")
    elif args.format == "json":
        print(table.to_json(orient="records", indent=1))
    elif args.wide:
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


@dataclass
class EvalPlan:
    """What `pkit eval` would run, every argument checked: options, the problems that run under them, the
    (problem, candidate) pairs (none for --baselines; those of `shard` when given, of `found` in all), the size
    name and the device."""

    options: EvalOptions
    problems: list[Problem]
    pairs: list
    size: str
    device: str
    shard: Shard | None = None
    found: int = 0


def plan_eval(args) -> EvalPlan:
    """Check every argument of `pkit eval` and find its candidates, starting nothing (ValueError or PkitError
    naming the first bad option)."""
    options = EvalOptions(world_size=args.world_size, size=args.size, dtype=args.dtype, trials=args.trials,
                          seed=args.seed, perf=args.perf, warmup=args.warmup, iters=args.iters,
                          timeout_s=args.timeout, atol=args.atol, rtol=args.rtol, device=args.device,
                          ceilings=args.ceilings, fresh_mib=args.fresh_mib, output_mib=args.output_mib)
    options.validate(option_name)
    if args.baselines and args.pkb_root is not None:
        raise ValueError("--baselines: records pkit problems only; drop --pkb-root")
    if args.out is None and not args.baselines:
        raise ValueError("--out: expected a JSONL file to write, got none (e.g. --out runs/run.jsonl; or pass "
                         "--baselines)")
    if args.out is not None:
        check_out(args.out)
    shard = check_sharding(args)
    found, chosen = _problems(args, "eval")
    problems = runnable(chosen, options)
    size = "large" if args.baselines and args.size == "auto" else args.size
    check_size(problems, size)
    check_machine(args, size)
    device = pick_device(options.device, options.world_size)
    pairs = [] if args.baselines else _pairs(args, found, problems)
    chosen_pairs = shards.select(pairs, shard) if shard else pairs
    return EvalPlan(options, problems, chosen_pairs, size, device, shard, len(pairs))


def check_sharding(args) -> Shard | None:
    """The shard of --shard (None without it); ValueError naming --shard, --shards or --ray when they do not go
    together or Ray is missing."""
    if args.shards is not None and args.ray is None:
        raise ValueError(f"--shards: only with --ray, got --shards {args.shards} without it (one shard of a split "
                         "run here: --shard K/N)")
    if args.shards is not None and args.shards < 1:
        raise ValueError(f"--shards: expected an integer >= 1, got {args.shards}")
    if args.ray is not None:
        if args.baselines or args.shard is not None:
            which = "--baselines" if args.baselines else "--shard"
            raise ValueError(f"--ray: expected a run of candidates, got {which} too (--ray runs every shard itself: "
                             "--shards N)")
        ray_pool.require_ray()
    if args.shard is None:
        return None
    if args.baselines:
        raise ValueError("--shard: only for candidates, got --baselines too (split a baseline sweep with --problems)")
    return Shard.parse(args.shard)


def runnable(problems: list[Problem], options: EvalOptions) -> list[Problem]:
    """The `problems` that run at `options`' world size and dtype (one line names the others); ValueError
    naming --world-size or --dtype when none does."""
    at_size = [p for p in problems if not p.world_sizes or options.world_size in p.world_sizes]
    if not at_size:
        sizes = sorted({w for p in problems for w in p.world_sizes})
        raise ValueError(f"--world-size: expected a world size the selected problems run at "
                         f"({', '.join(map(str, sizes))}), got {options.world_size}")
    check_dtype(at_size, options.dtype)
    skipped = [f"{p.name} ({unsupported(p, options)})" for p in problems if unsupported(p, options)]
    if skipped:
        _note("eval", f"skipping {listed(skipped)}")
    return [p for p in problems if not unsupported(p, options)]


def check_size(problems: list[Problem], size: str) -> None:
    """ValueError naming --size unless every problem has `size` ('auto' always passes)."""
    lacking = [p for p in problems if size != "auto" and not p.has_size(size)]
    if lacking:
        which = f"; {listed([p.name for p in lacking])} lack it" if lacking != problems else ""
        raise ValueError(f"--size: expected a size of every selected problem ({describe_sizes(lacking)}), got "
                         f"{size!r}{which}")


def gpu_count() -> int:
    """The CUDA GPUs this process sees (NVML; 0 without a driver)."""
    from ..gpus import devices

    return len(devices())


def check_machine(args, size: str) -> None:
    """Refuse --baselines and --size large on a machine without GPUs unless --force: CPU times of large
    inputs take minutes per problem and measure nothing a GPU study needs."""
    if args.force or gpu_count() > 0:
        return
    if args.baselines:
        raise ValueError("--baselines: expected a machine with GPUs, got none here: CPU reference times take "
                         "minutes per problem and would not be a GPU machine's; run it on one, or pass --force "
                         "(then the table is printed, not recorded in the repository's results/)")
    if size == "large":
        raise ValueError("--size: expected tiny on a machine without GPUs, got 'large' (minutes per candidate on "
                         "the CPU); drop --size (auto is tiny here), or pass --force to run it anyway")


def run_eval(args) -> int:
    """`pkit eval`: evaluate candidates (or, with --baselines, record reference times)."""
    try:
        plan = plan_eval(args)
        if args.dry_run:
            return _dry_run(args, plan)
        if args.baselines:
            return _run_baselines(args, plan)
        return _run_on_ray(args, plan) if args.ray is not None else _run_here(args, plan)
    except (ValueError, PkitError) as e:
        return _error("eval", e)
    except Interrupted as e:
        print(f"pkit eval: {e}; workers killed, temp folders removed; records so far are in {args.out} (run the "
              "same command again to resume)", file=sys.stderr)
        return 128 + e.signum


def _parameters(args) -> dict:
    """The command line's arguments as the records' provenance carries them."""
    return {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items() if k != "func"}


def _resumed(args, plan: EvalPlan, device: str) -> tuple[Recorded, list]:
    """(what --out holds, the plan's pairs it does not hold yet); ValueError naming --out when its records may
    not be resumed by this run. One line says what is skipped."""
    recorded = Recorded.read(args.out)
    recorded.check(plan.pairs, plan.options)
    todo = recorded.remaining(plan.pairs, plan.options, device)
    if len(todo) < len(plan.pairs):
        _note("eval", f"resuming {args.out}: {len(plan.pairs) - len(todo)} of the {len(plan.pairs)} candidates are "
                      f"recorded there already, {len(todo)} to run")
    if recorded.partial_bytes:
        _note("eval", f"{args.out} ends in a line cut short ({recorded.partial_bytes} bytes, from a run killed "
                      "while writing it): it is dropped and its candidate evaluated again")
    return recorded, todo


def _run_here(args, plan: EvalPlan) -> int:
    """Evaluate the plan's pairs (one shard's with --shard) in this process, resuming --out."""
    from ..results import provenance
    from .runner import evaluate  # torch: imported by the commands that evaluate, not by `pkit --help`

    if plan.shard is not None:
        _note("eval", f"shard {plan.shard.label}: {len(plan.pairs)} of {plan.found} candidates")
    with sole_writer(args.out):
        recorded, todo = _resumed(args, plan, plan.device)
        recorded.drop_partial()
        stamp = dict(provenance(_parameters(args)), shard=plan.shard.label if plan.shard else None)
        written = evaluate(todo, plan.options, args.out, provenance=stamp, append=True) if todo else []
    return _summary(args.out, len(written))


def _run_on_ray(args, plan: EvalPlan) -> int:
    """Evaluate the plan's pairs as Ray tasks, one per shard, resuming --out; exit code 1 when a task failed."""
    started = ray_pool.connect(args.ray)
    try:
        device = ray_pool.cluster_device(plan.options.device, plan.options.world_size)
        options = replace(plan.options, device=device)
        count = args.shards or min(len(plan.pairs), ray_pool.slots(options.world_size, device))
        with sole_writer(args.out):
            recorded, todo = _resumed(args, plan, device)
            recorded.drop_partial()
            parts = [(f"{k}/{count}", recorded.remaining(part, options, device))
                     for k, part in enumerate(shards.split(plan.pairs, count))]
            _note("eval", f"{len(todo)} candidates in {count} shards as Ray tasks on {args.ray}, each asking for "
                          f"{ray_pool.task_resources(options.world_size, device)}")
            written, failures = ray_pool.run(parts, options, _parameters(args), args.out, recorded.keys)
    finally:
        if started:
            ray_pool.require_ray().shutdown()
    for line in failures:
        _note("eval", f"{line}; its records so far are in {args.out} (run the same command again to resume)")
    code = _summary(args.out, len(written))
    return 1 if failures else code


def _summary(out: Path, ran: int) -> int:
    """Print what --out holds now (and how many records this run wrote); exit code 0."""
    lines, _ = read_lines(out)
    print(f"{len(lines)} records → {out} ({ran} run now): {counted([r for _, r in lines])}")
    return 0


def counted(records: list[dict]) -> str:
    """How many records have each status, for a console line.

    >>> counted([{"status": "timeout"}, {"status": "timeout"}, {"status": "correct_level"}]), counted([])
    ('timeout 2, correct_level 1', 'none')
    """
    return ", ".join(f"{k} {v}" for k, v in status_counts(records).items() if v) or "none"


def run_merge(args) -> int:
    """`pkit eval merge OUT SHARD...`: join shard files into OUT; one line per shard, then the totals."""
    try:
        if any(args.merged.resolve() == p.resolve() for p in args.inputs):
            raise ValueError(f"OUT: expected a file other than the shards, got {args.merged}, one of them")
        check_out(args.merged, "OUT")
        merged = merge(args.inputs)
        write(merged.records, args.merged)
    except (ValueError, PkitError) as e:
        return _error("eval merge", e)
    for source in merged.sources:
        print(source.describe())
    print(f"{len(merged.records)} records → {args.merged}: {counted(merged.records)}")
    return 0


def _error(command: str, e: Exception) -> int:
    """Print `e` as the one line of a bad argument; the exit code 2."""
    print(f"pkit {command}: error: {' '.join(str(e).split())}", file=sys.stderr)
    return 2


def _dry_run(args, plan: EvalPlan) -> int:
    """Print what `pkit eval` would run: one line per problem, then the totals; exit code 0. With --out holding
    records, only what a resumed run would evaluate."""
    pairs = plan.pairs if args.baselines else _resumed(args, plan, plan.device)[1]
    if plan.shard is not None:
        print(f"shard {plan.shard.label}: {len(plan.pairs)} of {plan.found} candidates")
    if args.ray is not None:
        print(f"as Ray tasks on {args.ray}: " + (f"{args.shards} shards" if args.shards else
                                                  "as many shards as the cluster runs tasks at once"))
    groups = [(p, [reference_candidate(p)]) for p in plan.problems] if args.baselines else by_problem(pairs)
    for problem, candidates in groups:
        print(f"{problem.name} (size {problem.resolve_size(plan.size, plan.device)}): "
              f"{listed([c.relpath for c in candidates])}")
    print(f"dry run: {sum(len(c) for _, c in groups)} candidate(s) of {len(groups)} problem(s), "
          f"{plan.options.world_size} ranks on {plan.device}; nothing started")
    return 0


def _pairs(args, found: list[Problem], chosen: list[Problem]) -> list:
    """(problem, candidate) pairs of the chosen problems; ValueError naming --solutions when there are none. One
    line each names the .py files that name no problem and the --problems that have no candidate."""
    candidates, unmatched, folder = _candidates(args, found, chosen)
    if unmatched:
        _note("eval", f"skipping {listed(unmatched)}: their paths name no known problem (layouts: docs/harness.md)")
    by_name = {p.name: p for p in chosen}
    pairs = [(by_name[c.problem], c) for c in candidates if c.problem in by_name]
    if args.model:
        pairs = [(p, c if c.model else replace(c, model=args.model)) for p, c in pairs]
    if args.reference_as_candidate:
        pairs = [(p, reference_candidate(p)) for p in chosen] + pairs
    if not pairs:
        raise ValueError(f"--solutions: expected candidates of {listed([p.name for p in chosen])}, got none under "
                         f"{folder} (layouts: docs/harness.md)")
    without = [p.name for p in chosen if p.name not in {q.name for q, _ in pairs}]
    if without and args.problems:
        _note("eval", f"no candidates under {folder} for {listed(without)}: they are not evaluated")
    return pairs


def _candidates(args, found: list[Problem], chosen: list[Problem]) -> tuple[list, list[str], Path]:
    """(candidates, unmatched .py files, the folder searched) from --solutions: a folder, one file, or by
    default the chosen problems' own folders of the problems root (nothing else under it is walked)."""
    if args.pkb_root is not None and args.solutions is None:
        raise ValueError("--solutions: required with --pkb-root (e.g. <checkout>/solutions_cuda)")
    aliases = {a: p.name for p in found for a in p.aliases}
    if args.solutions is None:
        root = args.problems_root or default_root()
        return (*solutions.discover(root, aliases, within=[p.name for p in chosen]), root)
    folder = args.solutions
    if folder.is_file():
        return [solutions.single_file(folder, aliases, [p.name for p in chosen])], [], folder
    if kind(folder) is not None and not folder.is_dir():
        raise ValueError(f"--solutions: expected a folder of candidates or one .py file, got {folder}, {kind(folder)}")
    if not folder.is_dir():
        raise ValueError(f"--solutions: expected a folder of candidates or one .py file, got {folder}, which does "
                         f"not exist (for references alone: mkdir -p {folder} and pass --reference-as-candidate)")
    return (*solutions.discover(folder, aliases), folder)


def _run_baselines(args, plan: EvalPlan) -> int:
    from .baseline import baselines

    frame = baselines(size=plan.size, dtype=args.dtype, world_size=args.world_size, problems_root=args.problems_root,
                      names=[p.name for p in plan.problems], trials=args.trials, warmup=args.warmup,
                      iters=args.iters, timeout_s=args.timeout, device=args.device, machine=args.machine,
                      out=args.out)
    print(frame.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    return 0

def main(argv: list[str] | None = None) -> int:
    """Run `eval` or `problems` as a standalone program."""
    from ..cli import OneLineParser

    parser = OneLineParser(prog="pkit", description="pkit harness: eval and problems")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
