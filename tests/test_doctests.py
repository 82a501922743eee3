"""The runnable examples in module docstrings stay true; GPU-only ones are marked `# doctest: +SKIP`."""
import doctest
import importlib
from pathlib import Path

import pytest

MODULES = ["pkit", "pkit.analysis", "pkit.bf16", "pkit.compiler", "pkit.driver", "pkit.harness.launch",
           "pkit.harness.commands", "pkit.harness.eval_command", "pkit.harness.problems_command",
           "pkit.arguments", "pkit.harness.runner", "pkit.kernel_args", "pkit.ops.overlap",
           "pkit.experiments.overlap", "pkit.ops.overlap_patterns", "pkit.experiments.overlap.sweeps",
           "pkit.experiments.overlap.shapes", "pkit.experiments.overlap.links", "pkit.experiments.overlap.emulated",
           "pkit.experiments.overlap.pacing", "pkit.ops.gemm_plans",
           "pkit.experiments.overlap.emulated_draw", "pkit.experiments.overlap.gemm", "pkit.ops.gemm",
           "pkit.widgets.overlap", "pkit.harness.paths", "pkit.experiments.llm_benchmark",
           "pkit.experiments.overlap.checks", "pkit.experiments.overlap.analysis", "pkit.experiments.overlap.plots",
           "pkit.figures", "pkit.figures.style", "pkit.figures.titles", "pkit.figures.plots",
           "pkit.experiments.roofline_gap.draw", "pkit.experiments.collectives.draw", "pkit.gpus", "pkit.hardware",
           "pkit.launch", "pkit.metrics", "pkit.notebooks", "pkit.problem_kit", "pkit.results", "pkit.roofline",
           "pkit.studies", "pkit.tolerance", "pkit.vocabulary", "pkit.experiments.collectives",
           "pkit.experiments.hierarchy", "pkit.experiments.hierarchy.chase", "pkit.experiments.hierarchy.matrix",
           "pkit.experiments.hierarchy.memory", "pkit.experiments.mechanisms", "pkit.experiments.quickstart",
           "pkit.experiments.hierarchy.cross_check", "pkit.experiments.overlap.interference",
           "pkit.experiments.overlap.model",
           "pkit.experiments.ceilings", "pkit.experiments.roofline_gap.projection", "pkit.experiments.roofline_gap",
           "pkit.ops.baselines", "pkit.ops.collectives", "pkit.ops.copy_engine", "pkit.harness.channel",
           "pkit.harness.checks", "pkit.harness.contain", "pkit.harness.records", "pkit.harness.snapshot",
           "pkit.harness.solutions", "pkit.harness.problems", "pkit.harness.reference", "pkit.harness.problem",
           "pkit.harness.fresh", "pkit.harness.placement", "pkit.harness.shards", "pkit.harness.versions", "pkit.harness.resume",
           "pkit.harness.merge", "pkit.harness.ray_pool", "pkit.harness.options", "pkit.harness.zygote",
           "pkit.harness.candidate",
           "pkit.harness.integrity", "pkit.harness.speedup", "pkit.harness", "pkit.team", "pkit.ops.transfers",
           "pkit.widgets", "pkit.lesson", "pkit.lesson.verdict", "pkit.lesson.diagnose", "pkit.lesson.runners",
           "pkit.lesson.checks", "pkit.lesson.steps", "pkit.lesson.records", "pkit.lesson.plots",
           "pkit.lesson.magic"]
PACKAGE = Path(__file__).resolve().parents[1] / "pkit"


def module_name(path: Path) -> str:
    """pkit/ops/collectives.py -> pkit.ops.collectives; pkit/harness/__init__.py -> pkit.harness."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def others() -> list:
    """Modules with docstring examples that are not in MODULES, as pytest params."""
    names = sorted(module_name(p) for p in PACKAGE.rglob("*.py") if ">>>" in p.read_text())
    return [n for n in names if n not in MODULES]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name, cache_dir):
    result = doctest.testmod(importlib.import_module(name))
    assert result.failed == 0 and result.attempted > 0


@pytest.mark.parametrize("name", others())
def test_other_examples_are_skipped(name):
    """A module left out of MODULES runs none of its examples on CPU: every one is marked +SKIP."""
    tests = doctest.DocTestFinder().find(importlib.import_module(name))
    running = [e.source.strip() for t in tests for e in t.examples if not e.options.get(doctest.SKIP)]
    assert not running, f"{name}: add it to MODULES or mark these +SKIP: {running}"
