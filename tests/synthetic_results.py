"""Synthetic recorded results for the notebooks whose GPU results are not recorded yet (05_overlap, 06_roofline_gap).

Each recorder runs the real recording path, the one a GPU machine will run, with only the GPU work replaced:
`pkit.experiments.overlap.main --record` with stand-ins for the Team, the overlap ops, their checks, the timer
and torchrun; `pkit.experiments.ceilings.main --record` with stand-ins for its four GPU measurements; and
`pkit.harness.baseline`'s `pkit` and `solutions` recorders on synthetic `pkit eval` records. So the tables carry
the columns, dtypes and provenance that the real code writes, derived columns (gemm_rates' ratio_to_cublas,
sweep's rows, the rooflines of baselines.csv) computed by the real functions. Times are made up (a model of the
roofline times a random factor): nothing here is a measurement, and it all goes under a temporary results root.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

import pkit
from pkit import results
from pkit.ops.overlap_patterns import PATTERNS, schedules
from pkit.roofline import floor
from pkit.timing import summarize

MACHINE = "h200x2-nv18"  # the machine the notebooks replay by default
REPO = Path(__file__).resolve().parents[1]

# Synthetic time over the roofline bound per schedule of the registry (the ones that run NCCL's collective first
# against the serial bound): made up, not measured.
OVER_BOUND = {name: 1.25 + 0.05 * i for i, name in enumerate(schedules())}


class _Team:
    """Stands for a two-GPU pkit.Team: the sweeps read its devices and size and synchronize it."""

    rank = None

    def __init__(self, devices):
        self.devices, self.size = list(devices), len(devices)

    def synchronize(self):
        pass


class _Op:
    """Stands for AllGatherGemm and PartialGemm: keeps the shape; `run` notes the schedule for the timer and, with
    `timeline=`, appends (rank, kind, first row, start, end) events of a chunked run (times in ms)."""

    last = None  # the op and schedule of the latest run, which the stand-in timer times

    def __init__(self, team, m, k=None, n_local=None, chunk_rows=1024, k_local=None, n=None, scatter=True):
        self.team, self.m, self.chunk_rows = team, m, chunk_rows
        if n_local is not None:
            self.pattern, self.cost = "ag_gemm", PATTERNS["ag_gemm"].cost(m, k, n_local, team.size)
        else:
            self.pattern = "gemm_rs" if scatter else "gemm_ar"
            self.cost = PATTERNS[self.pattern].cost(m, k_local * team.size, n, team.size)

    def run(self, schedule, timeline=None, **options):
        _Op.last = (self, schedule)
        if timeline is not None:
            chunks = self.m // self.chunk_rows
            for rank in range(self.team.size):
                for i in range(chunks):
                    timeline.append((rank, "gemm", i * self.chunk_rows, 0.05 * i + 0.01, 0.05 * i + 0.06))
                    if i >= chunks // self.team.size:  # the peer's rows arrive by copy, a chunk ahead of its GEMM
                        timeline.append((rank, "copy", i * self.chunk_rows, 0.05 * i - 0.04, 0.05 * i + 0.005))


def _synthetic_bench(rng):
    """A stand-in for pkit.bench: runs `fn` once and returns a real BenchResult of made-up samples around the
    roofline of the op and schedule it ran (`OVER_BOUND`)."""
    def bench(fn, devices=None, warmup=0, reps=10, **_):
        fn()
        op, schedule = _Op.last
        f = floor(op.cost)
        base = f.serial_s if schedules()[schedule].transfer == "nccl" else f.time_s
        return summarize(base * 1e3 * OVER_BOUND[schedule] * rng.uniform(0.97, 1.05, reps), devices=devices or ())
    return bench


def _gemm_rates(rng):
    """Stand-ins for overlap_gemm._rates_of_shape and _plans_of_shape: their rows for one shape (the keys they
    write), made-up rates."""
    from pkit.experiments.overlap.gemm import IMPLEMENTATIONS
    from pkit.ops.gemm_plans import STAGE_COUNTS, VARIANTS

    def timed(m, n, k, tflops, reps):
        t = summarize(2 * m * n * k / (tflops * 1e12) * 1e3 * rng.uniform(0.98, 1.02, reps))
        return {**t.times_us(), "tflops": 2 * m * n * k / (t.median_ms * 1e-3) / 1e12}

    def rates(m, n, k, dtype, device, reps, warmup, seed):
        return [{"implementation": name, "dtype": dtype, "m": m, "n": n, "k": k,
                 "block_n": 256 if name.startswith("pkit") else 0, "splits": 1 if name.startswith("pkit") else 0,
                 "stages": STAGE_COUNTS[256][0] if name.startswith("pkit") else 0,
                 "cluster": 1 if name.startswith("pkit") else 0, "alternate": False,
                 **timed(m, n, k, rng.uniform(500, 750), reps), "verified": True,
                 "max_abs_err": rng.uniform(0.01, 0.1)} for name in IMPLEMENTATIONS[dtype]]

    def plans(m, n, k, dtype, device, reps, warmup, seed):
        return [{"dtype": dtype, "m": m, "n": n, "k": k, "block_n": w, "splits": s, "stages": st, "cluster": c,
                 "alternate": alt, "share_a": sa, "rows": r, "split_tail": False,
                 **timed(m, n, k, rng.uniform(300, 750), reps),
                 "verified": True, "chosen": (w, st, c, alt, sa, r, s) == (*VARIANTS[0], 1)}
                for w, st, c, alt, sa, r in VARIANTS for s in ((1,) if alt else (1, 2))]

    return rates, plans


def _torchrun(rng):
    """A stand-in for pkit.experiments.torchrun.torchrun of pkit.experiments.overlap.pytorch: its rows (sweep's
    columns, which torch_overlap writes in the same order) for the schedules it times, from overlap_measure._row."""
    from pkit.experiments import overlap
    from pkit.experiments.overlap import sweeps as overlap_measure

    def run(module, args, nproc=2, timeout_s=600):
        assert module == "pkit.experiments.overlap.pytorch", module
        args = [str(a) for a in args]
        pattern = args[args.index("--pattern") + 1]
        m, k, n = (int(v) for v in args[args.index("--shape") + 1:args.index("--shape") + 4])
        inner = [int(v) for v in args[args.index("--inner") + 1:]]
        reps = int(args[args.index("--reps") + 1])
        team, rows = _Team(range(nproc)), []
        for i in inner:
            if pattern == "ag_gemm":
                op, shape = _Op(team, m, k=k, n_local=i), {"m": m, "k": k, "n": i}
            else:
                op, shape = _Op(team, m, k_local=i, n=n), {"m": m, "k": i * nproc, "n": n}
            rows += [overlap_measure._row(team, op, pattern, s, {}, shape, (True, 0.05), reps, 3)
                     for s in overlap.TORCH_SCHEDULES]
        return pd.DataFrame(rows)
    return run


def _elapsed_ms(start, end):
    """A stand-in for cupy.cuda.get_elapsed_time over the stand-in events (times in ms)."""
    return end - start


def record_overlap(monkeypatch, rng, gpus=(0, 1), reps=10) -> None:
    """Every study of `pkit.experiments.overlap` recorded by its command line (`main([...MEASUREMENTS, '--record'])`)
    under $PKIT_RESULTS/MACHINE, with the GPU work replaced by stand-ins (the op classes the registry's patterns
    make, and what overlap_measure calls)."""
    import cupy

    from pkit.experiments import overlap
    from pkit.experiments.overlap import gemm as overlap_gemm, sweeps as overlap_measure
    from pkit.ops import overlap as ops

    monkeypatch.setattr(results, "machine_slug", lambda: MACHINE)
    monkeypatch.setattr(pkit, "Team", _Team)
    for name in {p.op_class for p in PATTERNS.values()}:
        monkeypatch.setattr(ops, name, _Op)
    monkeypatch.setattr(overlap_measure, "fill", lambda op, seed: [])
    monkeypatch.setattr(overlap_measure, "fill_partial", lambda op, seed: ([], []))
    monkeypatch.setattr(overlap_measure, "check", lambda op, want, terms, roundings=1, scales=None:
                        (True, float(rng.uniform(0.01, 0.1))))
    monkeypatch.setattr(overlap_measure, "bench", _synthetic_bench(rng))
    rates, plans = _gemm_rates(rng)
    monkeypatch.setattr(overlap_gemm, "_rates_of_shape", rates)
    monkeypatch.setattr(overlap_gemm, "_plans_of_shape", plans)
    monkeypatch.setattr(overlap_measure, "torchrun", _torchrun(rng))
    monkeypatch.setattr(cupy.cuda, "get_elapsed_time", _elapsed_ms)
    overlap.main([*overlap.MEASUREMENTS, "--gpus", *map(str, gpus), "--reps", str(reps), "--record"])


def _raw_ceilings(rng):
    """Stand-ins for the four measurements of pkit.experiments.ceilings, each returning the rows its docstring
    lists (made-up rates, checked and verified as the real ones are)."""
    def times(us):
        return summarize(us * 1e-3 * rng.uniform(0.98, 1.02, 20)).times_us()

    def gemm_rates(dtypes, sizes, device):
        peak = {"bfloat16": 700.0, "float16": 700.0, "tfloat32": 350.0, "float32": 50.0}
        rows = []
        for d in dtypes:
            for n in sizes:
                rate = peak[d] * rng.uniform(0.9, 1.0)
                rows.append({"dtype": d, "size": n, "device": device, "flops": 2 * n**3,
                             **times(2 * n**3 / (rate * 1e12) * 1e6), "rate_TFLOPps": rate, "relative_error": 1e-4,
                             "verified": True, "rotations": 3})
        return pd.DataFrame(rows)

    def hbm_copy_rate(nbytes, device):
        return pd.DataFrame([{"mechanism": m, "device": device, "bytes": nbytes, **times(500.0),
                              "copy_bandwidth_GBps": g / 2, "read_write_GBps": g, "verified": True, "rotations": 1}
                             for m, g in (("ce", rng.uniform(3500, 4200)), ("sm_push", rng.uniform(3500, 4200)))])

    def link_rates(nbytes, src, dst):
        return pd.DataFrame([{"mechanism": m, "src": src, "dst": dst, "bytes": nbytes, **times(800.0),
                              "bandwidth_GBps": rng.uniform(300, 400), "verified": True, "rotations": 1}
                             for m in ("ce", "sm_push")])

    def sync_latency(pair, steps):
        return pd.DataFrame([{"devices": ",".join(map(str, pair)), "steps": steps, **times(1500.0),
                              "step_us": rng.uniform(1.0, 2.0), "verified": True}])

    return {"gemm_rates": gemm_rates, "hbm_copy_rate": hbm_copy_rate, "link_rates": link_rates,
            "sync_latency": sync_latency}


def _pkit_solutions(problem) -> list[str]:
    """The problem's shipped pkit solutions as `pkit eval` names them: <problem>/solutions/pkit_*.py."""
    folder = REPO / "problems" / problem.name / "solutions"
    return [f"{problem.name}/solutions/{p.name}" for p in sorted(folder.glob("pkit_*.py"))]


def record_roofline_gap(monkeypatch, rng, tmp_path) -> None:
    """The three tables notebook 06 reads, recorded by the real recorders under $PKIT_RESULTS/MACHINE: ceilings
    (`pkit.experiments.ceilings.main --record`, stand-in measurements), then baselines and pkit_solutions
    (`python -m pkit.harness.baseline pkit|solutions` on synthetic `pkit eval` records of every problem's
    reference and every shipped pkit solution, in bf16 where the problem has it; one pkit solution fails)."""
    from test_roofline_gap import eval_record, write_jsonl

    from pkit.experiments import ceilings
    from pkit.harness import baseline
    from pkit.harness.problems import discover

    monkeypatch.setattr(results, "machine_slug", lambda: MACHINE)
    for name, stand_in in _raw_ceilings(rng).items():
        monkeypatch.setattr(ceilings, name, stand_in)
    ceilings.main(["--devices", "0", "1", "--record"])
    problems = discover()

    def dtype(p):
        return "bfloat16" if "bfloat16" in p.dtypes else p.dtypes[0]

    refs = [eval_record(rng, p, f"{p.name}/problem.py:reference", dtype=dtype(p)) for p in problems]
    shipped = [(p, s) for p in problems for s in _pkit_solutions(p)]
    mine = [eval_record(rng, p, s, dtype=dtype(p), status="wrong_result" if i == 0 else "correct_faster")
            for i, (p, s) in enumerate(shipped)]
    assert baseline.main(["pkit", str(write_jsonl(tmp_path / "references.jsonl", refs))]) == 0
    assert baseline.main(["solutions", str(write_jsonl(tmp_path / "solutions.jsonl", mine))]) == 0
