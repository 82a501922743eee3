"""The studies: one registry entry per study says what it is, what it records, which notebook shows it, and what
it needs of a machine.

A study is a notebook (`notebooks/<notebook>.ipynb`) on top of one experiment module (`pkit.experiments.*`) whose
tables are recorded as `results/<machine>/<experiment>.csv`. Each recorded experiment is a `Part` that says how
many GPUs it needs and whether it needs peer access between them, so a machine with fewer GPUs measures the parts
it can and says in one line what the others need. The notebook runner (`pkit.notebooks`), `pkit figures`, `pkit
list studies`, the explorers (`pkit.widgets`) and the tests read this registry; nothing else keeps its own list.

Example:
    >>> from pkit import studies
    >>> one_gpu = studies.Machine("h200x1", gpus=1)
    >>> plan = studies.STUDIES["mechanisms"].requires(one_gpu)
    >>> plan.measures, plan.can_measure
    (('mechanisms_sm_sweep', 'mechanisms_size_sweep'), True)
    >>> print(plan.lacking["mechanisms_splits"])
    mechanisms_splits needs 2 GPUs with peer access; h200x1 has 1
    >>> studies.require("collectives", one_gpu)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    pkit.errors.PkitError: study 'collectives' needs 2 GPUs with peer access, one per rank (NCCL); h200x1 has 1: ...
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .errors import PkitError

if TYPE_CHECKING:  # pandas is imported by the table alone: the command line reads the registry at every start
    import pandas as pd

FIGURES_MACHINE = "h200x2-nv18"
"""The machine whose recorded results make the figures committed in `figures/` (and replay's default). Figures of
any other machine go to `figures/<machine>/` (`figures_folder`)."""


@dataclass(frozen=True)
class Machine:
    """What a study asks of a machine: its slug (`pkit.results.machine_slug`), how many GPUs, peer access."""

    slug: str
    gpus: int
    peer_access: bool = False

    @classmethod
    def here(cls) -> "Machine":
        """This machine: its visible GPUs, and whether every pair of them has peer access."""
        from . import gpus as devices
        from .results import machine_slug

        count = len(devices.devices())
        peer = count >= 2 and bool(devices.topology().to_frame()["p2p"].all())
        return cls(machine_slug(), count, peer)

    @classmethod
    def from_slug(cls, slug: str) -> "Machine":
        """The machine a recorded slug names, e.g. 'h200x2-nv18' (2 GPUs, peer access over NVLink), 'h200x1',
        'cpu' (no GPU). A slug that names no GPU count is read as no GPU.

        Example:
            >>> Machine.from_slug("h200x2-nv18"), Machine.from_slug("cpu").gpus
            (Machine(slug='h200x2-nv18', gpus=2, peer_access=True), 0)
        """
        count = re.search(r"x(\d+)(?:-|$)", slug)
        gpus = int(count.group(1)) if count else 0
        return cls(slug, gpus, gpus >= 2 and not slug.endswith("-pcie"))


@dataclass(frozen=True)
class Part:
    """One recorded experiment of a study and what measuring it needs: `gpus` (0: it measures nothing, it is built
    from other records), `peer` (peer access among them), `per_rank` (one GPU per rank: NCCL refuses ranks that
    share a GPU)."""

    experiment: str
    gpus: int = 1
    peer: bool = False
    per_rank: bool = False
    description: str = ""  # what the recorded table holds, in one line
    optional: bool = False  # the notebook shows it where recorded and says so where not (`measure_or_replay`)

    def needs(self) -> str:
        """What measuring it needs, in words: '2 GPUs with peer access, one per rank (NCCL)'."""
        words = f"{self.gpus} GPU{'s' if self.gpus != 1 else ''}"
        if self.peer:
            words += " with peer access"
        return words + (", one per rank (NCCL)" if self.per_rank else "")

    def lacking(self, machine: Machine) -> str:
        """Why `machine` cannot measure it, in one line; '' when it can."""
        if machine.gpus >= self.gpus and (machine.peer_access or not self.peer):
            return ""
        return f"{self.experiment} needs {self.needs()}; {machine.slug} has {machine.gpus}"


@dataclass(frozen=True)
class Plan:
    """What a study does on one machine: the experiments it measures there, and why it cannot measure the rest."""

    study: str
    measures: tuple[str, ...]
    lacking: dict[str, str]
    can_measure: bool  # the notebook measures on this machine (it has the GPUs the study's notebook needs)
    needs: str  # the GPUs the notebook needs to measure, in words

    def line(self) -> str:
        """One line for a run's log: what is measured here and what needs more."""
        if not self.can_measure:
            return f"study {self.study!r} needs {self.needs} to measure"
        return "; ".join(self.lacking.values())


@dataclass(frozen=True)
class Study:
    """One study: its `name`, a one-line `description`, the `module` that measures it, the `notebook` that shows it
    ('' for a study recorded by a command and shown in no notebook),
    its recorded experiments (`parts`), `gpus`: how many GPUs its notebook needs to measure anything (default: the
    fewest any part needs; 0: it measures nothing), and `record`: a shell command that records its parts without
    the notebook, when there is one."""

    name: str
    description: str
    module: str
    notebook: str
    parts: tuple[Part, ...] = ()
    gpus: int | None = None
    record: str = ""
    reads: tuple[str, ...] = field(default=())  # recorded experiments of other studies it shows

    @property
    def experiments(self) -> tuple[str, ...]:
        return tuple(p.experiment for p in self.parts)

    @property
    def notebook_gpus(self) -> int:
        """GPUs the notebook needs to measure; 0: it never measures."""
        if self.gpus is not None:
            return self.gpus
        return min((p.gpus for p in self.parts if p.gpus), default=0)

    def _gate(self) -> Part:
        """The part-like requirement of the notebook as a whole (the strictest part with that many GPUs)."""
        at = [p for p in self.parts if p.gpus == self.notebook_gpus] or [Part(self.name, self.notebook_gpus)]
        return Part(self.name, self.notebook_gpus, any(p.peer for p in at), any(p.per_rank for p in at))

    def requires(self, machine: Machine) -> Plan:
        """What this study measures on `machine` and what it cannot (experiment → one line saying what it needs)."""
        can = self.notebook_gpus > 0 and not self._gate().lacking(machine)
        lacking = {p.experiment: why for p in self.parts if p.gpus and (why := p.lacking(machine))}
        measures = tuple(p.experiment for p in self.parts if p.gpus and can and p.experiment not in lacking)
        return Plan(self.name, measures, lacking, can, self._gate().needs() if self.notebook_gpus else "no GPU")

    def part(self, experiment: str) -> Part:
        for p in self.parts:
            if p.experiment == experiment:
                return p
        raise ValueError(f"experiment: expected one of study {self.name!r}'s {list(self.experiments)}, "
                         f"got {experiment!r}")


_PEER = dict(gpus=2, peer=True)
_NCCL = dict(gpus=2, peer=True, per_rank=True)

STUDIES: dict[str, Study] = {s.name: s for s in (
    Study("quickstart", "a 20-line SM copy kernel against the copy engine: GPU0 → GPU1, or HBM → HBM on one GPU",
          "pkit.experiments.quickstart", "00_quickstart",
          (Part("quickstart", description="00_quickstart's 20-line copy kernel and the copy engine, by message size"),)),
    Study("compute_vs_network", "datasheet growth of compute, HBM, NVLink and network since A100; measured NVLink",
          "pkit.hardware", "01_compute_vs_network", gpus=0, reads=("quickstart",)),
    Study("hierarchy", "latency and bandwidth rung by rung (shared memory to HBM, the peer GPU, the host), an "
          "nvbandwidth-style matrix, copies by message size", "pkit.experiments.hierarchy",
          "02_interconnect_hierarchy", (Part("hierarchy_ladder"), Part("hierarchy_working_set"),
                                        Part("hierarchy_matrix"), Part("hierarchy_sizes"),
                                        Part("hierarchy_cross_check", optional=True,
                                             description="the matrix's local and host copies against torch's copy_"))),
    Study("mechanisms", "copy engine vs SM loads/stores vs TMA: SMs needed to match the copy engine, size where each "
          "pays off, one copy split between two", "pkit.experiments.mechanisms", "03_transfer_mechanisms",
          (Part("mechanisms_sm_sweep", description="pkit.ops.transfers by SMs given, at one message size"),
           Part("mechanisms_size_sweep", description="pkit.ops.transfers by message size, each mechanism's default grid"),
           Part("mechanisms_splits", **_PEER))),
    Study("collectives", "pkit's collectives beside NCCL and torch symmetric memory, by size and per call",
          "pkit.experiments.collectives", "04_collectives",
          (Part("collectives_pkit_nccl", **_NCCL), Part("collectives_torch", **_NCCL),
           Part("collectives_latency", **_NCCL), Part("collectives_latency_torch", **_NCCL))),
    Study("overlap", "what communication costs a GEMM on one GPU (interference), a model of every overlap schedule "
          "calibrated on it, and AG+GEMM, GEMM+RS and GEMM+AR measured against serial NCCL + cuBLAS and PyTorch's "
          "fused async-TP ops", "pkit.experiments.overlap", "05_overlap",
          (Part("overlap_gemm", optional=True), Part("overlap_gemm_fp8", optional=True),
           Part("overlap_gemm_plans", optional=True), Part("interference_copies", optional=True),
           Part("interference_partition", optional=True),
           *(Part(e, **_NCCL, optional=True) for e in ("overlap_ag_gemm", "overlap_gemm_rs", "overlap_gemm_ar",
                                                       "overlap_torch_ag_gemm", "overlap_torch_gemm_rs")),
           Part("overlap_timeline", **_PEER, optional=True),
           Part("overlap_emulated", optional=True, description="one rank of every overlap schedule on one GPU, its "
                "peers' bytes paced through the copy engine at a link's rate (W = 2, 8)"),
           Part("overlap_emulated_link", optional=True, description="the emulation's copies alone: paced rate held, "
                "HBM traffic per byte, an SM copy on sm_pull's SMs")), gpus=1,
          record="python -m pkit.experiments.overlap.interference --record; python -m pkit.experiments.overlap gemm "
                 "gemm_fp8 gemm_plans ag_gemm gemm_rs gemm_ar torch_ag_gemm torch_gemm_rs timeline --record; python -m "
                 "pkit.experiments.overlap.emulated --record"),
    Study("roofline_gap", "how far the PyTorch + NCCL references sit from their communication-aware roofline, and "
          "how much pkit's solutions close", "pkit.experiments.roofline_gap", "06_roofline_gap",
          (Part("ceilings", **_NCCL), Part("baselines", **_NCCL), Part("pkit_solutions", **_NCCL)), gpus=0,
          record="python -m pkit.experiments.ceilings --record on the 2-GPU machine, then from the JSONL of the bf16 "
                 "sweep pkit eval --reference-as-candidate --perf --size large --out sweep.jsonl (docs/harness.md): "
                 "python -m pkit.harness.baseline pkit sweep.jsonl and python -m pkit.harness.baseline solutions "
                 "sweep.jsonl"),
    Study("llm_benchmark", "pass@k, fast_p, failure causes and mechanisms of (LLM-written) candidates",
          "pkit.experiments.llm_benchmark", "07_llm_benchmark_analysis", gpus=0),
    Study("lesson", "six exercises in multi-GPU CUDA, each checked on two ranks (two GPUs, or one GPU shared)",
          "pkit.lesson", "08_lesson_multi_gpu_communication", (Part("overlap_timeline", **_PEER, optional=True),), gpus=1,
          reads=("hierarchy_ladder", "quickstart", "collectives_latency", "collectives_pkit_nccl")),
    Study("eval_noise", "ParallelKernelBench's references timed as their own candidates: how far `pkit eval` reads a "
          "tie from 1x", "pkit.harness.pkb", "", (Part("pkb_references", **_NCCL),),
          record="pkit eval --pkb-root R --solutions EMPTY_DIR --reference-as-candidate --out part.jsonl, then "
                 "python -m pkit.harness.baseline pkb part*.jsonl (docs/harness.md)"),
    Study("harness_calibration", "`pkit eval` judging known answers: identical code (its interval should hold 1.0), "
          "candidates slowed by a known amount, and the harness's own cost per candidate", "pkit.harness", "",
          (Part("harness_calibration", gpus=0, description="per evaluation: verdict, speedup and its interval, wall "
                "and timed seconds, by the candidate's true ratio"),),
          record="python scripts/harness_calibration.py results --overhead-root tests/fixtures/problems_one_rank "
                 "--overhead-root tests/fixtures/problems (add --device cuda --perf on a GPU; docs/harness.md)"),
    Study("explorers", "three ipywidgets explorers: the roofline, recorded transfers, eval records (measures nothing)",
          "pkit.widgets", "09_explorers", gpus=0, reads=("mechanisms_size_sweep", "mechanisms_sm_sweep", "quickstart")),
)}
"""Every study, by name, in notebook order."""


def get(name: str) -> Study:
    """The study called `name`, or a clear error listing the known ones."""
    if name not in STUDIES:
        raise ValueError(f"study: expected one of {list(STUDIES)}, got {name!r}")
    return STUDIES[name]


def for_notebook(stem: str) -> Study | None:
    """The study a notebook (by file stem, e.g. '02_interconnect_hierarchy') shows; None for a notebook with none."""
    return next((s for s in STUDIES.values() if stem and s.notebook == stem), None)


def for_experiment(experiment: str) -> tuple[Study, Part]:
    """The study that records `experiment`, and its part (the first study that lists it)."""
    for study in STUDIES.values():
        for part in study.parts:
            if part.experiment == experiment:
                return study, part
    raise ValueError(f"experiment: expected a recorded experiment of a study ({', '.join(all_experiments())}), "
                     f"got {experiment!r}")


def all_experiments() -> list[str]:
    """Every recorded experiment of every study, each once, in registry order."""
    return list(dict.fromkeys(p.experiment for s in STUDIES.values() for p in s.parts))


def require(name: str, machine: Machine | None = None) -> Plan:
    """The plan of study `name` on `machine` (default: this one); raise one clear error naming the study and what
    it needs when the machine cannot measure any of it."""
    study = get(name)
    machine = machine or Machine.here()
    plan = study.requires(machine)
    if not study.notebook_gpus:
        raise PkitError(f"study {name!r} measures nothing (it reads recorded results and datasheets): replay it, "
                        f"pkit figures --mode replay --only {study.notebook}")
    if not plan.can_measure:
        raise PkitError(f"study {name!r} needs {plan.needs}; {machine.slug} has {machine.gpus}: replay it (pkit "
                        f"figures --mode replay --only {study.notebook}) or run it on a machine with {plan.needs}")
    return plan


def require_part(experiment: str, machine: Machine | None = None, prog: str = "") -> None:
    """Raise one clear error naming the study and what `experiment` needs when `machine` (default: this one) lacks
    it; experiment functions and record commands call this before touching a GPU. With `prog` (a command's name),
    exit with that one line instead of raising.

    Example:
        >>> require_part("mechanisms_splits", Machine("h200x1", 1), prog="record")
        Traceback (most recent call last):
        ...
        SystemExit: record: study 'mechanisms': mechanisms_splits needs 2 GPUs with peer access; h200x1 has 1
    """
    study, part = for_experiment(experiment)
    why = part.lacking(machine or Machine.here())
    if why and prog:
        raise SystemExit(f"{prog}: study {study.name!r}: {why}")
    if why:
        raise PkitError(f"study {study.name!r}: {why}")


def gpu_needs(experiment: str) -> tuple[int, str]:
    """(how many GPUs, why in words) measuring `experiment` needs, from its `Part`: what experiment code checks a
    machine against, so that a study's needs are said once, here.

    Example:
        >>> gpu_needs("collectives_pkit_nccl")
        (2, '(2 GPUs with peer access, one per rank (NCCL))')
    """
    _, part = for_experiment(experiment)
    return part.gpus, f"({part.needs()})"


def part_devices(experiment: str, devices=None, arg: str = "devices") -> list[int]:
    """`devices` (None: every GPU of this machine) as a list of GPU ids, checked to be as many as `experiment`
    needs (`gpu_needs`); else a PkitError naming `arg`, what the experiment needs and the fix."""
    from .team import team_devices

    need, what = gpu_needs(experiment)
    return team_devices(devices, need=need, arg=arg, what=what)


def measure_or_replay(experiment: str, measure, *, mode: str, machine: str, parameters: dict | None = None):
    """`pkit.results.measure_or_replay` for a part that may need more GPUs than the machine has: returns None, after
    printing one line saying what it needs, where this machine cannot measure it (mode 'measure') or it is not
    recorded for `machine` (mode 'replay'); else the `Recorded` result.

    Example:
        >>> run = measure_or_replay("mechanisms_splits", lambda: None, mode="replay", machine="h200x1")
        mechanisms_splits: not recorded for h200x1 (it needs 2 GPUs with peer access; h200x1 has 1)
        >>> run is None
        True
    """
    from . import results

    study, part = for_experiment(experiment)
    if mode == "measure":
        why = part.lacking(Machine.here())
        if why:
            print(f"{why}: not measured here")
            return None
    elif not results.is_recorded(experiment, machine):
        target = Machine.from_slug(machine)
        why = part.lacking(target)
        print(f"{experiment}: not recorded for {machine}" + (f" (it needs {part.needs()}; {machine} has "
                                                             f"{target.gpus})" if why else ""))
        return None
    return results.measure_or_replay(experiment, measure, mode=mode, machine=machine, parameters=parameters)


def figures_folder(root, machine: str):
    """Where a notebook run for `machine` saves figures under `root` (the figures folder): `root` itself for
    FIGURES_MACHINE and for runs that measure nothing, `root/<machine>` for any other machine, so they never
    overwrite the committed set."""
    from pathlib import Path

    return Path(root) if machine == FIGURES_MACHINE else Path(root) / machine


def list_studies(machine: Machine | None = None) -> pd.DataFrame:
    """The registry as a table (`pkit list studies`): study, notebook, description, experiments it records, what its
    notebook needs to measure, and on `machine` (default: this one) what it measures and what needs more GPUs.

    Example:
        >>> table = list_studies(Machine("h200x1", gpus=1)).set_index("study")
        >>> table.loc["hierarchy", "here"], table.loc["collectives", "here"]
        ('measures all', 'replays: needs 2 GPUs with peer access, one per rank (NCCL)')
    """
    import pandas as pd

    machine = machine or Machine.here()
    rows = []
    for s in STUDIES.values():
        plan = s.requires(machine)
        if not s.notebook_gpus:
            here = "measures nothing: reads recorded results and datasheets"
        elif not plan.can_measure:
            here = f"replays: needs {plan.needs}"
        elif plan.lacking:
            here = f"measures {', '.join(plan.measures) or 'its checks, recording nothing'}; not {', '.join(plan.lacking)}"
        else:
            here = "measures all"
        rows.append({"study": s.name, "notebook": s.notebook or "-", "description": s.description,
                     "records": ", ".join(s.experiments) or "-", "needs": plan.needs, "here": here})
    return pd.DataFrame(rows)
