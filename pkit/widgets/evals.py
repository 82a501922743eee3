"""The eval browser: `pkit eval` JSONL records (docs/harness.md) read (`load_records`), tabulated (`eval_table`),
filtered (`filter_table`) and explained one at a time (`record_detail`, `detail_html`), behind `eval_browser`'s
controls. What a file's records are (which candidates each model label stands for, whether a language model
wrote them) comes from the provenance file beside it where there is one (`files_about`), as for the example
records results/cpu/llm_eval_example.jsonl: pkit's shipped solutions, torch alternates and hand-written test
samples evaluated on the CPU, none of them LLM-written."""
from __future__ import annotations

import html
from pathlib import Path
from typing import Sequence

import pandas as pd

from .. import results
from ..harness.records import CORRECT, STATUSES, read_jsonl
from .common import box

ALL = "all"
FAILED = "failed (not correct)"


def jsonl_files(paths) -> list[Path]:
    """The `pkit eval` JSONL files `paths` names: a file, a folder (its *.jsonl files) or a list of them; None:
    every *.jsonl under results/."""
    if paths is None:
        paths = sorted(results.results_root().glob("*/*.jsonl"))
    if isinstance(paths, (str, Path)):
        paths = [paths]
    files = []
    for p in map(Path, paths):
        if p.is_dir():
            files += sorted(p.glob("*.jsonl"))
        elif p.is_file():
            files.append(p)
        else:
            raise ValueError(f"paths: {str(p)!r} is neither a JSONL file nor a folder")
    if not files:
        raise ValueError(f"paths: no *.jsonl files in {[str(p) for p in paths]}")
    return files


def file_name(path: Path) -> str:
    """How the browser names a records file: its folder and its name (`cpu/llm_eval_example.jsonl`)."""
    return f"{path.parent.name}/{path.name}"


def load_records(paths) -> tuple[list[dict], list[str]]:
    """The records of `pkit eval` JSONL files (`jsonl_files(paths)`) and, for each, the name of its file
    (`file_name`)."""
    records, names = [], []
    for f in jsonl_files(paths):
        got = read_jsonl(f)
        records += got
        names += [file_name(f)] * len(got)
    return records, names


def files_about(paths) -> dict[str, dict]:
    """Each records file's name (`file_name`) → what its provenance file says its records are
    (`pkit.experiments.llm_benchmark.records_about`: `what`, `labels`, `llm_written`; {} when it says nothing)."""
    from ..experiments.llm_benchmark import records_about

    return {file_name(f): records_about(f) for f in jsonl_files(paths)}


def eval_table(records: Sequence[dict], files: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per record (index: its position in `records`): file, model ('unnamed' when none), problem,
    category, solution, sample, status, speedup, world_size, error (its first line)."""
    from ..harness.records import first_line

    rows = [{"file": files[i] if files else None, "model": r.get("model") or "unnamed", "problem": r.get("problem"),
             "category": r.get("category"), "solution": r.get("solution"), "sample": r.get("sample"),
             "status": r.get("status"), "speedup": r.get("speedup"), "world_size": r.get("world_size"),
             "error": first_line(r.get("error"), 120)} for i, r in enumerate(records)]
    return pd.DataFrame(rows, columns=["file", "model", "problem", "category", "solution", "sample", "status",
                                       "speedup", "world_size", "error"])


def filter_table(table: pd.DataFrame, model: str | None = None, problem: str | None = None,
                 status: str | Sequence[str] | None = None) -> pd.DataFrame:
    """The rows of `eval_table` with that model, problem and status (None or 'all': any; status may be a list,
    or 'failed (not correct)' for every status but the correct ones: faster, level, slower)."""
    keep = pd.Series(True, index=table.index)
    if model not in (None, ALL):
        keep &= table["model"] == model
    if problem not in (None, ALL):
        keep &= table["problem"] == problem
    if status == FAILED:
        keep &= ~table["status"].isin(CORRECT)
    elif isinstance(status, str) and status != ALL:
        if status not in STATUSES:
            raise ValueError(f"status: expected one of {list(STATUSES)}, {ALL!r} or {FAILED!r}, got {status!r}")
        keep &= table["status"] == status
    elif status is not None and not isinstance(status, str):
        keep &= table["status"].isin(list(status))
    return table[keep]


def record_detail(record: dict, about: dict | None = None) -> dict:
    """What the browser shows for one record: what the candidate is (its model label and, from `about` (its
    file's `files_about`), what the label stands for and whether a language model wrote it; None when unknown),
    status, error (the excerpt as recorded), reason (why it failed, `pkit.analysis.failure_cause`, with its
    confidence and evidence; None when correct), flags, per_rank (a DataFrame, one row per rank), timing
    (reference and candidate ms, speedup and its interval over the timing rounds, roofline) and where it ran
    (machine, world size, device, dtype, size, commit, harness version)."""
    from ..analysis import CAUSES, failure_cause, read_source, source_roots

    try:
        source = read_source(record, source_roots([record])) if record.get("solution") else None
    except OSError:
        source = None
    cause = failure_cause(record, source)
    reason = (f"{cause.label}: {CAUSES.get(cause.label, '')} [{cause.confidence} confidence; {cause.evidence}]"
              if cause else None)
    per_rank = pd.DataFrame(record.get("per_rank") or [])
    prov = record.get("provenance") or {}
    timing = {k: record.get(k) for k in ("ref_time_ms", "sol_time_ms", "speedup", "speedup_low", "speedup_high",
                                         "timing_rounds", "roofline_time_ms", "roofline_bound", "roofline_fraction",
                                         "trials", "trials_passed")}
    about = about or {}
    model = record.get("model") or "unnamed"
    label = (about.get("labels") or {}).get(model)
    what = (f"{model}: {label}" + ("; not LLM-written" if about.get("llm_written") is False else "")
            if label else None)
    return {"title": f"{record.get('problem')} · {record.get('solution')} · {record.get('model') or 'unnamed'}"
                     + (f" sample {record['sample']}" if record.get("sample") is not None else ""),
            "what": what, "status": record.get("status"), "error": record.get("error"), "reason": reason,
            "flags": list(record.get("flags") or []), "per_rank": per_rank, "timing": timing,
            "ran_on": f"{prov.get('machine', '?')}, world size {record.get('world_size')}, {record.get('device')}, "
                      f"{record.get('dtype')}, size {record.get('size')}, pkit {str(prov.get('pkit_commit'))[:12]}"
                      + (f", harness {prov['harness_version']}" if prov.get("harness_version") else "")}


def detail_html(record: dict, about: dict | None = None) -> str:
    """`record_detail` as HTML."""
    d = record_detail(record, about)
    parts = [f"<b>{html.escape(d['title'])}</b>: <b>{html.escape(str(d['status']))}</b>",
             f"<br><small>ran on {html.escape(d['ran_on'])}</small>"]
    if d["what"]:
        parts.append(f"<br><small>{html.escape(d['what'])}</small>")
    if d["reason"]:
        parts.append(f"<br><b>reason</b>: {html.escape(d['reason'])}")
    if d["flags"]:
        parts.append(f"<br><b>flags</b>: {html.escape(', '.join(d['flags']))}")
    t = {k: v for k, v in d["timing"].items() if v is not None}
    if t:
        parts.append("<br><b>timing</b>: " + html.escape(", ".join(
            f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in t.items())))
    if d["error"]:
        parts.append(f"<br><b>error</b><pre style='white-space:pre-wrap;max-height:16em;overflow:auto'>"
                     f"{html.escape(d['error'])}</pre>")
    if len(d["per_rank"]):
        parts.append("<br><b>per rank</b>" + d["per_rank"].to_html(index=False, na_rep="", float_format="{:.4g}".format))
    return "".join(parts)


def eval_browser(paths=None, *, max_rows: int = 200):
    """Browse `pkit eval` JSONL files (`load_records(paths)`): filter by model, problem and status, see the
    table, and pick a record to see its error, the reason it failed and its per-rank detail. Controls:
    `.controls['model']`, 'problem', 'status', 'record'; outputs: 'summary', 'table', 'detail' (HTML)."""
    import ipywidgets as w

    records, files = load_records(paths)
    about = files_about(paths)
    table = eval_table(records, files)
    style = {"description_width": "70px"}
    controls = {
        "model": w.Dropdown(options=[ALL, *sorted(table["model"].unique())], description="model", style=style),
        "problem": w.Dropdown(options=[ALL, *sorted(table["problem"].dropna().unique())], description="problem",
                              style=style),
        "status": w.Dropdown(options=[ALL, FAILED, *STATUSES], description="status", style=style),
        "record": w.Select(description="record", rows=8, layout=w.Layout(width="95%"), style=style),
    }
    outputs = {"summary": w.HTML(), "table": w.HTML(), "detail": w.HTML()}
    state = {"busy": False}

    def show_detail(_=None):
        i = controls["record"].value
        outputs["detail"].value = (detail_html(records[i], about[files[i]]) if i is not None
                                   else "<i>No record selected.</i>")

    def refresh(_=None):
        if state["busy"]:
            return
        state["busy"] = True
        try:
            shown = filter_table(table, controls["model"].value, controls["problem"].value, controls["status"].value)
            counts = shown["status"].value_counts()
            outputs["summary"].value = (f"{len(shown)} of {len(table)} records from {len(set(files))} file(s): "
                                        + html.escape(", ".join(f"{s} {counts[s]}" for s in STATUSES if s in counts))
                                        + "".join(f"<br><i>{html.escape(name)}: {html.escape(a['what'])}</i>"
                                                  for name, a in about.items() if a.get("what")))
            view = shown.drop(columns=["category"]).head(max_rows)
            outputs["table"].value = (view.to_html(na_rep="", float_format="{:.3g}".format)
                                      + (f"<i>first {max_rows} shown</i>" if len(shown) > max_rows else ""))
            previous = controls["record"].value
            controls["record"].options = [(f"#{i} {r.problem} · {r.solution} · {r.model} · {r.status}", i)
                                          for i, r in shown.iterrows()]
            controls["record"].value = previous if previous in shown.index else (
                shown.index[0] if len(shown) else None)
        finally:
            state["busy"] = False
        show_detail()

    for name in ("model", "problem", "status"):
        controls[name].observe(refresh, names="value")
    controls["record"].observe(show_detail, names="value")
    refresh()
    return box([w.HBox([controls["model"], controls["problem"], controls["status"]]), outputs["summary"],
                w.Accordion([outputs["table"]], titles=("table",)), controls["record"], outputs["detail"]],
               controls, outputs, refresh)
