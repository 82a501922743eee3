"""The roofline gap on CPU: the gap table, the <50% claim, pkit solutions joined to baselines with their geomean
speedup, the two figures, pkit_solutions.csv recorded from synthetic `pkit eval` records, and the module's usage
run on them."""
import json
import math

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from pkit import figures, results  # noqa: E402
from pkit.experiments import roofline_gap  # noqa: E402
from pkit.experiments.roofline_gap import draw as roofline_gap_draw  # noqa: E402
from pkit.harness import baseline  # noqa: E402
from pkit.harness.problems import discover  # noqa: E402

CATEGORIES = ["collectives", "fused", "moe", "sequence", "data_parallel", "applications"]
TARGETS = {"speedup_target": 1.5, "min_problems": 12, "min_categories": 5, "roofline_target": 0.7}  # notebook 06's


def baselines_frame(rng, n: int, measured_share: float = 0.5) -> pd.DataFrame:
    """A baselines.csv-like frame of `n` problems with random times (ms) and rooflines; some rows measured."""
    time = rng.uniform(0.1, 50.0, n)
    datasheet = time * rng.uniform(0.01, 1.2, n)
    measured = np.where(rng.random(n) < measured_share, time * rng.uniform(0.01, 1.2, n), np.nan)
    measured[:2] = [time[0] * rng.uniform(0.01, 1.2), np.nan]  # at least one row of each kind
    return pd.DataFrame({
        "problem": [f"{i:02d}_p{rng.integers(1000)}" for i in range(n)],
        "category": rng.choice(CATEGORIES, n), "size": "large", "dtype": "bfloat16", "world_size": 2,
        "status": "correct_slower", "ref_time_ms_median": time, "roofline_datasheet_ms": datasheet,
        "roofline_datasheet_bound": rng.choice(["compute", "hbm", "link"], n), "roofline_measured_ms": measured,
        "roofline_measured_bound": np.where(np.isnan(measured), None, rng.choice(["link", "sync"], n))})


def solutions_frame(rng, base: pd.DataFrame) -> pd.DataFrame:
    """One pkit solution per baseline problem, correct with a random speedup over the reference."""
    speedup = rng.uniform(0.7, 4.0, len(base))
    return pd.DataFrame({
        "problem": base["problem"], "category": base["category"],
        "solution": base["problem"] + "/solutions/pkit_fast.py", "size": "large", "dtype": "bfloat16",
        "world_size": 2, "status": np.where(speedup > 1, "correct_faster", "correct_slower"), "correct": True,
        "sol_time_ms_median": base["ref_time_ms_median"] / speedup, "speedup": speedup})


def test_gap_table_is_sorted_and_uses_measured_ceilings_where_recorded():
    rng = np.random.default_rng()
    base = baselines_frame(rng, 20)
    base.loc[3, "ref_time_ms_median"] = np.nan  # a reference that failed: no time, last
    gap = roofline_gap.gap_table(base.sample(frac=1, random_state=int(rng.integers(1 << 30))))
    assert gap["problem"].iloc[-1] == base.loc[3, "problem"] and np.isnan(gap["fraction"].iloc[-1])
    fractions = gap["fraction"].dropna().to_numpy()
    assert len(fractions) == 19 and (np.diff(fractions) >= 0).all()
    row = gap.set_index("problem")
    for r in base.drop(index=3).itertuples():
        measured = not np.isnan(r.roofline_measured_ms)
        roof = r.roofline_measured_ms if measured else r.roofline_datasheet_ms
        got = row.loc[r.problem]
        assert got["fraction"] == pytest.approx(roof / r.ref_time_ms_median)
        assert got["datasheet_fraction"] == pytest.approx(r.roofline_datasheet_ms / r.ref_time_ms_median)
        assert got["ceilings"] == ("measured" if measured else "datasheet")
        assert got["bound"] == (r.roofline_measured_bound if measured else r.roofline_datasheet_bound)
        assert (got["category"], got["dtype"], got["time_ms"]) == (r.category, r.dtype, r.ref_time_ms_median)


def test_gap_table_refuses_an_old_baselines_frame_naming_what_it_lacks():
    old = pd.DataFrame([dict.fromkeys(baseline.COLUMNS, 1.0)])  # the float32-era table: datasheet roofline only
    with pytest.raises(ValueError, match="roofline_datasheet_ms.*re-record") as e:
        roofline_gap.gap_table(old)
    assert "roofline_measured_bound" in str(e.value) and "'problem'" not in str(e.value).split("missing")[1]


def test_claim_counts_problems_below_half_their_roofline_under_each_ceilings():
    rng = np.random.default_rng()
    base = baselines_frame(rng, int(rng.integers(8, 30)))
    gap = roofline_gap.gap_table(base)
    claim = roofline_gap.claim_test(gap)
    assert list(claim.index) == ["chosen", "datasheet", "measured"]
    for name, column in (("chosen", "fraction"), ("datasheet", "datasheet_fraction"),
                         ("measured", "measured_fraction")):
        values = gap[column].dropna()
        below = int(sum(v < 0.5 for v in values))
        assert claim.loc[name, "problems"] == len(values) and claim.loc[name, "below"] == below
        assert claim.loc[name, "share_below"] == pytest.approx(below / len(values))
        assert claim.loc[name, "holds"] == (below / len(values) > 0.5)
    none = roofline_gap.claim_test(gap.assign(measured_fraction=np.nan)).loc["measured"]
    assert none["problems"] == 0 and none["holds"] is None and np.isnan(none["share_below"])
    assert roofline_gap.claim_test(gap, threshold=10.0).loc["chosen", "below"] == len(gap["fraction"].dropna())


def test_pkit_solutions_join_baselines_and_a_failed_one_is_flagged_and_left_out_of_the_geomean():
    rng = np.random.default_rng()
    base = baselines_frame(rng, 14)
    sol = solutions_frame(rng, base)
    failed = base.loc[5, "problem"]
    sol.loc[5, ["status", "correct", "sol_time_ms_median", "speedup"]] = ["wrong_result", False, np.nan, np.nan]
    slower_twin = sol.iloc[[2]].assign(solution=lambda f: f["problem"] + "/solutions/pkit_slow.py",
                                       sol_time_ms_median=lambda f: f["sol_time_ms_median"] * 2,
                                       speedup=lambda f: f["speedup"] / 2)
    extra = sol.iloc[[0]].assign(problem="99_no_baseline")
    table = roofline_gap.solutions_vs_baselines(pd.concat([sol, slower_twin, extra]), base)
    assert len(table) == 15 and set(table["problem"]) == set(base["problem"]) | {"99_no_baseline"}
    fractions = table["baseline_fraction"].dropna().to_numpy()
    assert (np.diff(fractions) >= 0).all() and table["problem"].iloc[-1] == "99_no_baseline"
    rows, gap = table.set_index("problem"), roofline_gap.gap_table(base).set_index("problem")
    assert rows.loc[base.loc[2, "problem"], "solution"].endswith("pkit_fast.py")  # the faster of two is kept
    for p in base["problem"]:
        mine, theirs = sol.set_index("problem").loc[p], gap.loc[p]
        assert rows.loc[p, "baseline_fraction"] == pytest.approx(theirs["fraction"])
        if p != failed:
            assert rows.loc[p, "pkit_fraction"] == pytest.approx(theirs["roofline_ms"] / mine["sol_time_ms_median"])
            assert rows.loc[p, "speedup"] == pytest.approx(mine["speedup"])
    assert not rows.loc[failed, "correct"] and np.isnan(rows.loc[failed, "pkit_fraction"])
    assert np.isnan(rows.loc["99_no_baseline", "baseline_fraction"])

    summary = roofline_gap.speedup_summary(table, **TARGETS)
    good = table[table["correct"]]
    assert summary["failed"] == [failed] and summary["correct"] == 14 and summary["problems"] == 15
    assert summary["geomean_speedup"] == pytest.approx(math.exp(np.log(good["speedup"]).mean()))
    assert summary["meets_speedup"] == (summary["geomean_speedup"] >= 1.5)
    assert summary["categories"] == good["category"].nunique()
    assert summary["meets_coverage"] == (summary["categories"] >= 5)  # 14 correct problems >= 12
    assert summary["below_roofline_target"] == sorted(good.loc[~(good["pkit_fraction"] >= 0.7), "problem"])
    strict = roofline_gap.speedup_summary(table, **dict(TARGETS, min_problems=15, speedup_target=np.inf))
    assert not strict["meets_coverage"] and not strict["meets_speedup"]
    assert summary["faster"] == int((good["speedup"] > 1).sum())


def test_solutions_and_baselines_of_different_runs_are_refused():
    rng = np.random.default_rng()
    base = baselines_frame(rng, 4)
    sol = solutions_frame(rng, base)
    sol.loc[1, "dtype"] = "float32"
    with pytest.raises(ValueError, match=base.loc[1, "problem"]):
        roofline_gap.solutions_vs_baselines(sol, base)
    with pytest.raises(ValueError, match="missing \\['speedup'\\]"):
        roofline_gap.solutions_vs_baselines(sol.drop(columns="speedup"), base)


def test_figures_render_the_gap_and_the_pairs(tmp_path):
    rng = np.random.default_rng()
    base = baselines_frame(rng, 12)
    gap = roofline_gap.gap_table(base)
    share = roofline_gap.claim_test(gap).loc["chosen", "share_below"]
    provenance = {"machine": "h200x2-nv18", "gpus": ["NVIDIA H200"] * 2, "gpu_count": 2}
    fig = roofline_gap_draw.roofline_fractions(gap, provenance)
    title = fig._suptitle.get_text()
    assert f"{share:.0%} of 12 problems below 50%" in title and "world size 2" in title
    assert len(fig.axes[0].patches) == 12 and "fraction of the roofline" in fig.axes[0].get_xlabel()
    table = roofline_gap.solutions_vs_baselines(solutions_frame(rng, base), base)
    fig2 = roofline_gap_draw.roofline_pairs(table, note="synthetic")
    assert [t.get_text() for t in fig2.axes[0].get_yticklabels()] == list(table["problem"])
    paths = figures.save(fig, "roofline_gap_test", root=tmp_path) + figures.save(fig2, "roofline_pairs_test",
                                                                                  root=tmp_path)
    assert all(p.exists() and p.stat().st_size > 0 for p in paths)
    with pytest.raises(ValueError, match="provenance or note"):
        roofline_gap_draw.roofline_fractions(gap)


# --- recording pkit solutions from `pkit eval` records ----------------------------------------------------------

PROVENANCE = {"machine": "h200x2-nv18", "gpus": ["NVIDIA H200"] * 2, "gpu_count": 2, "driver": "x",
              "link_matrix": [["X", "NV18"], ["NV18", "X"]], "versions": {"torch": "t"}, "host": "h"}


def eval_record(rng, problem, solution: str, *, status: str = "correct_faster", commit: str = "abc",
                timing: str = "full", **extra) -> dict:
    """A `pkit eval` record (docs/harness.md's schema) of `solution` for `problem`, random times in ms."""
    ref, speedup = rng.uniform(0.5, 20.0), rng.uniform(0.8, 3.0)
    ok = status.startswith("correct")
    sol = ref / speedup if ok else None
    return {"problem": problem.name, "category": problem.category, "solution": solution, "model": None,
            "sample": None, "backend": None, "world_size": 2, "size": "large", "dtype": problem.dtypes[0],
            "device": "cuda", "status": status, "error": None if ok else "rank 1: wrong values\nmore",
            "max_abs_err": 0.0, "max_rel_err": 0.0, "per_rank": [], "flags": [], "ref_time_ms": ref,
            "ref_time_min_ms": ref * 0.9, "ref_time_iqr_ms": 0.01, "ref_time_cv": 0.02, "sol_time_ms": sol,
            "sol_time_min_ms": sol and sol * 0.9, "sol_time_iqr_ms": sol and 0.01, "sol_time_cv": sol and 0.03,
            "speedup": ref / sol if ok else None, "roofline_time_ms": 0.1, "roofline_bound": "link",
            "roofline_fraction": None, "rotations": 4, "trials": 3, "trials_passed": 3 if ok else 1, "seed": 1,
            "timing": timing, "wall_s": 1.0,
            "provenance": dict(PROVENANCE, pkit_commit=commit, utc_time=f"2026-12-0{len(commit)}T00:00:00Z"),
            **extra}


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def record_measured_ceilings(rng, machine: str):
    rows = [("gemm", d, rng.uniform(40, 800), "TFLOP/s") for d in ("bfloat16", "float16", "tfloat32", "float32")]
    rows += [("hbm", "", rng.uniform(3000, 4000), "GB/s read+write"), ("link", "", rng.uniform(300, 400),
                                                                       "GB/s one direction"),
             ("sync", "", rng.uniform(1, 3), "us")]
    frame = pd.DataFrame(rows, columns=["ceiling", "dtype", "value", "unit"]).assign(verified=True)
    results.record("ceilings", frame, {}, machine=machine)


def test_record_pkit_solutions_from_a_sweep_split_into_runs(tmp_path, monkeypatch):
    rng = np.random.default_rng()
    monkeypatch.setenv("PKIT_RESULTS", str(tmp_path / "results"))
    record_measured_ceilings(rng, "h200x2-nv18")
    chosen = list(rng.choice(discover(), 4, replace=False))
    a, b, c, d = chosen
    pkit = {p.name: f"{p.name}/solutions/pkit_one.py" for p in chosen}
    part1 = [eval_record(rng, p, pkit[p.name]) for p in (a, b, c)]
    part1 += [eval_record(rng, a, f"{a.name}/solutions/torch_alt.py"),  # not pkit's: ignored
              eval_record(rng, a, f"{a.name}/problem.py:reference"),
              eval_record(rng, a, f"gpt/{a.name}/pkit_like.py", model="gpt")]
    rerun = eval_record(rng, b, pkit[b.name], commit="abcd")  # the later record of b is kept
    part2 = [rerun, eval_record(rng, d, pkit[d.name], status="wrong_result", commit="abcd")]
    paths = [write_jsonl(tmp_path / "part1.jsonl", part1), write_jsonl(tmp_path / "part2.jsonl", part2)]
    assert baseline.main(["solutions", *map(str, paths)]) == 0

    folder = tmp_path / "results" / "h200x2-nv18"
    table = pd.read_csv(folder / "pkit_solutions.csv")
    assert list(table["problem"]) == sorted(pkit) and list(table.columns[:len(baseline.SOLUTION_COLUMNS)]) == list(
        baseline.SOLUTION_COLUMNS)
    rows = table.set_index("problem")
    assert rows.loc[b.name, "sol_time_ms_median"] == pytest.approx(rerun["sol_time_ms"], rel=1e-5)
    wrong = rows.loc[d.name]
    assert not wrong["correct"] and wrong["reason"] == "rank 1: wrong values" and np.isnan(wrong["speedup"])
    assert np.isnan(wrong["roofline_measured_fraction"])
    for p in (a, b, c):
        r = rows.loc[p.name]
        assert r["roofline_measured_fraction"] == pytest.approx(r["roofline_measured_ms"] / r["sol_time_ms_median"],
                                                                rel=1e-4)
        assert r["measured_ceilings"].startswith("measured on ")
    prov = json.loads((folder / "pkit_solutions.json").read_text())
    assert prov["gpus"] == PROVENANCE["gpus"] and "recorded_by" in prov and prov["pkit_commit"] == "abc + abcd"
    assert len(prov["parameters"]["runs"]) == 2 and prov["parameters"]["problems"] == 4

    # the notebook's chain on recorded files: baselines from the references' records, then the join
    refs = [eval_record(rng, p, f"{p.name}/problem.py:reference") for p in chosen]
    baseline.record_baselines([write_jsonl(tmp_path / "refs.jsonl", refs)])
    base = results.load("baselines", "h200x2-nv18").frame
    gap = roofline_gap.gap_table(base)
    assert set(gap["ceilings"]) == {"measured"} and set(gap["bound"]) <= set(roofline_gap.BOUNDS)
    both = roofline_gap.solutions_vs_baselines(results.load("pkit_solutions", "h200x2-nv18").frame, base)
    summary = roofline_gap.speedup_summary(both, **TARGETS)
    assert summary["failed"] == [d.name] and summary["correct"] == 3
    from_records = roofline_gap.solutions_vs_baselines(part1 + part2, base)  # records give the same table
    pd.testing.assert_frame_equal(from_records.drop(columns="solution"), both.drop(columns="solution"),
                                  check_dtype=False, rtol=1e-4)

    # the module's documented usage runs as written on these recordings; its last line is the summary
    usage = roofline_gap.__doc__.split("are recorded:\n")[1].split("\n\n")[0]
    *lines, last = [line.split("  #")[0].strip() for line in usage.splitlines()]
    scope = {}
    exec("\n".join(lines), scope)
    assert eval(last, scope) == summary and len(scope["gap"]) == 4


def test_record_pkit_solutions_refuses_quick_timing_other_machines_and_no_pkit_records(tmp_path, monkeypatch):
    rng = np.random.default_rng()
    monkeypatch.setenv("PKIT_RESULTS", str(tmp_path / "results"))
    a, b = rng.choice(discover(), 2, replace=False)
    quick = write_jsonl(tmp_path / "quick.jsonl", [eval_record(rng, a, f"{a.name}/solutions/pkit_x.py",
                                                               timing="quick")])
    with pytest.raises(ValueError, match="full timing"):
        baseline.record_pkit_solutions([quick])
    none = write_jsonl(tmp_path / "none.jsonl", [eval_record(rng, a, f"{a.name}/solutions/torch_alt.py")])
    with pytest.raises(ValueError, match="pkit solutions"):
        baseline.record_pkit_solutions([none])
    elsewhere = eval_record(rng, b, f"{b.name}/solutions/pkit_y.py")
    elsewhere["provenance"]["host"] = "other"
    mixed = write_jsonl(tmp_path / "mixed.jsonl", [eval_record(rng, a, f"{a.name}/solutions/pkit_x.py"), elsewhere])
    with pytest.raises(ValueError, match="different machines"):
        baseline.record_pkit_solutions([mixed])
    assert not (tmp_path / "results").exists()
