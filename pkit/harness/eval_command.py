"""`pkit eval` and `pkit eval merge`: check every argument, find the candidates, and evaluate them here, as Ray
tasks or as one shard of a split run, resuming --out; or record the references' times (--baselines)
(docs/harness.md).

Example:
    $ pkit eval --solutions samples --problems 01_all_reduce --trials 5 --perf --out runs/samples.jsonl
    $ pkit eval merge runs/all.jsonl runs/shard-*.jsonl
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, replace
from pathlib import Path

from ..errors import PkitError
from . import ray_pool, shards, solutions
from .commands import EvalCommand, MergeCommand, check_dtype, error, listed, note, option_name
from .contain import Interrupted
from .merge import merge, write
from .options import EvalOptions, pick_device, unsupported
from .paths import check_out, kind
from .problem import Problem, describe_sizes
from .problems import default_root
from .records import read_lines, status_counts
from .resume import OutRecords, sole_writer
from .shards import Shard
from .solutions import by_problem, reference_candidate


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


def plan_eval(command: EvalCommand) -> EvalPlan:
    """Check every argument of `pkit eval` and find its candidates, starting nothing (ValueError or PkitError
    naming the first bad option)."""
    options = command.options
    options.validate(option_name)
    if command.baselines and command.source.pkb_root is not None:
        raise ValueError("--baselines: records pkit problems only; drop --pkb-root")
    if command.out is None and not command.baselines:
        raise ValueError("--out: expected a JSONL file to write, got none (e.g. --out runs/run.jsonl; or pass "
                         "--baselines)")
    if command.out is not None:
        check_out(command.out)
    shard = check_sharding(command)
    found, chosen = command.source.find("eval")
    problems = runnable(chosen, options)
    size = "large" if command.baselines and options.size == "auto" else options.size
    check_size(problems, size)
    check_machine(command, size)
    device = pick_device(options.device, options.world_size)
    pairs = [] if command.baselines else _pairs(command, found, problems)
    chosen_pairs = shards.select(pairs, shard) if shard else pairs
    return EvalPlan(options, problems, chosen_pairs, size, device, shard, len(pairs))


def check_sharding(command: EvalCommand) -> Shard | None:
    """The shard of --shard (None without it); ValueError naming --shard, --shards or --ray when they do not go
    together or Ray is missing."""
    if command.shards is not None and command.ray is None:
        raise ValueError(f"--shards: only with --ray, got --shards {command.shards} without it (one shard of a split "
                         "run here: --shard K/N)")
    if command.shards is not None and command.shards < 1:
        raise ValueError(f"--shards: expected an integer >= 1, got {command.shards}")
    if command.ray is not None:
        if command.baselines or command.shard is not None:
            which = "--baselines" if command.baselines else "--shard"
            raise ValueError(f"--ray: expected a run of candidates, got {which} too (--ray runs every shard itself: "
                             "--shards N)")
        ray_pool.require_ray()
    if command.shard is None:
        return None
    if command.baselines:
        raise ValueError("--shard: only for candidates, got --baselines too (split a baseline sweep with --problems)")
    return Shard.parse(command.shard)


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
        note("eval", f"skipping {listed(skipped)}")
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


def check_machine(command: EvalCommand, size: str) -> None:
    """Refuse --baselines and --size large on a machine without GPUs unless --force: CPU times of large
    inputs take minutes per problem and measure nothing a GPU study needs."""
    if command.force or gpu_count() > 0:
        return
    if command.baselines:
        raise ValueError("--baselines: expected a machine with GPUs, got none here: CPU reference times take "
                         "minutes per problem and would not be a GPU machine's; run it on one, or pass --force "
                         "(then the table is printed, not recorded in the repository's results/)")
    if size == "large":
        raise ValueError("--size: expected tiny on a machine without GPUs, got 'large' (minutes per candidate on "
                         "the CPU); drop --size (auto is tiny here), or pass --force to run it anyway")


def run_eval(command: EvalCommand) -> int:
    """`pkit eval`: evaluate candidates (or, with --baselines, record reference times)."""
    try:
        plan = plan_eval(command)
        if command.dry_run:
            return _dry_run(command, plan)
        if command.baselines:
            return _run_baselines(command, plan)
        return _run_on_ray(command, plan) if command.ray is not None else _run_here(command, plan)
    except (ValueError, PkitError) as e:
        return error("eval", e)
    except Interrupted as e:
        print(f"pkit eval: {e}; workers killed, temp folders removed; records so far are in {command.out} (run the "
              "same command again to resume)", file=sys.stderr)
        return 128 + e.signum


def _resumed(command: EvalCommand, plan: EvalPlan, device: str) -> tuple[OutRecords, list]:
    """(what --out holds, the plan's pairs it does not hold yet); ValueError naming --out when its records may
    not be resumed by this run. One line says what is skipped."""
    recorded = OutRecords.read(command.out)
    recorded.check(plan.pairs, plan.options)
    todo = recorded.remaining(plan.pairs, plan.options, device)
    if len(todo) < len(plan.pairs):
        note("eval", f"resuming {command.out}: {len(plan.pairs) - len(todo)} of the {len(plan.pairs)} candidates are "
                      f"recorded there already, {len(todo)} to run")
    if recorded.partial_bytes:
        note("eval", f"{command.out} ends in a line cut short ({recorded.partial_bytes} bytes, from a run killed "
                      "while writing it): it is dropped and its candidate evaluated again")
    return recorded, todo


def _run_here(command: EvalCommand, plan: EvalPlan) -> int:
    """Evaluate the plan's pairs (one shard's with --shard) in this process, resuming --out."""
    from ..results import provenance
    from .runner import evaluate  # torch: imported by the commands that evaluate, not by `pkit --help`

    if plan.shard is not None:
        note("eval", f"shard {plan.shard.label}: {len(plan.pairs)} of {plan.found} candidates")
    with sole_writer(command.out):
        recorded, todo = _resumed(command, plan, plan.device)
        recorded.drop_partial()
        stamp = dict(provenance(command.parameters), shard=plan.shard.label if plan.shard else None)
        written = evaluate(todo, plan.options, command.out, provenance=stamp, append=True) if todo else []
    return _summary(command.out, len(written))


def _run_on_ray(command: EvalCommand, plan: EvalPlan) -> int:
    """Evaluate the plan's pairs as Ray tasks, one per shard, resuming --out; exit code 1 when a task failed."""
    started = ray_pool.connect(command.ray)
    try:
        device = ray_pool.cluster_device(plan.options.device, plan.options.world_size)
        options = replace(plan.options, device=device)
        count = command.shards or min(len(plan.pairs), ray_pool.slots(options.world_size, device))
        with sole_writer(command.out):
            recorded, todo = _resumed(command, plan, device)
            recorded.drop_partial()
            parts = [(f"{k}/{count}", recorded.remaining(part, options, device))
                     for k, part in enumerate(shards.split(plan.pairs, count))]
            note("eval", f"{len(todo)} candidates in {count} shards as Ray tasks on {command.ray}, each asking for "
                          f"{ray_pool.task_resources(options.world_size, device)}")
            written, failures = ray_pool.run(parts, options, command.parameters, command.out, recorded.keys)
    finally:
        if started:
            ray_pool.require_ray().shutdown()
    for line in failures:
        note("eval", f"{line}; its records so far are in {command.out} (run the same command again to resume)")
    code = _summary(command.out, len(written))
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


def run_merge(command: MergeCommand) -> int:
    """`pkit eval merge OUT SHARD...`: join shard files into OUT; one line per shard, then the totals."""
    try:
        if any(command.merged.resolve() == p.resolve() for p in command.inputs):
            raise ValueError(f"OUT: expected a file other than the shards, got {command.merged}, one of them")
        check_out(command.merged, "OUT")
        merged = merge(command.inputs)
        write(merged.records, command.merged)
    except (ValueError, PkitError) as e:
        return error("eval merge", e)
    for source in merged.sources:
        print(source.describe())
    print(f"{len(merged.records)} records → {command.merged}: {counted(merged.records)}")
    return 0


def _dry_run(command: EvalCommand, plan: EvalPlan) -> int:
    """Print what `pkit eval` would run: one line per problem, then the totals; exit code 0. With --out holding
    records, only what a resumed run would evaluate."""
    pairs = plan.pairs if command.baselines else _resumed(command, plan, plan.device)[1]
    if plan.shard is not None:
        print(f"shard {plan.shard.label}: {len(plan.pairs)} of {plan.found} candidates")
    if command.ray is not None:
        print(f"as Ray tasks on {command.ray}: " + (f"{command.shards} shards" if command.shards else
                                                  "as many shards as the cluster runs tasks at once"))
    groups = [(p, [reference_candidate(p)]) for p in plan.problems] if command.baselines else by_problem(pairs)
    for problem, candidates in groups:
        print(f"{problem.name} (size {problem.resolve_size(plan.size, plan.device)}): "
              f"{listed([c.relpath for c in candidates])}")
    print(f"dry run: {sum(len(c) for _, c in groups)} candidate(s) of {len(groups)} problem(s), "
          f"{plan.options.world_size} ranks on {plan.device}; nothing started")
    return 0


def _pairs(command: EvalCommand, found: list[Problem], chosen: list[Problem]) -> list:
    """(problem, candidate) pairs of the chosen problems; ValueError naming --solutions when there are none. One
    line each names the .py files that name no problem and the --problems that have no candidate."""
    candidates, unmatched, folder = _candidates(command, found, chosen)
    if unmatched:
        note("eval", f"skipping {listed(unmatched)}: their paths name no known problem (layouts: docs/harness.md)")
    by_name = {p.name: p for p in chosen}
    pairs = [(by_name[c.problem], c) for c in candidates if c.problem in by_name]
    if command.model:
        pairs = [(p, c if c.model else replace(c, model=command.model)) for p, c in pairs]
    if command.reference_as_candidate:
        pairs = [(p, reference_candidate(p)) for p in chosen] + pairs
    if not pairs:
        raise ValueError(f"--solutions: expected candidates of {listed([p.name for p in chosen])}, got none under "
                         f"{folder} (layouts: docs/harness.md)")
    without = [p.name for p in chosen if p.name not in {q.name for q, _ in pairs}]
    if without and command.source.problems:
        note("eval", f"no candidates under {folder} for {listed(without)}: they are not evaluated")
    return pairs


def _candidates(command: EvalCommand, found: list[Problem], chosen: list[Problem]) -> tuple[list, list[str], Path]:
    """(candidates, unmatched .py files, the folder searched) from --solutions: a folder, one file, or by
    default the chosen problems' own folders of the problems root (nothing else under it is walked)."""
    if command.source.pkb_root is not None and command.solutions is None:
        raise ValueError("--solutions: required with --pkb-root (e.g. <checkout>/solutions_cuda)")
    aliases = {a: p.name for p in found for a in p.aliases}
    if command.solutions is None:
        root = command.source.problems_root or default_root()
        return (*solutions.discover(root, aliases, within=[p.name for p in chosen]), root)
    folder = command.solutions
    if folder.is_file():
        return [solutions.single_file(folder, aliases, [p.name for p in chosen])], [], folder
    if kind(folder) is not None and not folder.is_dir():
        raise ValueError(f"--solutions: expected a folder of candidates or one .py file, got {folder}, {kind(folder)}")
    if not folder.is_dir():
        raise ValueError(f"--solutions: expected a folder of candidates or one .py file, got {folder}, which does "
                         f"not exist (for references alone: mkdir -p {folder} and pass --reference-as-candidate)")
    return (*solutions.discover(folder, aliases), folder)


def _run_baselines(command: EvalCommand, plan: EvalPlan) -> int:
    """Time every planned problem's reference and print the table (recorded in results/<machine>/ on GPUs)."""
    from .baseline import baselines

    options = command.options
    frame = baselines(size=plan.size, dtype=options.dtype, world_size=options.world_size,
                      problems_root=command.source.problems_root, names=[p.name for p in plan.problems],
                      trials=options.trials, warmup=options.warmup, iters=options.iters, timeout_s=options.timeout_s,
                      device=options.device, machine=command.machine, out=command.out)
    print(frame.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    return 0
