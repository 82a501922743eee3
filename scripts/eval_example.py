"""Record the example `pkit eval` records behind notebook 07's llm_* figures and the eval browser:
results/<machine>/llm_eval_example.jsonl (+ .json provenance); on the CPU, results/cpu/.

Every candidate is evaluated by `pkit eval` itself (its trials, interleaved timing rounds, speedup interval and
correct_faster/level/slower verdict), the shipped solutions of each kind in one `pkit eval` whose --model is the
label that says what they are (LABELS):

    pkit             problems/*/solutions/pkit_*.py, pkit's shipped solutions. Their communication is pkit.dist:
                     on CPU tensors it runs through torch.distributed (gloo), so on the CPU these records check the
                     solutions' logic, not pkit's CUDA kernels; those run only with --device cuda.
    torch alternate  problems/*/solutions/torch_alt.py: the reference written another way in plain PyTorch
                     (torch.distributed calls), shipped as an alternate, not pkit's.
    example          samples/example/: candidates written by hand for pkit's tests, some broken on purpose.

None of them is written by a language model. Every record also carries its device, size, dtype and world size,
and its provenance the harness version, the problem's and the candidate's SHA-256, the settings and the commit.

A kind's `pkit eval` reads a folder of links, runs/llm_eval_example-views/<kind>/<problem>/solutions/<file>,
each to the shipped file (`pkit eval` resolves links: the candidate runs from problems/, and the record's
`solution` is `<problem>/solutions/<file>` as in a run over problems/). The work file
runs/llm_eval_example-<machine>.jsonl is the --out of every run, so a run that is stopped resumes where it stopped
when the same command is given again (--fresh starts over); when every candidate has a record there, it is copied
to results/<machine>/llm_eval_example.jsonl and the provenance written beside it (`parameters.labels`: what each
label is; `parameters.what`: the file in one line, `parameters.headline` in a few words; `parameters.llm_written`:
false). Each record carries its own provenance (the commit and harness that evaluated it); the file's says who
assembled it.

Usage:
    python scripts/eval_example.py                        # CPU, gloo, size tiny, world size 2 (a few minutes)
    python scripts/eval_example.py --device cuda          # two GPUs (world size 2), size large
    python scripts/eval_example.py --device cuda --kinds pkit --problems 01 02   # a part of it (resumable)
    python scripts/eval_example.py --dry-run              # list the pkit eval commands, run nothing
"""
from __future__ import annotations

import argparse
import collections
import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENT = "llm_eval_example"
LABELS = {
    "pkit": "pkit's shipped solutions (problems/*/solutions/pkit_*.py; communication through pkit.dist, which on "
            "the CPU runs torch.distributed over gloo, not pkit's CUDA kernels)",
    "torch alternate": "the shipped torch alternates (problems/*/solutions/torch_alt.py: the reference rewritten "
                       "in plain PyTorch, not pkit's)",
    "example": "candidates written by hand for pkit's tests (samples/example/), some broken on purpose",
}
"""Model label → what the candidates under it are; the provenance file carries it, notebook 07 and the eval
browser read it from there."""
KINDS = {"pkit_": "pkit", "torch_alt": "torch alternate"}
"""Shipped solution file name (its start) → its label."""
VIEWS = {"pkit": "pkit", "torch alternate": "torch_alt"}
"""Label → its folder of links under runs/llm_eval_example-views/."""
WHAT = {"pkit": "pkit's shipped solutions", "torch alternate": "torch alternates",
        "example": "hand-written test samples"}
"""Label → its words in `parameters.what`."""
TIMEOUT_S = {"cpu": 30.0, "cuda": 120.0}
"""Seconds per candidate (pkit eval --timeout): one example sample hangs on purpose and costs all of it."""


def label_of(path: Path) -> str:
    """The label of a shipped solution file; ValueError for a file of no known kind."""
    for start, label in KINDS.items():
        if path.stem.startswith(start):
            return label
    raise ValueError(f"{path.relative_to(ROOT)}: a shipped solution of no known kind (expected {list(KINDS)})")


def shipped(problems: list[str] | None) -> list[tuple[str, Path, str]]:
    """(problem folder, solution file, label) of every shipped solution, in problem order."""
    rows = []
    for folder in sorted(p.parent for p in (ROOT / "problems").glob("*/problem.py")):
        if problems and not any(folder.name == p or folder.name.split("_")[0] == p.zfill(2) for p in problems):
            continue
        for path in sorted((folder / "solutions").glob("*.py")):
            if not path.name.startswith(("_", ".")):
                rows.append((folder.name, path, label_of(path)))
    return rows


def commands(args, work: Path, views: Path) -> list[tuple[list[str], set[tuple[str, str | None]]]]:
    """The `pkit eval` argument lists this run makes, in order, each with the (solution, model) of the candidates
    it evaluates, after linking each kind's solutions under `views` (made anew)."""
    common = ["--device", args.device, "--size", args.size, "--world-size", str(args.world_size),
              "--trials", str(args.trials), "--timeout", f"{args.timeout:g}", "--out", str(work)]
    chosen = ["--problems", *args.problems] if args.problems else []
    shutil.rmtree(views, ignore_errors=True)
    runs = []
    for label, folder in VIEWS.items():
        mine = [(problem, path) for problem, path, kind in shipped(args.problems) if kind == label]
        if label not in args.kinds or not mine:
            continue
        for problem, path in mine:
            link = views / folder / problem / "solutions" / path.name
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(path)
        runs.append((["--solutions", str((views / folder).relative_to(ROOT)), *chosen, "--model", label, *common],
                     {(f"{problem}/solutions/{path.name}", label) for problem, path in mine}))
    if "example" in args.kinds:
        samples = [p.relative_to(ROOT / "samples").as_posix() for p in sorted((ROOT / "samples").glob("*/*/*.py"))
                   if not args.problems or any(p.parent.name == q or p.parent.name.split("_")[0] == q.zfill(2)
                                               for q in args.problems)]
        runs.append((["--solutions", "samples", *chosen, *common],
                     {(relpath, relpath.split("/")[0]) for relpath in samples}))
    return runs


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="cpu: gloo; cuda: NCCL, a GPU per rank")
    p.add_argument("--size", default=None, help="problem size (default: tiny on cpu, large on cuda)")
    p.add_argument("--world-size", type=int, default=2, help="ranks (default 2; on cuda, GPUs)")
    p.add_argument("--trials", type=int, default=3, help="random-input trials per candidate (default 3)")
    p.add_argument("--timeout", type=float, default=None, help=f"seconds per candidate (default {TIMEOUT_S})")
    p.add_argument("--kinds", nargs="+", choices=tuple(LABELS), default=list(LABELS), help="labels to evaluate")
    p.add_argument("--problems", nargs="+", default=None, help="problem folders or numbers (default all)")
    p.add_argument("--out", type=Path, default=None,
                   help="records file (default results/<machine>/llm_eval_example.jsonl; cpu on the CPU)")
    p.add_argument("--fresh", action="store_true", help="remove the work file first instead of resuming it")
    p.add_argument("--dry-run", action="store_true", help="print the pkit eval commands and stop")
    args = p.parse_args(argv)
    args.size = args.size or ("tiny" if args.device == "cpu" else "large")
    args.timeout = args.timeout or TIMEOUT_S[args.device]
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    from pkit import results
    from pkit.harness.records import read_jsonl

    machine = "cpu" if args.device == "cpu" else results.machine_slug()
    out = args.out or ROOT / "results" / machine / f"{EXPERIMENT}.jsonl"
    work = ROOT / "runs" / f"{EXPERIMENT}-{machine}.jsonl"
    runs = commands(args, work, ROOT / "runs" / f"{EXPERIMENT}-views")
    if args.dry_run:
        print("\n".join(shlex.join(["pkit", "eval", *run]) for run, _ in runs))
        return 0
    work.parent.mkdir(parents=True, exist_ok=True)
    if args.fresh:
        work.unlink(missing_ok=True)
    for i, (run, candidates) in enumerate(runs, 1):
        held = {(r["solution"], r.get("model")) for r in read_jsonl(work)} if work.is_file() else set()
        if candidates <= held:
            print(f"[{i}/{len(runs)}] every candidate of {run[1]} is recorded in {work.name} already", flush=True)
            continue
        print(f"[{i}/{len(runs)}] {shlex.join(['pkit', 'eval', *run])}", flush=True)
        done = subprocess.run([sys.executable, "-m", "pkit.cli", "eval", *run], cwd=ROOT)
        if done.returncode != 0:
            print(f"pkit eval exited {done.returncode}; run the same command again to resume", file=sys.stderr)
            return done.returncode
    records = read_jsonl(work)
    expected = len(shipped(args.problems)) if args.problems is None and set(args.kinds) == set(LABELS) else None
    if expected is not None and sum(r.get("model") in KINDS.values() for r in records) != expected:
        print(f"{work}: {len(records)} records, not every shipped solution's; kept there, nothing copied",
              file=sys.stderr)
        return 1
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(work, out)
    counts = collections.Counter((r.get("model"), r["status"]) for r in records)
    labels = [label for label in LABELS if any(r.get("model") == label for r in records)]
    prov = results.provenance({
        "commands": [shlex.join(["pkit", "eval", *run]).replace(str(work), "WORK") for run, _ in runs],
        "work_file": "WORK: " + str(work.relative_to(ROOT)) + ", every command's --out (resumed), copied here",
        "labels": {label: LABELS[label] for label in labels},
        "what": (f"example records: {', '.join(WHAT[label] for label in labels)}, evaluated on "
                 + ("CPU (gloo" if args.device == "cpu" else f"{machine} (NCCL") + f", size {args.size})"
                 + " — not LLM-written"),
        "headline": "example records, not LLM-written",
        "llm_written": False,
        "device": args.device, "size": args.size, "world_size": args.world_size,
        "note": "none of these candidates is written by a language model; "
                + ("CPU/gloo timings at the tiny size say nothing of GPU performance, and pkit's solutions ran "
                   "pkit.dist's gloo path, not its CUDA kernels" if args.device == "cpu"
                   else f"timed on {machine}, one process per GPU (NCCL)")})
    prov.update(experiment=EXPERIMENT, rows=len(records),
                counts={f"{m} {s}": n for (m, s), n in sorted(counts.items(), key=str)})
    out.with_suffix(".json").write_text(json.dumps(prov, indent=2, sort_keys=True, default=str) + "\n")
    print(f"{len(records)} records → {out.relative_to(ROOT) if out.is_relative_to(ROOT) else out}")
    for (model, status), n in sorted(counts.items(), key=str):
        print(f"  {model}: {status} {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
