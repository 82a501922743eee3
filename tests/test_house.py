"""The house's proportions, read from pkit's source with ast (nothing is imported): no module over 500 lines, no
function over 60, no circle among pkit's modules and no import from a lower layer up to a higher one (`LAYERS`),
counting the imports made inside functions."""
from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

PKIT = Path(__file__).resolve().parents[1] / "pkit"
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60
# pkit's layers, bottom up: a module imports only from its own layer or those below. The core (compiler, gpus, team,
# launch, timing, results, roofline, hardware, studies, ...: every module not named here) is the lowest; the ops on
# a Team above it; the figures' house style (which reads the ops' registries) and pkit.dist (the ops on torch
# tensors); the harness and what reads its records; the studies, the lesson and the notebook runner; the
# explorers on top of them; the command line last.
LAYERS = ({"pkit.ops"}, {"pkit.figures", "pkit.dist"}, {"pkit.harness", "pkit.metrics", "pkit.analysis"},
          {"pkit.experiments", "pkit.lesson", "pkit.notebooks"}, {"pkit.widgets"}, {"pkit.cli"})


@cache
def _parsed() -> dict[Path, ast.Module]:
    """Every source file of pkit, parsed once for the module's tests (which only read the trees)."""
    return {path: ast.parse(path.read_text(), str(path)) for path in sorted(PKIT.rglob("*.py"))}


def _modules() -> dict[str, ast.Module]:
    """Every module of pkit by its dotted name (a package by its own name), parsed."""
    trees = {}
    for path, tree in _parsed().items():
        parts = path.relative_to(PKIT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        trees[name] = tree
    return trees


def _imported(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, known: set[str]) -> set[str]:
    """The pkit modules one import statement of `module` loads: a name taken from a package counts as its
    submodule where one of that name exists, else as the package."""
    if isinstance(node, ast.Import):
        bases = [alias.name for alias in node.names]
        return {base for base in bases if base in known}
    package = module if is_package else module.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    base = ".".join(filter(None, [package if node.level else "", node.module or ""]))
    found = set()
    for alias in node.names:
        if f"{base}.{alias.name}" in known:
            found.add(f"{base}.{alias.name}")
        elif base in known:
            found.add(base)
    return found


def import_graph() -> dict[str, set[str]]:
    """module → the pkit modules it imports anywhere in its body (functions included), itself left out."""
    trees = _modules()
    known = set(trees)
    packages = {name for name in known if (PKIT.parent / name.replace(".", "/") / "__init__.py").exists()}
    graph = {}
    for name, tree in trees.items():
        targets = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                targets |= _imported(node, name, name in packages, known)
        graph[name] = targets - {name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while not group or group[-1] != node:
                group.append(stack.pop())
                on_stack.discard(group[-1])
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_over_500_lines():
    long = {str(path.relative_to(PKIT.parent)): n for path in PKIT.rglob("*.py")
            if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES}
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}; split them by job"


def test_no_function_over_60_lines():
    long = {}
    for path, tree in _parsed().items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if (n := node.end_lineno - node.lineno + 1) > MAX_FUNCTION_LINES:
                    long[f"{path.relative_to(PKIT.parent)}:{node.name}"] = n
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: {long}; give their steps names"


def test_no_import_circles():
    found = circles(import_graph())
    assert not found, f"modules that import each other (inside functions too): {found}"


def layer(module: str) -> int:
    """`module`'s layer: 1 + its package's index in LAYERS, 0 for the core."""
    package = ".".join(module.split(".")[:2])
    return next((i + 1 for i, names in enumerate(LAYERS) if package in names), 0)


def test_no_import_from_a_lower_layer_up():
    graph = import_graph()
    upward = sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets if layer(b) > layer(a))
    assert not upward, f"imports from a lower layer up (inside functions too): {upward}; move the code or the import"
