"""pkit.tolerance: one table of (atol, rtol) by dtype, read the same way whatever names the dtype, and the
harness's checks compare with the same numbers."""
import numpy as np
import pytest
import torch

from pkit.harness import checks
from pkit.tolerance import LOW_PRECISION, TOLERANCES, dtype_name, rank_sum_factor, tolerance

TORCH = {name: getattr(torch, name) for name in TOLERANCES}


@pytest.mark.parametrize("name", list(TOLERANCES))
def test_every_spelling_of_a_dtype_reads_the_same_row(name):
    spellings = [name, f"torch.{name}", TORCH[name]]
    if name in ("float64", "float32", "float16", "complex128", "complex64"):
        spellings.append(np.dtype(name))
    assert {tolerance(s) for s in spellings} == {TOLERANCES[name]}


def test_integers_and_bools_compare_exactly_and_explicit_values_win():
    for dtype in ("int64", torch.int32, torch.bool, np.dtype("uint16")):
        assert tolerance(dtype) == (0.0, 0.0)
    assert tolerance("bf16", atol=1e-3, summands=8) == (1e-3, 7 * TOLERANCES["bfloat16"][1])


@pytest.mark.parametrize("summands", [1, 2, 3, 8, 16])
def test_low_precision_sums_widen_by_the_roundings_of_the_partial_sums(summands):
    for name, table in TOLERANCES.items():
        grow = max(1, summands - 1) if name in LOW_PRECISION else 1
        assert rank_sum_factor(name, summands) == grow
        assert tolerance(name, summands=summands) == (table[0] * grow, table[1] * grow)


@pytest.mark.parametrize("name", list(TOLERANCES))
@pytest.mark.parametrize("summands", [1, 2, 8])
def test_the_harness_passes_half_the_table_and_fails_twice_it(name, summands):
    """Every element off by half the tolerance passes the element-wise check and the timed fingerprint; twice it
    fails both (ones as the reference: the error is atol + rtol, exactly representable in every dtype)."""
    atol, rtol = tolerance(name, summands=summands)
    ones = torch.ones(16, dtype=torch.float64)
    want = ones.to(TORCH[name])
    fingerprint = checks.FingerprintCheck(checks.fingerprint_check(want, summands=summands))
    for factor, ok in ((0.5, True), (2.0, False)):
        got = (ones + factor * (atol + rtol)).to(TORCH[name])
        assert checks.compare(want, got, summands=summands).ok is ok, factor
        assert (fingerprint.mismatch(checks.fingerprint(got)) is None) is ok, factor


def test_names_are_canonical():
    assert [dtype_name(d) for d in ("BF16", "half", torch.float64, np.dtype("float32"))] == [
        "bfloat16", "float16", "float64", "float32"]
