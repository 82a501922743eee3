"""Every Python example in README.md and docs/*.md runs as a test, with the id `<file>:L<fence line>`.

The rule, written in the markdown itself: an HTML comment on the last non-blank line before a fence says
what the block needs.

- no marker: the block runs here, on CPU, and must pass;
- `<!-- example: gpu -->`: it needs one CUDA GPU (test marked `gpu`, skipped without one);
- `<!-- example: multigpu -->`: it needs two GPUs with peer access (marked `gpu` and `multigpu`);
- `<!-- example: skip (reason) -->`: deliberately not runnable (a fragment, pseudo-code); only compiled.

A file's blocks share one namespace and run in order: the test of a block first runs the file's earlier
runnable blocks, so a block may use names an earlier one defined, and it needs at least what they need.
Each file's blocks run in their own temporary working directory, so nothing is written into the
repository. Python examples are fenced ```python (or ```pycon / `>>>` prompts, run by doctest); shell is
fenced ```bash or ```console, other text ```text. A GPU block's imports and the `module.attribute` names
it reads from them are still checked on CPU.
"""
from __future__ import annotations

import ast
import doctest
import re
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PYTHON = {"python", "py", "pycon"}
LEVELS = ["cpu", "gpu", "multigpu"]
FENCE = re.compile(r"^ {0,3}(`{3,})\s*([\w+-]*)\s*$")
MARKER = re.compile(r"^<!--\s*example:\s*(gpu|multigpu|skip)\s*(?:\((.*)\))?\s*-->\s*$")


@dataclass
class Block:
    """One fenced code block of a markdown file."""

    path: Path
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    marker: str | None = None  # gpu, multigpu or skip
    reason: str = ""
    marker_line: int = 0  # 1-based line of the marker, 0 if none

    @property
    def id(self) -> str:
        name = self.path.relative_to(ROOT).as_posix() if self.path.is_relative_to(ROOT) else self.path.name
        return f"{name}:L{self.line}"


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of one markdown file, with the marker just before each."""
    found, lines, i = [], path.read_text().splitlines(), 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == opening.group(1)), len(lines))
        block = Block(path, i + 1, opening.group(2).lower(), "\n".join(lines[i + 1:end]) + "\n")
        block.marker_line = marker_before(lines, i)
        if block.marker_line:
            match = MARKER.match(lines[block.marker_line - 1].strip())
            block.marker, block.reason = match.group(1), match.group(2) or ""
        found.append(block)
        i = end + 1
    return found


def marker_before(lines: list[str], i: int) -> int:
    """The 1-based line of the `<!-- example: ... -->` marker on the last non-blank line before line i, or 0."""
    previous = next((j for j in range(i - 1, -1, -1) if lines[j].strip()), None)
    return previous + 1 if previous is not None and MARKER.match(lines[previous].strip()) else 0


def python_blocks(path: Path) -> list[Block]:
    return [b for b in blocks(path) if b.lang in PYTHON]


def level(path: Path, index: int) -> str:
    """What block `index` of a file needs: the most that it or any earlier runnable block needs."""
    runnable = [b for b in python_blocks(path)[:index + 1] if b.marker != "skip"]
    return max((b.marker or "cpu" for b in runnable), key=LEVELS.index, default="cpu")


def params() -> list:
    """One pytest param per Python block, marked by what it needs."""
    out = []
    for path in DOCS:
        for index, block in enumerate(python_blocks(path)):
            need = level(path, index)
            marks = [pytest.mark.gpu] * (need != "cpu") + [pytest.mark.multigpu] * (need == "multigpu")
            if block.marker == "skip":
                marks.append(pytest.mark.skip(reason=f"marked skip: {block.reason or 'no reason given'}"))
            out.append(pytest.param(path, index, marks=marks, id=block.id))
    return out


def run_block(block: Block, namespace: dict) -> None:
    """Run one block in `namespace`: doctest for `>>>` prompts, else exec."""
    if block.code.lstrip().startswith(">>>"):
        test = doctest.DocTestParser().get_doctest(block.code, namespace, block.id, str(block.path), block.line)
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
        runner.run(test, clear_globs=False)
        assert runner.failures == 0, f"{block.id}: {runner.failures} doctest example(s) failed"
        return
    code = compile("\n" * block.line + block.code, str(block.path), "exec")  # tracebacks give markdown lines
    try:
        exec(code, namespace)  # noqa: S102 - running the example is the test
    except Exception as error:
        if block.marker is None:
            error.add_note(f"{block.id} has no marker, so it must run on CPU; if it needs GPUs, put "
                           "<!-- example: gpu --> or <!-- example: multigpu --> on the line before its fence")
        raise


_SESSIONS: dict[Path, tuple[dict, int]] = {}  # file -> (namespace, blocks run so far)
_WORKDIRS: dict[Path, Path] = {}  # file -> its working directory


def namespace_for(path: Path, index: int) -> dict:
    """The file's shared namespace with blocks 0..index-1 run (reused when the tests run in order)."""
    namespace, done = _SESSIONS.get(path, ({}, -1))
    if done != index:
        namespace, done = {"__name__": "__doc_example__"}, 0
        for earlier in python_blocks(path)[:index]:
            if earlier.marker != "skip":
                run_block(earlier, namespace)
    return namespace


@pytest.fixture
def workdir(tmp_path_factory, request, monkeypatch):
    """One temporary working directory per markdown file; the cubin cache goes there too."""
    path = request.node.callspec.params["path"]
    folder = _WORKDIRS.setdefault(path, tmp_path_factory.mktemp(path.stem))
    monkeypatch.chdir(folder)
    monkeypatch.setenv("PKIT_CACHE_DIR", str(folder / "cubin"))
    return folder


@pytest.mark.parametrize("path,index", params())
def test_doc_example(path, index, workdir):
    """Block `index` of `path` runs after the file's earlier runnable blocks, in the file's working directory."""
    namespace = namespace_for(path, index)
    _SESSIONS.pop(path, None)
    run_block(python_blocks(path)[index], namespace)
    _SESSIONS[path] = (namespace, index + 1)


@pytest.mark.parametrize("block", [b for p in DOCS for b in python_blocks(p)], ids=lambda b: b.id)
def test_doc_example_compiles(block):
    """Every Python block, GPU-only and skipped ones too, is valid Python."""
    if not block.code.lstrip().startswith(">>>"):
        compile(block.code, block.id, "exec")


def missing_names(code: str) -> list[str]:
    """Run the top-level imports of `code`; the `module.attribute` names it reads that do not exist."""
    namespace: dict = {}
    tree = ast.parse(code)
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            exec(compile(ast.Module([node], []), "<imports>", "exec"), namespace)  # noqa: S102
    return [f"{n.value.id}.{n.attr}" for n in ast.walk(tree) if isinstance(n, ast.Attribute)
            and isinstance(n.value, ast.Name) and isinstance(namespace.get(n.value.id), ModuleType)
            and not hasattr(namespace[n.value.id], n.attr)]


@pytest.mark.parametrize("block", [b for p in DOCS for b in python_blocks(p) if b.marker in ("gpu", "multigpu")],
                         ids=lambda b: b.id)
def test_gpu_example_names_exist(block):
    """A GPU block's imports work on CPU and every `module.attribute` it reads from them exists."""
    assert not missing_names(block.code), f"{block.id} reads names that do not exist"


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_fences_say_their_language(path):
    """No bare ``` fences (a Python example cannot hide in one), and every marker sits before a Python block."""
    bare = [b.id for b in blocks(path) if not b.lang]
    assert not bare, f"fences without a language (use python, bash, console or text): {bare}"
    attached = {b.marker_line for b in python_blocks(path)}
    stray = [n for n, line in enumerate(path.read_text().splitlines(), 1)
             if MARKER.match(line.strip()) and n not in attached]
    assert not stray, f"example markers not followed by a Python fence at lines {stray}"


SAMPLE = """\
```python
x = 2
```

<!-- example: skip (a fragment) -->
```python
x = undefined_name
```

<!-- example: gpu -->

```python
y = x + 1
```

```python
assert y == 3
```

```pycon
>>> x * 5
10
```
"""


def test_rules_on_a_sample(tmp_path):
    """Markers, inherited needs, the shared namespace, doctest blocks and the names check do what the docstring says."""
    path = tmp_path / "sample.md"
    path.write_text(SAMPLE)
    found = python_blocks(path)
    assert [(b.line, b.marker) for b in found] == [(1, None), (6, "skip"), (12, "gpu"), (16, None), (20, None)]
    assert [level(path, i) for i in range(5)] == ["cpu", "cpu", "gpu", "gpu", "gpu"]
    for index in (3, 4):
        run_block(found[index], namespace_for(path, index))
    with pytest.raises(AssertionError, match="1 doctest"):
        run_block(Block(path, 1, "pycon", ">>> 1 + 1\n3\n"), {})
    assert missing_names("import pkit, os\npkit.no_such_name(os.path)") == ["pkit.no_such_name"]


# --- the `pkit eval` / `pkit problems` commands of the harness docs ------------------------------------------------

COMMAND_DOCS = [ROOT / "docs" / "harness.md", ROOT / "docs" / "problems.md"]


def pkit_commands(path: Path) -> list[tuple[str, str]]:
    """(id, command line) of every line of a bash block of `path` that runs `pkit eval` or `pkit problems`:
    continuation lines joined, comments dropped; a line may start with other commands joined by '&&'."""
    import shlex

    found = []
    for block in blocks(path):
        if block.lang != "bash":
            continue
        joined = block.code.replace("\\\n", " ")
        for offset, line in enumerate(joined.splitlines()):
            words = shlex.split(line, comments=True)
            if any(words[i:i + 2] in (["pkit", "eval"], ["pkit", "problems"]) for i in range(len(words))):
                found.append((f"{path.name}:L{block.line + 1 + offset}", " ".join(words)))
    return found


def needs(command: str) -> str | None:
    """What a doc command needs that a CPU test machine lacks, or None."""
    if "--pkb-root" in command:
        return "a ParallelKernelBench checkout"
    return None


@pytest.fixture
def doc_workdir(tmp_path, monkeypatch):
    """The repository as the docs' commands see it (samples/ at hand), in a folder of its own; results in it."""
    (tmp_path / "samples").symlink_to(ROOT / "samples")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PKIT_RESULTS", str(tmp_path / "results"))
    return tmp_path


def run_doc_command(command: str, *extra: str) -> int:
    """Run a doc command line: commands before '&&' through the shell, the pkit one through `pkit.cli.main` with
    `extra` arguments appended."""
    import shlex
    import subprocess

    from pkit.cli import main

    *before, last = command.split(" && ")
    for part in before:
        subprocess.run(part, shell=True, check=True)
    words = shlex.split(last)
    return main([*words[1:], *extra])


@pytest.mark.parametrize("command", [pytest.param(c, id=i) for p in COMMAND_DOCS for i, c in pkit_commands(p)])
def test_doc_command_checks_out(command, doc_workdir, capsys):
    """Each `pkit problems` of the docs runs as written; each `pkit eval` passes every check and names what it
    would run (--dry-run appended), or, for --baselines on a machine without GPUs, is refused in one line."""
    if needs(command):
        pytest.skip(f"needs {needs(command)}")
    from pkit.gpus import devices

    dry = ("--dry-run",) if " eval" in command else ()
    if "--baselines" in command and not devices():
        assert run_doc_command(command, *dry) == 2
        assert "pass --force" in capsys.readouterr().err
        return
    assert run_doc_command(command, *dry) == 0, capsys.readouterr().err
    out, err = capsys.readouterr()
    assert "nothing started" in out if dry else out
    assert "error" not in err and "no candidates" not in err, err


def test_doc_self_check_of_the_references_runs(doc_workdir, fewest_rounds):
    """The doc's `mkdir -p empty && pkit eval --reference-as-candidate --solutions empty/ ...`, for real, on one
    problem and one trial, timed in the fewest rounds (its verdict, not its speed, is checked)."""
    from pkit.harness.records import read_jsonl

    (command,) = [c for p in COMMAND_DOCS for _, c in pkit_commands(p) if "--solutions empty/" in c]
    assert run_doc_command(command, "--problems", "1", "--trials", "1") == 0
    (record,) = read_jsonl(doc_workdir / "runs" / "self.jsonl")
    assert record["solution"] == "01_all_reduce/problem.py:reference" and record["status"].startswith("correct")


def test_docs_name_the_default_machine_of_pkit_problems():
    """docs/problems.md says whose measured ceilings `pkit problems` reads by default, as the parser does."""
    from pkit.cli import build_parser

    default = build_parser().parse_args(["problems"]).machine
    text = (ROOT / "docs" / "problems.md").read_text()
    assert "`pkit problems --machine` defaults to" in text and f"({default})" in text
