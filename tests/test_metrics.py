"""pass@k against exact combinatorics, fast_p and geometric-mean speedup on hand-built records."""
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from pkit import metrics
from pkit.metrics import fast_p, geomean_speedup, pass_at_k, pass_rate, table


def exact(n, c, k):
    """1 - C(n-c, k) / C(n, k) in exact rational arithmetic (math.comb is 0 when k > n - c)."""
    return 1 - Fraction(math.comb(n - c, k), math.comb(n, k))


def test_pass_at_k_equals_exact_values_for_every_small_case():
    for n in range(1, 16):
        for c in range(n + 1):
            for k in range(1, n + 1):
                assert pass_at_k(n, c, k) == pytest.approx(float(exact(n, c, k)), rel=1e-12, abs=1e-15), (n, c, k)


def test_pass_at_k_known_values():
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k(5, 1, 2) == pytest.approx(0.4)
    assert pass_at_k(4, 2, 2) == pytest.approx(5 / 6)


def test_pass_at_k_edge_cases():
    assert pass_at_k(7, 0, 1) == 0.0 and pass_at_k(7, 0, 7) == 0.0          # c = 0
    assert pass_at_k(7, 7, 1) == 1.0 and pass_at_k(1, 1, 1) == 1.0          # c = n
    assert pass_at_k(10, 8, 3) == 1.0 and pass_at_k(10, 5, 6) == 1.0        # k > n - c
    assert pass_at_k(10, 5, 5) < 1.0                                        # k = n - c


def test_pass_at_k_is_accurate_for_large_n():
    n, c, k = 10**6, 10, 100
    assert pass_at_k(n, c, k) == pytest.approx(float(exact(n, c, k)), rel=1e-12)
    tiny = pass_at_k(10**9, 1, 1)  # 1e-9: the naive 1 - ratio form loses digits here
    assert tiny == pytest.approx(1e-9, rel=1e-12)


@pytest.mark.parametrize("args, error, name", [
    ((0, 0, 1), ValueError, "n:"), ((5, 6, 1), ValueError, "c:"), ((5, -1, 1), ValueError, "c:"),
    ((5, 1, 0), ValueError, "k:"), ((5, 1, 6), ValueError, "k:"), ((5.0, 1, 1), TypeError, "n:"),
    ((5, True, 1), TypeError, "c:"),
])
def test_pass_at_k_errors_name_the_argument(args, error, name):
    with pytest.raises(error, match=name):
        pass_at_k(*args)


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 60).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
def test_pass_at_k_matches_exact_and_is_a_probability(nck):
    n, c, k = nck
    value = pass_at_k(n, c, k)
    assert 0.0 <= value <= 1.0
    assert value == pytest.approx(float(exact(n, c, k)), rel=1e-10, abs=1e-14)


@settings(max_examples=300, deadline=None)
@given(st.integers(2, 200).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n - 1), st.integers(1, n - 1))))
def test_pass_at_k_grows_with_k_and_with_c(nck):
    n, c, k = nck
    assert pass_at_k(n, c, k + 1) >= pass_at_k(n, c, k) - 1e-12
    assert pass_at_k(n, c + 1, k) >= pass_at_k(n, c, k) - 1e-12
    assert pass_at_k(n, c, 1) == pytest.approx(c / n)


def rec(problem, status, speedup=None, category="collectives", model="m", sample=None):
    return {"problem": problem, "category": category, "model": model, "sample": sample, "status": status,
            "speedup": speedup}


ONE_SAMPLE = [rec("a", "correct_faster", 2.0), rec("b", "correct_slower", 0.8), rec("c", "wrong_result"),
              rec("d", "correct_faster", 1.2, category="moe")]


def test_fast_p_on_one_sample_per_problem():
    assert fast_p(ONE_SAMPLE, p=1.0) == 0.5
    assert fast_p(ONE_SAMPLE, p=0.0) == 0.75 == pass_rate(ONE_SAMPLE)
    assert fast_p(ONE_SAMPLE, p=1.5) == 0.25
    assert fast_p(ONE_SAMPLE, p=2.0) == 0.0                   # strictly faster than p
    assert fast_p(ONE_SAMPLE, p=1.0, total=8) == 0.25         # missing problems count as unsolved
    with pytest.raises(ValueError, match="total:"):
        fast_p(ONE_SAMPLE, total=3)


def test_fast_p_k_sample_form():
    samples = [rec("a", "correct_faster", 2.0, sample=0), rec("a", "wrong_result", sample=1),
               rec("a", "correct_slower", 0.9, sample=2), rec("b", "timeout", sample=0),
               rec("b", "timeout", sample=1), rec("b", "compile_error", sample=2)]
    assert fast_p(samples, 1.0, k=1) == pytest.approx((1 / 3 + 0) / 2)
    assert fast_p(samples, 1.0, k=2) == pytest.approx((2 / 3 + 0) / 2)
    assert fast_p(samples, 1.0, k=3) == pytest.approx(0.5)
    assert pass_rate(samples, k=1) == pytest.approx((2 / 3) / 2)
    assert pass_rate(samples, k=2) == pytest.approx(1 / 2)


def test_one_model_at_a_time_and_record_checks():
    with pytest.raises(ValueError, match="models"):
        fast_p(ONE_SAMPLE + [rec("a", "correct_faster", 3.0, model="other")])
    with pytest.raises(ValueError, match=r"records\[0\]: missing fields \['status'\]"):
        metrics.outcomes([{"problem": "a", "category": "c"}])
    with pytest.raises(ValueError, match="k:"):
        fast_p(ONE_SAMPLE, k=0)


def test_geomean_speedup_uses_correct_records_only():
    records = [rec("a", "correct_faster", 2.0), rec("b", "correct_slower", 0.5), rec("c", "wrong_result", 100.0)]
    assert geomean_speedup(records) == pytest.approx(1.0)
    assert math.isnan(geomean_speedup([rec("c", "wrong_result")]))


def test_table_per_category_and_overall():
    t = table(ONE_SAMPLE, ks=[1], ps=[1.0])
    value = t.set_index(["category", "metric"])["value"]
    assert value[("all", "pass")] == 0.75 and value[("all", "fast")] == 0.5
    assert value[("collectives", "pass")] == pytest.approx(2 / 3)
    assert value[("collectives", "fast")] == pytest.approx(1 / 3)
    assert value[("moe", "fast")] == 1.0
    assert value[("all", "geomean_speedup")] == pytest.approx((2.0 * 0.8 * 1.2) ** (1 / 3))
    assert set(t["problems"][t["category"] == "all"]) == {4}


def test_table_caps_k_at_each_problems_samples():
    samples = [rec("a", "wrong_result", sample=0), rec("a", "correct_faster", 2.0, sample=1)]
    t = table(samples, ks=[1, 5], ps=[1.0])
    passes = t[(t.metric == "pass") & (t.category == "all")].set_index("k")["value"]
    assert passes[1] == 0.5 and passes[5] == 1.0


def test_records_without_model_are_unnamed():
    t = table([{"problem": "a", "category": "c", "status": "correct_slower", "speedup": 0.9}])
    assert set(t["model"]) == {metrics.UNNAMED_MODEL}


def test_level_records_are_correct_and_not_faster():
    level = [rec("a", "correct_level", 1.04), rec("b", "correct_level", 0.97), rec("c", "correct_faster", 1.3)]
    assert pass_rate(level) == 1.0
    assert fast_p(level, p=1.0) == pytest.approx(1 / 3)  # 1.04 is a tie, not a speedup
    assert fast_p(level, p=0.8) == 1.0  # a tie is credited 1, faster than 0.8
    both = ONE_SAMPLE + [rec("e", "correct_level", 1.01, category="moe")]  # old records beside a new one
    assert pass_rate(both) == pytest.approx(4 / 5) and fast_p(both, p=1.0) == pytest.approx(2 / 5)
    assert metrics.outcomes(both)["correct"].tolist() == [True, True, False, True, True]


def test_fast_p_curve_is_fast_p_per_model_and_falls_as_p_rises():
    two = ONE_SAMPLE + [rec("a", "correct_faster", 3.0, model="n"), rec("b", "wrong_result", model="n")]
    ps = [0.0, 0.9, 1.0, 1.5, 2.5]
    curve = metrics.fast_p_curve(two, ps, total=6)
    assert curve["model"].tolist() == ["m"] * 5 + ["n"] * 5 and curve["p"].tolist() == ps * 2
    for row in curve.itertuples():
        mine = [r for r in two if r["model"] == row.model]
        assert row.fast == fast_p(mine, row.p, 1, 6)
    assert curve.groupby("model")["fast"].apply(lambda f: f.is_monotonic_decreasing).all()
    assert curve.set_index(["model", "p"]).loc[("n", 2.5), "fast"] == pytest.approx(1 / 6)


def test_fast_p_curve_is_fast_p_at_every_p_on_many_samples():
    rng = np.random.default_rng()
    statuses = ["correct_faster", "correct_level", "correct_slower", "wrong_result", "runtime_error"]
    records = [rec(f"p{i % 7}", str(rng.choice(statuses)), float(rng.uniform(0, 3)) if rng.random() < 0.8 else None,
                   model=str(rng.choice(["m", "n"]))) for i in range(280)]
    ps = list(np.linspace(0, 3, 13))
    for k in (1, 2):
        curve = metrics.fast_p_curve(records, ps, k=k)
        for row in curve.itertuples():
            assert row.fast == fast_p([r for r in records if r["model"] == row.model], row.p, k), row


def test_by_category_holds_the_tables_pass_and_fast_with_problems_counted():
    two = ONE_SAMPLE + [rec("a", "correct_faster", 3.0, model="n")]
    scores, problems = metrics.by_category(two)
    assert scores.index.tolist() == ["all", "collectives", "moe"]
    assert scores.columns.tolist() == ["m\npass@1", "m\nfast_1@1", "n\npass@1", "n\nfast_1@1"]
    t = table(two).set_index(["model", "category", "metric"])
    for category in scores.index:
        for model in ("m", "n"):
            for metric, column in (("pass", f"{model}\npass@1"), ("fast", f"{model}\nfast_1@1")):
                if (model, category, metric) in t.index:
                    assert scores.loc[category, column] == t.loc[(model, category, metric), "value"]
                    assert problems.loc[category, column] == t.loc[(model, category, metric), "problems"]
                else:  # no records of the model there: no value, not 0
                    assert math.isnan(scores.loc[category, column]) and math.isnan(problems.loc[category, column])
    assert math.isnan(scores.loc["moe", "n\npass@1"]) and scores.loc["moe", "m\npass@1"] == 1.0
    faster = metrics.by_category(two, p=2.5)[0]
    assert faster.loc["all", "n\nfast_2.5@1"] == 1.0 and faster.loc["all", "m\nfast_2.5@1"] == 0.0
