"""notebooks/README.md's examples run as written: its Python blocks in order, in one namespace, replaying the
recorded results into temporary results and figures folders; its registry entry agrees with `pkit.studies`; its
command that strips outputs strips a copy of a notebook; its `pkit figures` and `make figures` lines parse."""
import ast
import json
import shutil
import subprocess
import sys
import textwrap
from dataclasses import replace

import pytest

from test_doc_examples import ROOT, blocks, python_blocks, run_block

README = ROOT / "notebooks" / "README.md"
MACHINE = "h200x2-nv18"  # the parameters block's machine


@pytest.fixture
def replay_here(tmp_path, monkeypatch):
    """A working folder whose results are a copy of the machine's recorded mechanisms tables (so a machine that
    measures writes there) and whose figures folder is its own."""
    recorded = tmp_path / "results" / MACHINE
    recorded.mkdir(parents=True)
    for path in (ROOT / "results" / MACHINE).glob("mechanisms_*"):
        shutil.copy(path, recorded)
    monkeypatch.setenv("PKIT_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("PKIT_FIGURES", str(tmp_path / "figures"))
    monkeypatch.setenv("PKIT_CACHE_DIR", str(tmp_path / "cubin"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_python_blocks_run_in_order_and_draw_their_figure(replay_here):
    namespace = {"__name__": "__notebook_readme__"}
    for block in python_blocks(README):
        run_block(replace(block, code=textwrap.dedent(block.code)), namespace)  # blocks of a list are indented
    assert namespace["mode"] == "auto" and namespace["machine"] == MACHINE
    assert len(namespace["sizes"]) and {"mechanism", "bandwidth_GBps"} <= set(namespace["sizes"].columns)
    assert {p.suffix for p in (replay_here / "figures").glob("mechanisms_sizes.*")} == {".png", ".svg"}
    assert namespace["splits_run"] is not None and len(namespace["splits_run"].frame)


def test_registry_entry_matches_the_registry():
    """The example entry names the real study's module, notebook and parts, with what each part needs."""
    from pkit import studies

    (block,) = [b for b in python_blocks(README) if "Study(" in b.code]
    tree = ast.parse(block.code)
    namespace: dict = {}
    exec(compile(ast.Module(tree.body[:-1], []), README.name, "exec"), namespace)  # noqa: S102
    entry = eval(compile(ast.Expression(tree.body[-1].value), README.name, "eval"), namespace)  # noqa: S307
    real = studies.STUDIES[entry.name]
    assert (entry.module, entry.notebook) == (real.module, real.notebook)
    assert [(p.experiment, p.gpus, p.peer) for p in entry.parts] == [(p.experiment, p.gpus, p.peer)
                                                                      for p in real.parts]


def bash_lines() -> list[str]:
    return [line.split("#")[0].strip() for b in blocks(README) if b.lang == "bash" for line in b.code.splitlines()
            if line.strip()]


def test_strip_outputs_command_strips_a_copy(tmp_path):
    (command,) = [line for line in bash_lines() if "strip_outputs" in line]
    original = ROOT / "notebooks" / "00_quickstart.ipynb"
    (tmp_path / "notebooks").mkdir()
    executed = json.loads(original.read_text())
    code = next(c for c in executed["cells"] if c["cell_type"] == "code")
    code["outputs"] = [{"output_type": "stream", "name": "stdout", "text": ["ran\n"]}]
    code["execution_count"] = 3
    (tmp_path / "notebooks" / original.name).write_text(json.dumps(executed, indent=1))
    (tmp_path / ".venv").symlink_to(ROOT / ".venv")
    subprocess.run(command.replace(".venv/bin/python", sys.executable, 1), shell=True, check=True, cwd=tmp_path)
    stripped = json.loads((tmp_path / "notebooks" / original.name).read_text())
    assert stripped["cells"] == json.loads(original.read_text())["cells"]


def test_figures_commands_parse():
    from pkit.cli import build_parser

    lines = bash_lines()
    (pkit,) = [line for line in lines if line.startswith(".venv/bin/pkit figures")]
    args = build_parser().parse_args(pkit.split()[1:])
    assert (args.mode, args.only) == ("replay", ["05"])
    (make,) = [line for line in lines if line.startswith("make figures MODE=")]
    dry = subprocess.run(["make", "-n", "-o", ".venv/bin/.installed", *make.split()[1:]], cwd=ROOT,
                         capture_output=True, text=True, check=True).stdout
    assert "pkit figures --mode replay" in dry
