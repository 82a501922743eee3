"""Find candidate files in a solutions folder and read model and sample index from their paths; a problem's
reference as a candidate (`reference_candidate`); (problem, candidate) pairs grouped by problem (`by_problem`).

Layouts (paths relative to the folder passed as `--solutions`; `<problem>` is a problem's folder name,
its META name, or a PKB reference stem):

| path | model | sample |
| --- | --- | --- |
| `<model>/<problem>/<k>.py` (k digits; `<model>` may span folders, e.g. `zai-org/GLM-5.1`) | `<model>` | k |
| `<model>/<problem>/<name>.py` | `<model>` | None |
| `<problem>/solutions/<name>.py` (the repo's `problems/` tree) | None | None |
| `<problem>/<name>.py` | None | None |
| `<problem>_<backend>.py` (a PKB solutions folder, e.g. `1_allreduce_cuda.py`) | None | None |

Files whose name starts with `_` or `.`, `problem.py` files and `__pycache__` folders are skipped.

Example:
    >>> from pathlib import PurePosixPath as P
    >>> from pkit.harness.solutions import parse
    >>> c = parse(P("gpt-5/01_all_reduce/3.py"), {"01_all_reduce": "01_all_reduce"})
    >>> c.problem, c.model, c.sample
    ('01_all_reduce', 'gpt-5', 3)
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from .problem import Problem


@dataclass(frozen=True)
class Candidate:
    """One candidate file: where it is, which problem it solves, and who wrote it (when known).

    `function` is the callable the worker calls: `solution` for candidates, `reference` when a problem's
    own reference is evaluated as a candidate.
    """

    path: Path
    relpath: str
    problem: str
    model: str | None = None
    sample: int | None = None
    backend: str | None = None
    function: str = "solution"


def parse(relpath: PurePosixPath, aliases: dict[str, str]) -> Candidate | None:
    """The candidate at `relpath`, or None when the path names no known problem.

    `aliases` maps every accepted problem spelling to the problem's name. The deepest path component that
    names a problem wins, so a model folder that happens to share a problem's name does not confuse it.
    """
    parts = relpath.parts
    if relpath.suffix != ".py" or any(p.startswith((".", "_")) for p in parts) or relpath.name == "problem.py":
        return None
    for i in range(len(parts) - 2, -1, -1):
        if parts[i] in aliases:
            tail = parts[i + 1:]
            if not (len(tail) == 1 or (len(tail) == 2 and tail[0] == "solutions")):
                return None
            model = "/".join(parts[:i]) or None
            stem = relpath.stem
            sample = int(stem) if model is not None and stem.isdigit() else None
            return Candidate(Path(relpath), str(relpath), aliases[parts[i]], model, sample)
    if len(parts) == 1:
        stem = relpath.stem
        best = max((a for a in aliases if stem.startswith(a + "_")), key=len, default=None)
        if best is not None:
            return Candidate(Path(relpath), str(relpath), aliases[best], backend=stem[len(best) + 1:])
    return None


def discover(solutions_dir: Path, aliases: dict[str, str],
             within: list[str] | None = None) -> tuple[list[Candidate], list[str]]:
    """Candidates under `solutions_dir` (absolute paths), sorted; and the .py files that named no problem.

    `within` (folder names directly under `solutions_dir`, such as the problems of a problems root) limits the
    walk to those folders; None walks everything below `solutions_dir`.
    """
    root = Path(solutions_dir)
    if not root.is_dir():
        raise ValueError(f"solutions: {root} is not a directory")
    found, unmatched = [], []
    tops = [root] if within is None else [root / name for name in within]
    for path in sorted(p for top in tops for p in top.rglob("*.py")):
        rel = PurePosixPath(path.relative_to(root).as_posix())
        cand = parse(rel, aliases)
        if cand is not None:
            found.append(Candidate(path.resolve(), cand.relpath, cand.problem, cand.model, cand.sample,
                                   cand.backend))
        elif not any(p.startswith((".", "_")) for p in rel.parts) and rel.name != "problem.py":
            unmatched.append(str(rel))
    found.sort(key=lambda c: (c.problem, c.model or "", c.sample if c.sample is not None else -1, c.relpath))
    return found, unmatched


def single_file(path: Path, aliases: dict[str, str], chosen: list[str]) -> Candidate:
    """One candidate file: its problem from its path (any layout above, read from its end), or the only
    problem in `chosen`; ValueError naming --solutions otherwise."""
    path = Path(path).resolve()
    for depth in (1, 2, 3):
        parts = path.parts[-depth:]
        cand = parse(PurePosixPath(*parts), aliases)
        if cand is not None:
            return Candidate(path, cand.relpath, cand.problem, cand.model, cand.sample, cand.backend)
    if len(chosen) == 1:
        return Candidate(path, path.name, chosen[0])
    raise ValueError(f"--solutions: {path} names no known problem in its path; name the problem with "
                     f"--problems NAME (one problem) or put the file in a <problem>/ folder")


def reference_candidate(problem: Problem) -> Candidate:
    """The problem's own reference, evaluated as if it were a candidate (a self-check of the harness)."""
    path = problem.reference_path
    return Candidate(path, f"{problem.name}/{path.name}:{problem.reference_function}", problem.name,
                     function=problem.reference_function)


def by_problem(pairs: list[tuple[Problem, Candidate]]) -> list[tuple[Problem, list[Candidate]]]:
    """Pairs grouped by problem, problems in order of first appearance, candidates in their order."""
    groups: dict[str, tuple[Problem, list[Candidate]]] = {}
    for problem, candidate in pairs:
        groups.setdefault(problem.name, (problem, []))[1].append(candidate)
    return list(groups.values())
