"""Regenerate results/cpu/llm_eval_example.jsonl (+ .json provenance), notebook 07's default input.

Runs `pkit eval` on the CPU (gloo, tiny size, world size 2) over the solutions shipped in problems/ and
the hand-written example samples in samples/ (written for pkit's test suite, not LLM output), and joins
the two record files. Timings are CPU/gloo at the tiny size, not GPU performance.

Usage: python scripts/eval_example.py
"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from pkit import results

ROOT = Path(__file__).resolve().parents[1]
RUNS = [["--model", "shipped", "--timeout", "60"], ["--solutions", "samples", "--timeout", "20"]]
COMMON = ["--device", "cpu", "--size", "tiny", "--world-size", "2", "--trials", "3"]


def main() -> None:
    out = ROOT / "results" / "cpu" / "llm_eval_example.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    commands, lines = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i, run in enumerate(RUNS):
            part = Path(tmp) / f"part{i}.jsonl"
            cmd = ["pkit", "eval", *run, *COMMON, "--out", part.name]
            commands.append(" ".join(cmd))
            subprocess.run([sys.executable, "-m", "pkit.cli", *cmd[1:-1], str(part)], cwd=ROOT, check=True)
            lines += part.read_text().splitlines()
    out.write_text("\n".join(lines) + "\n")
    prov = results.provenance({"commands": commands, "joined": "in order, one JSON line per record, unchanged",
                               "note": "samples/example/ is written by hand for pkit's test suite, not output of "
                                       "a language model; timings are CPU/gloo at the tiny size, not GPU "
                                       "performance"})
    prov.update(experiment="llm_eval_example", rows=len(lines))
    out.with_suffix(".json").write_text(json.dumps(prov, indent=2, sort_keys=True, default=str) + "\n")
    print(f"{len(lines)} records → {out}")


if __name__ == "__main__":
    main()
