"""CONTRIBUTING.md's four recipes, each followed in a copy of the repository: a stand-in collective, overlap
schedule, study and problem are added by editing exactly the files the recipe names, and the registries, the
`pkit` commands and the compile step pick them up. No GPU: the kernel compiles for sm_90a through NVRTC."""
import json
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
COPIED = ("pkit", "problems", "docs", "notebooks", "tests/test_doctests.py", "tests/test_overlap.py")


def _recipe(title: str) -> str:
    """The text of CONTRIBUTING.md's section `title`."""
    text = (ROOT / "CONTRIBUTING.md").read_text()
    return text.split(f"\n## {title}\n", 1)[1].split("\n## ", 1)[0]


def _snapshot(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts}


@pytest.fixture
def repo(tmp_path):
    """A copy of what the recipes touch and what `pkit` reads, and its files before any edit."""
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, tmp_path / name)
    return tmp_path, _snapshot(tmp_path)


def _insert(path: Path, anchor: str, text: str, after: bool = False) -> None:
    """Put `text` before (or after) the one occurrence of `anchor` in `path`."""
    source = path.read_text()
    assert source.count(anchor) == 1, f"{path.name}: the recipe's anchor {anchor!r} is not unique"
    path.write_text(source.replace(anchor, anchor + text if after else text + anchor))


def _close_of(path: Path, opening: str, text: str) -> None:
    """Put `text` just before the `)}` that closes the registry opened by `opening` in `path`."""
    source = path.read_text()
    start = source.index(opening)
    end = source.index("\n)}", start)
    path.write_text(source[:end] + "\n" + text.rstrip("\n") + source[end:])


def _changed_only_as_named(root: Path, before: dict, recipe: str) -> None:
    """Every file the edits added or changed is one the recipe names (a new folder or a pattern such as
    `pkit/experiments/<study>.py` names the files under or matching it), and every named file it changed exists."""
    after = _snapshot(root)
    changed = {p for p in after if before.get(p) != after[p]} | (set(before) - set(after))
    named = re.findall(r"`([\w./<>-]+)`", recipe)

    patterns = [re.sub(r"<[^>]+>", "[^/]+", re.escape(name.rstrip("/"))).replace("NN", r"\d\d") for name in named]

    def matches(path: str) -> bool:
        return any(re.fullmatch(pattern + "(/.*)?", path) for pattern in patterns)

    assert changed, "the recipe changed nothing"
    assert all(matches(p) for p in changed), f"changed outside the recipe: {sorted(p for p in changed if not matches(p))}"


def _run(root: Path, script: str) -> str:
    """`script` run by Python in the copy (its pkit first on the path), after CLI; its stdout."""
    out = subprocess.run([sys.executable, "-c", CLI + textwrap.dedent(script)], cwd=root, capture_output=True, text=True,
                         timeout=240, env={**__import__("os").environ, "PYTHONPATH": str(root)})
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_every_file_a_recipe_names_exists():
    """The recipes name real files: each path without a placeholder is in the repository."""
    text = (ROOT / "CONTRIBUTING.md").read_text()
    paths = [p for p in re.findall(r"`([\w./-]+\.(?:py|cu|md|ipynb))`", text) if "/" in p]
    assert paths and [p for p in paths if not (ROOT / p).is_file()] == []
    for title in ("Add a collective", "Add an overlap schedule", "Add a study", "Add a problem"):
        assert _recipe(title)


CLI = """
import contextlib, io
from pkit import cli

def pkit(*args):
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert cli.main(list(args)) in (0, None)
    return buffer.getvalue()
"""


def test_add_a_collective(repo):
    root, before = repo
    _close_of(root / "pkit/ops/collective_ops.py", "COLLECTIVES = {", """\
    CollectiveOp("keep_own", "every rank gets its own buffer back", lambda inputs, rank, root=0: inputs[rank],
                 lambda ranks: 1.0, "nothing crosses a link", kernels={"sm": ("keep_own",)}, mechanisms=("sm",)),
""")
    with open(root / "pkit/kernels/collectives.cu", "a") as f:
        f.write("\n// out[i] = in[i] on every rank (a stand-in op).\n__global__ void keep_own(const SMCall c) {\n"
                "  c.barrier(PKIT_SITE);\n  pkit::copy16_grid(c.outputs().local(), c.inputs().local(), c.n16);\n"
                "  c.barrier(PKIT_SITE);\n}\n")
    _insert(root / "pkit/ops/collectives.py", "    @staticmethod\n    def _whole_packs(",
            '    def keep_own(self, out, inp, mechanism: str = "auto") -> None:\n'
            '        """A stand-in op."""\n        self._collective(collective("keep_own"), out, inp, mechanism)\n\n')
    _changed_only_as_named(root, before, _recipe("Add a collective"))
    out = _run(root, """
        from pkit.compiler import compile_cubin
        import inspect

        from pkit.experiments.collectives import sweep
        from pkit.ops.collectives import COLLECTIVES, SM_KERNELS, Collectives
        from pkit.widgets import ROOFLINE_COLLECTIVES

        assert "keep_own" in COLLECTIVES and "keep_own" in ROOFLINE_COLLECTIVES
        assert "keep_own" in inspect.signature(sweep).parameters["ops"].default  # the study sweeps it
        assert Collectives.keep_own.__name__ == "keep_own" and "keep_own" in SM_KERNELS
        module = compile_cubin("collectives.cu", arch="sm_90a", name_expressions=["keep_own"])
        assert module.lowered["keep_own"]
        print(pkit("list", "collectives"))
    """)
    assert "keep_own" in out


def test_add_an_overlap_schedule(repo):
    root, before = repo
    _insert(root / "pkit/ops/overlap_patterns.py", 'Schedule("tma_pull",',
            'Schedule("ce_whole", "one copy-engine copy of every peer\'s rows, then one cuBLAS GEMM", "cublas", '
            '"ce", label="copy engine, whole", look=Look("sky", "v"), structure=SERIAL),\n                ')
    _insert(root / "pkit/ops/overlap.py", "    def tma_pull(self) -> None:",
            '    def ce_whole(self) -> None:\n        """A stand-in schedule: the serial one under another name."""\n'
            "        self.serial()\n\n")
    _insert(root / "docs/overlap.md", "\n| `tma_pull` |", "\n| `ce_whole` | the copy engine, every peer's rows at once "
            "| one cuBLAS GEMM after it |")
    _changed_only_as_named(root, before, _recipe("Add an overlap schedule"))
    out = _run(root, """
        from pkit.ops.overlap import AllGatherGemm, list_schedules
        from pkit.ops.overlap_patterns import PATTERNS

        assert "ce_whole" in PATTERNS["ag_gemm"].names and callable(AllGatherGemm.ce_whole)
        assert "ce_whole" in list_schedules()["name"].tolist()
        print(pkit("list", "schedules"))
    """)
    assert "ce_whole" in out


def test_add_a_study(repo):
    root, before = repo
    number = max(int(p.name[:2]) for p in (root / "notebooks").glob("[0-9][0-9]_*.ipynb")) + 1
    (root / "pkit/experiments/recipe_demo.py").write_text(textwrap.dedent('''\
        """A stand-in study: one table.

        Example:
            >>> squares(3)["square"].tolist()
            [0, 1, 4]
        """
        import pandas as pd


        def squares(n: int) -> pd.DataFrame:
            """0 .. n - 1 and their squares (columns n, square)."""
            return pd.DataFrame({"n": range(n), "square": [i * i for i in range(n)]})
        '''))
    cells = [{"cell_type": "markdown", "id": "question", "metadata": {}, "source": ["# What are the squares?"]},
             {"cell_type": "code", "id": "parameters", "metadata": {"tags": ["parameters"]}, "execution_count": None,
              "outputs": [], "source": ['mode = "auto"\n', 'machine = None']}]
    (root / f"notebooks/{number:02d}_recipe_demo.ipynb").write_text(json.dumps(
        {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=1))
    _insert(root / "tests/test_doctests.py", 'MODULES = ["pkit", ', '"pkit.experiments.recipe_demo", ', after=True)
    _close_of(root / "pkit/studies.py", "STUDIES: dict[str, Study] = {", f"""\
    Study("recipe_demo", "a stand-in study: squares", "pkit.experiments.recipe_demo", "{number:02d}_recipe_demo",
          (Part("recipe_demo_squares"),)),
""")
    _changed_only_as_named(root, before, _recipe("Add a study"))
    out = _run(root, f"""
        import doctest
        from pkit import notebooks, studies
        from pkit.experiments import recipe_demo

        plan = studies.get("recipe_demo").requires(studies.Machine("h200x1", 1))
        assert plan.can_measure and plan.measures == ("recipe_demo_squares",)
        assert studies.for_notebook("{number:02d}_recipe_demo").name == "recipe_demo"
        assert "{number:02d}_recipe_demo" in [p.stem for p in notebooks.discover()]
        assert doctest.testmod(recipe_demo).failed == 0
        print(pkit("list", "studies"))
    """)
    assert "study: recipe_demo" in out


def test_add_a_problem(repo):
    root, before = repo
    number = max(int(p.name[:2]) for p in (root / "problems").glob("[0-9][0-9]_*")) + 1
    folder = root / f"problems/{number:02d}_recipe_demo"
    (folder / "solutions").mkdir(parents=True)
    (folder / "problem.py").write_text(textwrap.dedent('''\
        """A stand-in problem: every rank returns the sum of every rank's x."""
        import torch.distributed as dist

        from pkit.problem_kit import cost as _cost, generator, parse_dtype, randn

        META = {"name": "recipe_demo", "category": "collectives", "models": "a stand-in",
                "dtypes": ["float32"], "dtype_reason": "float32: a stand-in", "world_sizes": [2],
                "traffic": "aggregated", "description": "Each rank holds x (n,); every rank returns the sum."}
        SIZES = {"tiny": {"n": 64}, "large": {"n": 1 << 24}}


        def make_inputs(rank, world_size, size, dtype, seed, device="cpu"):
            return (randn((SIZES[size]["n"],), dtype, generator(seed, rank), device),)


        def reference(x):
            y = x.clone()
            dist.all_reduce(y)
            return y


        def cost(world_size, size, dtype="float32"):
            nbytes = SIZES[size]["n"] * parse_dtype(dtype).itemsize
            return _cost(hbm_bytes=2 * nbytes, link_bytes=2 * (world_size - 1) * nbytes // world_size, sync_steps=2)
        '''))
    (folder / "solutions/torch_alt.py").write_text(
        '"""The reference\'s all-reduce on a copy."""\nimport torch.distributed as dist\n\n\n'
        "def solution(x):\n    y = x.clone()\n    dist.all_reduce(y)\n    return y\n")
    _changed_only_as_named(root, before, _recipe("Add a problem"))
    out = _run(root, """
        print(pkit("problems"))
    """)
    assert folder.name in out
