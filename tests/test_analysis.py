"""Diagnosis of candidates: transfer mechanisms from fixture sources, failure causes from records."""
from pathlib import Path

import pandas as pd
import pytest

from pkit import analysis
from pkit.analysis import diagnose_records, failure_cause, mechanisms, published
from pkit.harness.records import STATUSES

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "samples"
HEADER = "# Written by hand for pkit's test suite; NOT output of a language model."

# One fixture source per mechanism; each is what a candidate for that mechanism typically contains.
MECHANISM_SOURCES = {
    "torch_distributed": [
        "import torch.distributed as dist\ndef solution(x):\n    dist.all_reduce(x)\n    return x\n",
        "from torch.distributed import all_gather_into_tensor as ag\ndef solution(o, x):\n    ag(o, x)\n",
        "import torch\ndef solution(x):\n    torch.distributed.broadcast(x, 0)\n    return x\n",
        'SRC = r"""\nncclAllReduce(buf, buf, n, ncclFloat, ncclSum, comm, stream);\n"""\n',
    ],
    "ce": [
        'SRC = r"""\ncudaMemcpyPeerAsync(dst, peer_dev, src, dev, bytes, stream);\n"""\n',
        "import cupy as cp\ndef solution(x):\n    cp.cuda.runtime.memcpyPeerAsync(0, 1, 0, 0, 16, 0)\n",
        "def solution(x, bufs):\n    peer_buf = bufs.get_buffer(1, x.shape, x.dtype)\n    peer_buf.copy_(x)\n",
    ],
    "sm": [
        'SRC = r"""\n#include <pkit/peer.cuh>\n__global__ void k(pkit::PeerTable<float> peers, float* o) {\n'
        '  o[threadIdx.x] = peers[1][threadIdx.x];\n}\n"""\n',
        "import torch.distributed._symmetric_memory as symm_mem\ndef solution(x):\n"
        "    h = symm_mem.rendezvous(x, 'default')\n",
        'SRC = r"""\n__global__ void k(float** remote_ptrs, float* o) { o[0] = remote_ptrs[1][0]; }\n"""\n',
    ],
    "tma": [
        'SRC = r"""\nasm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" '
        ':: "l"(dst), "r"(src), "r"(n));\n"""\n',
        'SRC = r"""\nCUtensorMap map; cuTensorMapEncodeTiled(&map, ...);\n"""\n',
    ],
    "nvshmem": [
        'SRC = r"""\nnvshmem_float_put(dst, src, n, peer); nvshmem_quiet();\n"""\n',
        "import nvshmem\ndef solution(x):\n    nvshmem.core.init()\n",
    ],
    "multicast": [
        'SRC = r"""\nasm("multimem.ld_reduce.relaxed.sys.global.add.f32 %0, [%1];" : "=f"(v) : "l"(mc));\n"""\n',
        "def solution(x, h):\n    ptr = h.multicast_ptr\n",
    ],
}


@pytest.mark.parametrize("label, source", [(m, s) for m, sources in MECHANISM_SOURCES.items() for s in sources])
def test_each_mechanism_is_detected_with_evidence(label, source):
    found = {f.label: f for f in mechanisms(source)}
    assert label in found, (label, found)
    assert found[label].confidence in analysis.CONFIDENCE_LEVELS and found[label].evidence


def test_collective_calls_are_found_through_the_syntax_tree_with_lines():
    [f] = mechanisms(MECHANISM_SOURCES["torch_distributed"][0])
    assert (f.label, f.confidence) == ("torch_distributed", "high")
    assert "dist.all_reduce (line 3)" in f.evidence


def test_comments_docstrings_and_local_copies_are_not_mechanisms():
    source = ('"""Unlike NCCL (ncclAllReduce) we use no multimem.ld_reduce and no cp.async.bulk."""\n'
              "# nvshmem_put would also work; cudaMemcpyPeerAsync too\n"
              "def solution(x, peer):\n    out = x.new_empty(x.shape)\n    out.copy_(x)\n    parts = [out]\n"
              "    parts[peer].copy_(x)\n    return out\n"
              'SRC = r"""\n// cp.async.bulk is not used here\n__global__ void k() {}\n"""\n')
    assert mechanisms(source) == []


def test_strongest_evidence_wins_and_unparseable_sources_are_downgraded():
    both = 'SRC = r"""\n#include <pkit/peer.cuh>\n__global__ void k(pkit::PeerTable<float> p, float** peer_ptrs) {\n' \
           '  float v = peer_ptrs[1][0];\n}\n"""\n'
    [f] = mechanisms(both)
    assert (f.label, f.confidence) == ("sm", "high") and "PeerTable" in f.evidence
    [g] = mechanisms("def solution(x:\n  asm('cp.async.bulk.global.shared::cta')\n")
    assert (g.label, g.confidence) == ("tma", "medium") and "does not parse" in g.evidence


def test_multicast_is_flagged_forbidden_and_mechanisms_are_ordered():
    assert analysis.FORBIDDEN == ("multicast",) and set(analysis.FORBIDDEN) <= set(analysis.DETECTED_MECHANISMS)
    source = MECHANISM_SOURCES["multicast"][0] + MECHANISM_SOURCES["torch_distributed"][0]
    assert [f.label for f in mechanisms(source)] == ["torch_distributed", "multicast"]
    with pytest.raises(TypeError, match="source:"):
        mechanisms(None)


def record(status, error=None, flags=(), per_rank=()):
    return {"status": status, "error": error, "flags": list(flags), "per_rank": list(per_rank)}


def ranks(*fractions):
    return [{"rank": r, "ok": f == 0, "mismatch_fraction": f, "first_bad_index": None if f == 0 else [8]}
            for r, f in enumerate(fractions)]


RANK_IF = ("import torch.distributed as dist\ndef solution(x):\n    if dist.get_rank() == 0:\n"
           "        dist.all_reduce(x)\n    return x\n")
RECV_FIRST = ("import torch.distributed as dist\ndef solution(x, y):\n    dist.recv(y, src=1)\n"
              "    dist.send(x, dst=1)\n    return y\n")
SPIN = 'SRC = r"""\n__global__ void k(unsigned* flag) { pkit::wait_until(flag, 1, PKIT_SITE); }\n"""\n'

CAUSE_CASES = [
    ("compile", record("compile_error", "rank 0, phase load_candidate: SyntaxError: expected ':'"), None,
     "compile_error", "high"),
    ("crash", record("runtime_error", "rank 1 died (signal SIGABRT) in phase candidate"), None, "runtime_error", "high"),
    ("device wait", record("runtime_error", "rank 0: PeerTimeout: kernel k waited 10 s at sync.cuh:70"), None,
     "missing_signal", "high"),
    ("gloo mismatch", record("runtime_error", "RuntimeError: [enforce fail at gloo/transport] op.preamble.length"),
     None, "collective_ordering", "medium"),
    ("rank-dependent collective", record("timeout", "no result within 20 s"), RANK_IF, "collective_ordering", "medium"),
    ("recv before send", record("timeout", "no result within 20 s"), RECV_FIRST, "collective_ordering", "medium"),
    ("spin wait", record("timeout", "no result within 20 s"), SPIN, "missing_signal", "medium"),
    ("collectives only", record("timeout"), MECHANISM_SOURCES["torch_distributed"][0], "collective_ordering", "low"),
    ("no source", record("timeout", "no result within 20 s"), None, "hang", "low"),
    ("aliases", record("wrong_result", flags=["aliases_input", "equals_input"], per_rank=ranks(1, 1)), None,
     "output_contract", "high"),
    ("zeros", record("wrong_result", flags=["all_zero"], per_rank=ranks(1, 1)), None, "unsynchronized", "medium"),
    ("side stream", record("wrong_result", flags=["side_stream"], per_rank=ranks(0.5, 0)), None, "unsynchronized",
     "high"),
    ("aliasing alone is diagnostic", record("wrong_result", flags=["aliases_input"], per_rank=ranks(0, 1.0)), None,
     "data_partitioning", "medium"),
    ("reference failed", record("runtime_error", "rank 0, phase reference: ValueError", flags=["reference_error"]),
     None, "reference_error", "high"),
    ("some ranks", record("wrong_result", per_rank=ranks(0, 1.0)), None, "data_partitioning", "medium"),
    ("some slices", record("wrong_result", per_rank=ranks(0.5, 0.5)), None, "data_partitioning", "medium"),
    ("everything", record("wrong_result", per_rank=ranks(1.0, 1.0)), None, "wrong_values", "low"),
    ("non-finite", record("wrong_result", flags=["non_finite"], per_rank=ranks(1.0, 1.0)), None, "wrong_values",
     "medium"),
]


@pytest.mark.parametrize("case, rec, source, label, confidence", CAUSE_CASES, ids=[c[0] for c in CAUSE_CASES])
def test_failure_causes(case, rec, source, label, confidence):
    found = failure_cause(rec, source)
    assert (found.label, found.confidence) == (label, confidence), found
    assert found.evidence


def test_every_cause_has_a_case_and_correct_candidates_have_none():
    assert {c[3] for c in CAUSE_CASES} == set(analysis.CAUSES)
    assert failure_cause(record("correct_faster")) is None and failure_cause(record("correct_slower")) is None
    assert failure_cause(record("correct_level")) is None
    with pytest.raises(ValueError, match="record: status"):
        failure_cause(record("fine"))


def test_example_samples_are_marked_as_hand_written():
    files = sorted((SAMPLES / "example").rglob("*.py"))
    assert len(files) >= 10
    for path in files:
        assert path.read_text().splitlines()[0] == HEADER, path


def test_diagnose_records_reads_the_example_samples():
    def r(rel, status, **extra):
        return {"problem": rel.split("/")[1], "category": "collectives", "solution": rel, "model": "example",
                "status": status, **extra}

    records = [r("example/01_all_reduce/0.py", "correct_faster", speedup=1.2),
               r("example/01_all_reduce/2.py", "wrong_result", per_rank=ranks(0.5, 0.5), flags=[]),
               r("example/01_all_reduce/3.py", "timeout", error="no result within 20 s"),
               r("example/01_all_reduce/4.py", "compile_error", error="CompileError: identifier undefined"),
               r("example/03_reduce_scatter/1.py", "wrong_result", per_rank=ranks(0, 1.0), flags=[]),
               r("example/missing.py", "runtime_error", error="boom")]
    d = diagnose_records(records, roots=[SAMPLES]).set_index("solution")
    assert d.loc["example/01_all_reduce/0.py", "mechanisms"] == "torch_distributed"
    assert pd.isna(d.loc["example/01_all_reduce/0.py", "cause"])
    assert d.loc["example/01_all_reduce/2.py", "cause"] == "data_partitioning"
    assert d.loc["example/01_all_reduce/3.py", "cause"] == "collective_ordering"
    assert "recv" in d.loc["example/01_all_reduce/3.py", "cause_evidence"]
    assert d.loc["example/01_all_reduce/4.py", "mechanisms"] == "sm"
    assert d.loc["example/01_all_reduce/4.py", "cause"] == "compile_error"
    assert d.loc["example/03_reduce_scatter/1.py", "cause"] == "data_partitioning"
    assert d.loc["example/missing.py", "mechanisms"] == "unknown"
    usage = analysis.mechanism_usage(d.reset_index())
    assert len(usage) == len(records)


def test_source_roots_come_from_provenance_then_the_repository():
    roots = analysis.source_roots([{"provenance": {"parameters": {"solutions": "samples"}}}])
    assert roots[0] == ROOT / "samples" and ROOT / "problems" in roots


def test_published_results_carry_sources_and_fractions():
    p = published()
    assert p["source"].notna().all() and (p["source"].str.len() > 10).all()
    talk = p[p.source_key == "talk"].set_index(["setting", "metric"])
    assert talk.loc[("zero_shot", "correct"), "count"] == 28
    assert talk.loc[("zero_shot", "correct_and_faster"), "count"] == 22
    assert talk.loc[("sampling", "correct"), "count"] == 36
    assert talk.loc[("agent", "correct"), "count"] == 35
    assert talk.loc[("sampling", "correct_and_faster"), "fraction"] == pytest.approx(0.31)
    assert talk.loc[("zero_shot", "correct"), "fraction"] == pytest.approx(28 / 87)
    assert (p["problems"] == 87).all() and p["fraction"].between(0, 1).all()
    assert p["note"].str.contains("disagree").any()


def test_old_and_new_timing_records_are_read_alike():
    old = {"problem": "p", "category": "c", "solution": "m/p/0.py", "status": "correct_slower", "speedup": 0.9,
           "flags": []}
    new = dict(old, solution="m/p/1.py", status="correct_level", speedup=1.02, speedup_low=0.95, speedup_high=1.1,
               timing_rounds=3)
    assert failure_cause(old) is None and failure_cause(new) is None
    rows = diagnose_records([old, new])
    assert len(rows) == 2


@pytest.fixture(scope="module")
def example_diagnoses() -> pd.DataFrame:
    """The diagnoses of the recorded example evaluation (pkit's solutions and the hand-written samples)."""
    from pkit.harness.records import read_jsonl

    return diagnose_records(read_jsonl(ROOT / "results" / "cpu" / "llm_eval_example.jsonl"))


def test_cause_counts_count_every_failed_candidate_once_by_model(example_diagnoses):
    counts = analysis.cause_counts(example_diagnoses)
    failed = example_diagnoses[example_diagnoses["cause"].notna()]
    assert len(failed) and int(counts.drop(columns="confidence").to_numpy().sum()) == len(failed)
    assert list(counts.index) == [c for c in analysis.CAUSES if c in set(failed["cause"])]
    for cause, row in counts.iterrows():
        mine = failed[failed["cause"] == cause]
        assert row.drop("confidence").to_dict() == {m: int((mine["model"] == m).sum()) for m in row.index[:-1]}
        levels = row["confidence"].split("/")
        assert set(levels) == set(mine["cause_confidence"])
        assert levels == sorted(levels, key=analysis.CONFIDENCE_LEVELS.index)


def test_mechanism_outcomes_count_each_candidate_under_each_mechanism_it_uses(example_diagnoses):
    table = analysis.mechanism_outcomes(example_diagnoses)
    uses = example_diagnoses["mechanisms"].str.split("+")
    assert int(table.to_numpy().sum()) == int(uses.map(len).sum())
    assert list(table.columns) == list(STATUSES)
    detected = [*analysis.DETECTED_MECHANISMS, "none", "unknown"]
    assert list(table.index) == [m for m in detected if m in set(uses.explode())]
    for mechanism, row in table.iterrows():
        mine = example_diagnoses[uses.map(lambda names: mechanism in names)]
        assert row[row > 0].to_dict() == mine["status"].value_counts().to_dict()
