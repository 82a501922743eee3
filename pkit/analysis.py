"""Diagnose evaluated candidates: which transfer mechanism each one uses, and why a failed one failed.

Every label is a `Finding`: the label, how confident the rule is ('high', 'medium', 'low') and the evidence
(the pattern that matched in the source, or the record field that decided it). Mechanisms come from the
candidate's source: Python calls found through its syntax tree, CUDA and PTX patterns found in its code and
embedded kernel strings (comments and docstrings removed first, so prose that merely names NCCL does not
count). Failure causes come from the harness record (status, error excerpt, per-rank results, flags) and,
for hangs, from the source.

Example:
    >>> from pkit.analysis import mechanisms, failure_cause
    >>> src = "import torch.distributed as dist\\ndef solution(x):\\n    dist.all_reduce(x)\\n    return x\\n"
    >>> [(f.label, f.confidence) for f in mechanisms(src)]
    [('torch_distributed', 'high')]
    >>> failure_cause({"status": "wrong_result", "flags": [], "per_rank": [
    ...     {"rank": 0, "ok": True, "mismatch_fraction": 0.0}, {"rank": 1, "ok": False, "mismatch_fraction": 1.0}]}).label
    'data_partitioning'
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import pandas as pd

from .harness.records import STATUSES
from .results import REPO_ROOT

CONFIDENCE_LEVELS = ("low", "medium", "high")

DETECTED_MECHANISMS = {
    "torch_distributed": "torch.distributed / NCCL collectives or point-to-point calls",
    "ce": "copy-engine transfers (cudaMemcpyPeer, memcpyPeer, copy_ between GPUs)",
    "sm": "register-level loads/stores through peer pointers (IPC, symmetric memory, PeerTable)",
    "tma": "TMA bulk copies (cp.async.bulk, tensor maps)",
    "nvshmem": "NVSHMEM",
    "multicast": "NVLink multicast / multimem (NVLS): forbidden on shared hosts",
}
"""Transfer mechanisms, in the order figures list them; `ce` and `sm` are pkit's own words for the copy engine
and register-level SM copies (pkit.ops.transfers, pkit.ops.collectives)."""

FORBIDDEN = ("multicast",)
"""Mechanisms pkit never uses (NVLink multicast / multimem, NVLS); figures mark candidates that use them."""

CAUSES = {
    "compile_error": "did not build: Python syntax or import error, or a kernel that failed to compile",
    "runtime_error": "crashed or raised while running",
    "collective_ordering": "hang or mismatch, likely ranks issuing collectives / sends and receives in different orders",
    "missing_signal": "hang in a device-side wait: a signal that never arrived",
    "hang": "timed out, cause not evident",
    "data_partitioning": "wrong values confined to some ranks or some slices of the output",
    "output_contract": "output aliases or equals an input, inputs mutated, or wrong shape, dtype or structure",
    "unsynchronized": "output never written (all zero) or produced on an unsynchronized side stream",
    "wrong_values": "wrong values across the whole output",
    "reference_error": "the problem's own code (inputs or reference) failed, not the candidate",
}
"""Failure causes, in the order figures list them."""

PUBLISHED_CSV = Path(__file__).resolve().parent / "data" / "published_pkb.csv"


@dataclass(frozen=True)
class Finding:
    """One label with how it was found."""

    label: str
    confidence: str
    evidence: str


# --- mechanisms ------------------------------------------------------------------------------------------

_COLLECTIVES = {"all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor",
                "all_to_all", "all_to_all_single", "broadcast", "reduce", "gather", "scatter", "send", "recv",
                "isend", "irecv", "batch_isend_irecv", "barrier", "all_gather_object", "broadcast_object_list"}

# (mechanism, confidence, regex, what the match means)
_PATTERNS = (
    ("torch_distributed", "high", r"\bnccl(AllReduce|AllGather|ReduceScatter|Broadcast|Reduce|Send|Recv|AllToAll)\b",
     "NCCL C API call"),
    ("torch_distributed", "high", r"\bcupy\.cuda\.nccl\b|\bNcclCommunicator\b", "CuPy NCCL communicator"),
    ("torch_distributed", "high", r"\b_functional_collectives\b|\bfuncol\.\w+\(", "torch functional collectives"),
    ("ce", "high", r"\b(cudaMemcpyPeer|cuMemcpyPeer|memcpyPeer)(Async)?\b", "peer memcpy (copy engine)"),
    ("ce", "medium", r"\bcudaMemcpy(Async)?\([^;]*cudaMemcpyDeviceToDevice",
     "device-to-device cudaMemcpy (a peer copy when the pointers live on different GPUs)"),
    ("ce", "medium", r"\b(peer|remote)\w*\.copy_\(|\.copy_\(\s*(peer|remote)\w*\s*\)|get_buffer\([^\n]*\)\.copy_\(",
     "tensor copy_ to or from a peer buffer (copy engine)"),
    ("sm", "high", r"\bPeerTable\b", "pkit PeerTable: peer-addressable pointers in a kernel"),
    ("sm", "medium", r"\b(peer|remote)\w*\s*\[[^\]\n]+\]\s*\[", "kernel indexes a peer/remote pointer table"),
    ("sm", "medium", r"\b(ld|st|red|atom)\.[\w.]*\bsys\b", "PTX load/store with .sys scope"),
    ("sm", "medium", r"\bcudaIpc(Open|Get)MemHandle\b|\bcuMemImportFromShareableHandle\b",
     "CUDA IPC-mapped peer memory"),
    ("sm", "medium", r"\b_symmetric_memory\b|\bsymm_mem\.rendezvous\b|\bSymmetricArray\b|\bbuffer_ptrs\b",
     "symmetric memory (peer pointers)"),
    ("tma", "high", r"\bcp\.async\.bulk\b", "PTX cp.async.bulk (TMA)"),
    ("tma", "high", r"\bcuTensorMapEncode\w*|\bCUtensorMap\b", "TMA tensor map"),
    ("tma", "high", r"\bpkit::(bulk_load|bulk_store)\b|\btma::\w+|pkit/tma\.cuh", "TMA helper (pkit / ThunderKittens)"),
    ("nvshmem", "high", r"\bnvshmemx?_\w+|\bimport nvshmem\b|\bnvshmem\.\w+", "NVSHMEM call"),
    ("multicast", "high", r"\bmultimem\.\w+", "PTX multimem (NVLink multicast)"),
    ("multicast", "high", r"\bcuMulticast\w+|\bmulticast_ptr\b|\bmc_ptr\b", "multicast object or pointer"),
)


def _clean(source: str) -> tuple[str, ast.Module | None]:
    """`source` without Python comments, docstrings or C/C++ comments in string literals, and its syntax tree
    (None when it does not parse, in which case the raw text is returned)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return source, None
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            body[0].value.value = ""
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "\n" in node.value:
            node.value = re.sub(r"//[^\n]*|/\*.*?\*/", "", node.value, flags=re.S)
    text = ast.unparse(tree)
    # unparse writes string literals with escaped newlines; restore them so line-based patterns work.
    return text.replace("\\n", "\n"), tree


def _distributed_names(tree: ast.Module) -> tuple[set[str], set[str]]:
    """Names bound to torch.distributed (module aliases) and collectives imported from it by name."""
    modules, functions = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "torch.distributed" and a.asname:
                    modules.add(a.asname)
                elif a.name in ("torch", "torch.distributed"):
                    modules.add("torch.distributed")
        elif isinstance(node, ast.ImportFrom):
            for a in node.names:
                if node.module == "torch" and a.name == "distributed":
                    modules.add(a.asname or a.name)
                elif node.module == "torch.distributed" and a.name in _COLLECTIVES:
                    functions.add(a.asname or a.name)
    return modules, functions


def _collective_calls(tree: ast.Module) -> list[tuple[str, ast.Call]]:
    """(spelling, call node) of every torch.distributed collective or point-to-point call."""
    modules, functions = _distributed_names(tree)
    calls = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in _COLLECTIVES and ast.unparse(func.value) in modules:
            calls.append((ast.unparse(func), node))
        elif isinstance(func, ast.Name) and func.id in functions:
            calls.append((func.id, node))
    return sorted(calls, key=lambda c: c[1].lineno)


def mechanisms(source: str) -> list[Finding]:
    """The transfer mechanisms `source` uses, strongest evidence per mechanism, in `DETECTED_MECHANISMS` order.

    Example:
        >>> [f.label for f in mechanisms('K = "asm(\\\\"cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], 16;\\\\")"')]
        ['tma']
    """
    if not isinstance(source, str):
        raise TypeError(f"source: expected the candidate's source text, got {type(source).__name__}")
    text, tree = _clean(source)
    found: dict[str, Finding] = {}

    def keep(finding: Finding) -> None:
        old = found.get(finding.label)
        if old is None or CONFIDENCE_LEVELS.index(finding.confidence) > CONFIDENCE_LEVELS.index(old.confidence):
            found[finding.label] = finding

    if tree is not None:
        calls = _collective_calls(tree)
        if calls:
            names = ", ".join(dict.fromkeys(f"{name} (line {call.lineno})" for name, call in calls))
            keep(Finding("torch_distributed", "high", f"calls {names}"))
    for label, confidence, pattern, what in _PATTERNS:
        match = re.search(pattern, text)
        if match:
            if tree is None and confidence == "high":
                confidence, what = "medium", what + "; the source does not parse, matched raw text"
            keep(Finding(label, confidence, f"{what}: matched {match.group(0).strip()[:60]!r}"))
    return [found[m] for m in DETECTED_MECHANISMS if m in found]


# --- failure causes --------------------------------------------------------------------------------------

# Flags that explain a wrong result by themselves (docs/harness.md: `aliases_input` alone is diagnostic only).
_CONTRACT_FLAGS = ("equals_input", "mutated_input", "wrong_shape", "wrong_dtype", "wrong_structure", "wrong_device")
_DEVICE_WAIT = re.compile(r"\bPeerTimeout\b|device-side wait timed out|\bwait timed out\b")
_COLLECTIVE_MISMATCH = re.compile(r"preamble|Connection closed by peer|Watchdog caught collective operation timeout"
                                  r"|collective operation timeout|mismatch(ed)? (in )?collective", re.I)
_SIGNAL_SOURCE = re.compile(r"\bwait_until\b|\bsignal\(|\bld\.acquire\b|\bbarrier\(const|while\s*\(\s*\*?\s*\w*flag")


def _first_line(text: str | None) -> str:
    """The error's first line, plus its first later line naming an 'error:' (a compiler's message)."""
    lines = (text or "").strip().splitlines()
    if not lines:
        return "no error text"
    detail = next((line.strip() for line in lines[1:] if "error:" in line.lower()), None)
    return lines[0][:160] + (f" / {detail[:160]}" if detail else "")


def _rank_dependent_collective(tree: ast.Module) -> str | None:
    """Where a collective sits inside an `if` whose test depends on the rank, as 'dist.recv (line 9)'."""
    calls = {id(call): name for name, call in _collective_calls(tree)}
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and re.search(r"rank", ast.unparse(node.test)):
            for inner in ast.walk(node):
                if id(inner) in calls:
                    return f"{calls[id(inner)]} (line {inner.lineno}) under `if {ast.unparse(node.test)}`"
    return None


def _recv_before_send(tree: ast.Module) -> str | None:
    """Where a function's first point-to-point call is a blocking recv, as 'dist.recv (line 12)': if every
    rank runs it, all of them wait and none sends."""
    for func in ast.walk(tree):
        if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            inner = {id(n) for n in ast.walk(func)}
            p2p = [(name, call) for name, call in _collective_calls(tree)
                   if id(call) in inner and name.rsplit(".", 1)[-1] in ("send", "recv")]
            if p2p and p2p[0][0].endswith("recv"):
                return f"{p2p[0][0]} (line {p2p[0][1].lineno})"
    return None


def _hang_cause(record: dict, source: str | None) -> Finding:
    error = record.get("error") or ""
    if _DEVICE_WAIT.search(error):
        return Finding("missing_signal", "high", f"error reports a device-side wait timeout: {_first_line(error)}")
    tree = None
    if source is not None:
        _, tree = _clean(source)
    if tree is not None:
        where = _rank_dependent_collective(tree)
        if where:
            return Finding("collective_ordering", "medium",
                           f"timeout; source issues {where}, so ranks may call collectives in different orders")
        first = _recv_before_send(tree)
        if first:
            return Finding("collective_ordering", "medium",
                           f"timeout; source calls blocking {first} before any send: ranks that all receive first "
                           f"deadlock")
        if _SIGNAL_SOURCE.search(source):
            return Finding("missing_signal", "medium", "timeout; source waits on device-side flags or signals")
        if _collective_calls(tree):
            return Finding("collective_ordering", "low", "timeout in a candidate that only moves data with "
                                                         "torch.distributed calls")
    return Finding("hang", "low", f"timeout: {_first_line(error)}")


def _wrong_result_cause(record: dict) -> Finding:
    flags = set(record.get("flags") or ())
    contract = [f for f in _CONTRACT_FLAGS if f in flags]
    if contract:
        return Finding("output_contract", "high", f"flags {contract}")
    if "side_stream" in flags:
        return Finding("unsynchronized", "high", "flag side_stream: the output changed after the current stream "
                                                 "finished (side-stream work never joined)")
    if "all_zero" in flags:
        return Finding("unsynchronized", "medium", "flag all_zero: the output was never written (a copy or a "
                                                   "signal not awaited)")
    per_rank = record.get("per_rank") or []
    bad = [p for p in per_rank if not p.get("ok")]
    good = [p for p in per_rank if p.get("ok")]
    if bad and good:
        return Finding("data_partitioning", "medium",
                       f"per_rank: ranks {[p['rank'] for p in bad]} wrong, ranks {[p['rank'] for p in good]} right")
    fractions = [p.get("mismatch_fraction") for p in bad]
    if bad and all(f is not None and 0 < f < 1 for f in fractions):
        where = ", ".join(f"rank {p['rank']}: {p['mismatch_fraction']:.0%} from index {p.get('first_bad_index')}"
                          for p in bad)
        return Finding("data_partitioning", "medium", f"per_rank: only part of each output is wrong ({where})")
    if "non_finite" in flags:
        return Finding("wrong_values", "medium", "flag non_finite: NaN or infinity in the output")
    return Finding("wrong_values", "low", "per_rank: the whole output is wrong on every failing rank"
                   if bad else f"status wrong_result: {_first_line(record.get('error'))}")


def failure_cause(record: dict, source: str | None = None) -> Finding | None:
    """Why a candidate failed (None when it is correct), from its record and, for hangs, its source.

    Example:
        >>> failure_cause({"status": "timeout", "error": "no result within 20 s"},
        ...               "import torch.distributed as dist\\ndef solution(x):\\n    if dist.get_rank() == 0:\\n"
        ...               "        dist.recv(x, 1)\\n    return x\\n").label
        'collective_ordering'
    """
    status = record.get("status")
    if status not in STATUSES:
        raise ValueError(f"record: status must be one of {STATUSES}, got {status!r}")
    error = record.get("error")
    if status in ("correct_slower", "correct_level", "correct_faster"):
        return None
    if "reference_error" in (record.get("flags") or ()):
        return Finding("reference_error", "high", f"flag reference_error: {_first_line(error)}")
    if status == "compile_error":
        return Finding("compile_error", "high", f"status compile_error: {_first_line(error)}")
    if status == "timeout":
        return _hang_cause(record, source)
    if status == "runtime_error":
        if error and _DEVICE_WAIT.search(error):
            return Finding("missing_signal", "high", f"error reports a device-side wait timeout: {_first_line(error)}")
        if error and _COLLECTIVE_MISMATCH.search(error):
            return Finding("collective_ordering", "medium",
                           f"error matches a collective mismatch ({_COLLECTIVE_MISMATCH.search(error).group(0)!r})")
        return Finding("runtime_error", "high", f"status runtime_error: {_first_line(error)}")
    return _wrong_result_cause(record)


# --- records → tables ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Diagnosis:
    """What one candidate used and, if it failed, why."""

    mechanisms: tuple[Finding, ...]
    failure: Finding | None


def diagnose(record: dict, source: str | None) -> Diagnosis:
    """Mechanisms (empty when the source is unavailable) and failure cause of one evaluated candidate."""
    found = tuple(mechanisms(source)) if source is not None else ()
    return Diagnosis(found, failure_cause(record, source))


def source_roots(records: Sequence[dict]) -> list[Path]:
    """Where to look for candidate sources: each record's `--solutions` folder (from its provenance; relative
    folders are taken from the repository root), then the repository's `problems/` and `samples/`."""
    roots = []
    for r in records:
        folder = ((r.get("provenance") or {}).get("parameters") or {}).get("solutions")
        if folder:
            path = Path(folder)
            roots.append(path if path.is_absolute() else REPO_ROOT / path)
    roots += [REPO_ROOT / "problems", REPO_ROOT / "samples"]
    return list(dict.fromkeys(roots))


def read_source(record: dict, roots: Iterable[Path]) -> str | None:
    """The text of the record's candidate (`solution` is relative to a solutions folder), or None."""
    for root in roots:
        path = Path(root) / record["solution"]
        if path.is_file():
            return path.read_text(encoding="utf-8", errors="replace")
    return None


def diagnose_records(records: Sequence[dict], roots: Iterable[Path] | None = None) -> pd.DataFrame:
    """One row per record: model, problem, category, solution, status, mechanisms ('+'-joined, 'none' when
    nothing moves data, 'unknown' when the source was not found), mechanism_evidence, cause,
    cause_confidence, cause_evidence."""
    roots = list(roots) if roots is not None else source_roots(records)
    rows = []
    for r in records:
        source = read_source(r, roots)
        d = diagnose(r, source)
        names = "+".join(f.label for f in d.mechanisms) or ("none" if source is not None else "unknown")
        rows.append({"model": r.get("model") or "unnamed", "problem": r["problem"], "category": r["category"],
                     "solution": r["solution"], "sample": r.get("sample"), "status": r["status"],
                     "speedup": r.get("speedup"), "mechanisms": names,
                     "mechanism_evidence": "; ".join(f"{f.label} [{f.confidence}]: {f.evidence}" for f in d.mechanisms),
                     "cause": d.failure.label if d.failure else None,
                     "cause_confidence": d.failure.confidence if d.failure else None,
                     "cause_evidence": d.failure.evidence if d.failure else None})
    return pd.DataFrame(rows)


def mechanism_usage(diagnoses: pd.DataFrame) -> pd.DataFrame:
    """`diagnose_records` output with one row per (candidate, mechanism) it uses."""
    return diagnoses.assign(mechanism=diagnoses["mechanisms"].str.split("+")).explode("mechanism")


def mechanism_outcomes(diagnoses: pd.DataFrame) -> pd.DataFrame:
    """Candidates per transfer mechanism and outcome, from `diagnose_records`: a row per mechanism used (in
    `DETECTED_MECHANISMS` order, then 'none' and 'unknown'), a column per status (`STATUSES`); a candidate using several
    mechanisms counts under each.

    Example:
        >>> d = pd.DataFrame({"mechanisms": ["sm+torch_distributed", "torch_distributed", "none"],
        ...                   "status": ["correct_faster", "wrong_result", "timeout"]})
        >>> t = mechanism_outcomes(d)
        >>> t.index.tolist(), t.loc["torch_distributed", ["wrong_result", "correct_faster"]].tolist()
        (['torch_distributed', 'sm', 'none'], [1, 1])
        >>> int(t.to_numpy().sum())  # the candidate using two mechanisms counts twice
        4
    """
    usage = mechanism_usage(diagnoses)
    names = [m for m in [*DETECTED_MECHANISMS, "none", "unknown"] if m in set(usage["mechanism"])]
    return pd.crosstab(usage["mechanism"], usage["status"]).reindex(index=names, columns=list(STATUSES), fill_value=0)


def cause_counts(diagnoses: pd.DataFrame) -> pd.DataFrame:
    """Failed candidates per cause and model, from `diagnose_records`: a row per cause assigned (in `CAUSES`
    order), a column per model (counts), then `confidence`: the confidences of the rules that assigned it,
    lowest first, joined by '/'.

    Example:
        >>> d = pd.DataFrame({"model": ["a", "b", "a", "b"], "cause": [None, "data_partitioning", "compile_error",
        ...                   "compile_error"], "cause_confidence": [None, "medium", "high", "medium"]})
        >>> cause_counts(d)  # doctest: +NORMALIZE_WHITESPACE
        model              a  b   confidence
        cause
        compile_error      1  1  medium/high
        data_partitioning  0  1       medium
    """
    failed = diagnoses[diagnoses["cause"].notna()]
    causes = [c for c in CAUSES if c in set(failed["cause"])]
    counts = pd.crosstab(failed["cause"], failed["model"]).reindex(index=causes, fill_value=0)
    joined = failed.groupby("cause")["cause_confidence"].agg(
        lambda s: "/".join(sorted(set(s), key=CONFIDENCE_LEVELS.index)))
    return counts.assign(confidence=joined.reindex(causes))


# --- published results -----------------------------------------------------------------------------------

def published(path: str | Path | None = None) -> pd.DataFrame:
    """The hand-transcribed published ParallelKernelBench results with a `fraction` column computed from the
    count (or, where a source gives only a percentage, from it).

    Example:
        >>> p = published()
        >>> p[(p.source_key == "talk") & (p.setting == "zero_shot")][["metric", "count"]].values.tolist()
        [['correct', 28.0], ['correct_and_faster', 22.0]]
    """
    frame = pd.read_csv(path or PUBLISHED_CSV)
    required = {"setting", "metric", "count", "percent", "problems", "source_key", "source", "note"}
    if not required <= set(frame.columns):
        raise ValueError(f"path: {path or PUBLISHED_CSV} lacks columns {sorted(required - set(frame.columns))}")
    from_count = frame["count"] / frame["problems"]
    return frame.assign(fraction=from_count.fillna(frame["percent"] / 100))


def pass_by_k(outcomes: pd.DataFrame, total_problems: int | None = None) -> pd.DataFrame:
    """pass@k and fast_1@k (`pkit.metrics.pass_rate`, `pkit.metrics.fast_p` at p = 1) of each model in
    `outcomes` (`pkit.metrics.outcomes`), for k from 1 to the fewest samples the model has of a problem: a row per
    (model, k), shares of problems in [0, 1] (over `total_problems` when given, problems without records unsolved).

    Example:
        >>> from pkit import metrics
        >>> rows = [{"problem": p, "category": "c", "model": "m", "status": s, "speedup": 2.0}
        ...         for p, s in (("a", "correct_faster"), ("a", "wrong_result"), ("b", "wrong_result"), ("b", "wrong_result"))]
        >>> pass_by_k(metrics.outcomes(rows)).round(2).values.tolist()
        [['m', 1, 0.25, 0.25], ['m', 2, 0.5, 0.5]]
    """
    from . import metrics

    rows = []
    for model, mine in outcomes.groupby("model", sort=True):
        for k in range(1, int(metrics.per_problem(mine).n.min()) + 1):
            rows.append({"model": model, "k": k, "pass": metrics.pass_rate(mine, k, total_problems),
                         "fast": metrics.fast_p(mine, 1.0, k, total_problems)})
    return pd.DataFrame(rows, columns=["model", "k", "pass", "fast"])
