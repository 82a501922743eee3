"""The README's layout block names paths that exist, and names every kernel, op and top-level module pkit has."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ENTRY = re.compile(r"^(\S+)\s+(.*)$")
FILE = re.compile(r"(?<![\w/])[\w*]+\.(?:cu|py|md)\b")
PATH = re.compile(r"\b(?:docs|notebooks|problems|pkit)/[\w/.]*")


def layout() -> dict[str, str]:
    """The README's layout block: entry (left column) → its description, continuation lines joined."""
    text = (ROOT / "README.md").read_text()
    block = re.search(r"## Layout\n+```text\n(.*?)```", text, re.S).group(1)
    entries: dict[str, str] = {}
    for line in block.splitlines():
        match = ENTRY.match(line)
        if match:
            entry = match.group(1)
            entries[entry] = match.group(2)
        else:
            entries[entry] += " " + line.strip()
    return entries


def modules(description: str) -> list[str]:
    """The module names of the `pkit/*.py` entry: the first word of each comma-separated item (commas inside
    parentheses do not separate)."""
    items = re.split(r",\s*(?![^()]*\))", description)
    return [item.split()[0] for item in items]


def test_every_entry_exists():
    entries = layout()
    for entry in entries:
        if entry == "pkit/*.py":
            continue
        assert (ROOT / entry.replace("<machine>/", "")).exists(), entry
    assert any(p.is_dir() for p in (ROOT / "results").iterdir())  # results/<machine>/


def test_every_file_and_path_a_description_names_exists():
    for entry, description in layout().items():
        folder = ROOT / entry if entry.endswith("/") and "<" not in entry else ROOT
        for name in FILE.findall(description):
            found = [*folder.glob(name), *folder.glob(f"*/{name}")]  # problems/: each problem's problem.py
            assert found or (ROOT / name).exists(), f"{entry}: {name}"
        for path in PATH.findall(description):
            assert (ROOT / path.rstrip(".")).exists(), f"{entry}: {path}"


@pytest.mark.parametrize("folder, pattern", [("pkit/kernels/", "*.cu"), ("pkit/ops/", "*.py")])
def test_every_kernel_and_op_is_named(folder, pattern):
    named = {p.name for name in FILE.findall(layout()[folder]) for p in (ROOT / folder).glob(name)}
    have = {p.name for p in (ROOT / folder).glob(pattern) if p.name != "__init__.py"}
    assert have - named == set(), f"README layout, {folder}: add these"


def test_every_top_level_module_is_named_and_exists():
    entries = layout()
    named = set(modules(entries["pkit/*.py"])) | {Path(e).stem for e in entries if re.fullmatch(r"pkit/\w+\.py", e)}
    for name in named:
        assert (ROOT / "pkit" / f"{name}.py").exists() or (ROOT / "pkit" / name).is_dir(), name
    have = {p.stem for p in (ROOT / "pkit").glob("*.py") if p.name != "__init__.py"}
    assert have - named == set(), "README layout, pkit/*.py: add these"
