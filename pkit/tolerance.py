"""How close a computed output must come to its reference, by dtype: |got − want| ≤ atol + rtol · |want|.

One table (`TOLERANCES`, by dtype name, so torch, NumPy and CuPy dtypes and plain names all look it up) serves
every check that compares floating outputs: the harness's, the collectives' self-checks and the tests. Integer
and bool outputs compare exactly. A low-precision output that sums W ranks' terms, rounded at each addition,
gets W − 1 times the table's tolerance (`rank_sum_factor`).

Example:
    >>> tolerance("bfloat16"), tolerance("torch.float32"), tolerance("int64")
    ((0.02, 0.02), (0.0001, 0.0001), (0.0, 0.0))
    >>> tolerance("bfloat16", summands=5), tolerance("float32", summands=5), tolerance("bf16", atol=0.5)
    ((0.08, 0.08), (0.0001, 0.0001), (0.5, 0.02))
"""
from __future__ import annotations

TOLERANCES = {
    "float64": (1e-7, 1e-7),
    "float32": (1e-4, 1e-4),
    "float16": (1e-2, 1e-2),
    "bfloat16": (2e-2, 2e-2),
    "float8_e4m3fn": (1.25e-1, 1.25e-1),
    "float8_e5m2": (2.5e-1, 2.5e-1),
    "complex128": (1e-7, 1e-7),
    "complex64": (1e-4, 1e-4),
}
"""(atol, rtol) per floating dtype name of the reference output; other dtypes compare exactly."""

LOW_PRECISION = ("bfloat16", "float16", "float8_e4m3fn", "float8_e5m2")
"""Dtypes whose sums round visibly at each addition: their table tolerance grows with the terms summed."""

_ALIASES = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32", "float": "float32",
            "fp64": "float64", "double": "float64"}


def dtype_name(dtype) -> str:
    """The table's name of `dtype`: a torch, NumPy or CuPy dtype, or a name such as 'bf16' or 'torch.float32'.

    >>> import numpy as np
    >>> dtype_name(np.dtype("float32")), dtype_name("torch.bfloat16"), dtype_name("fp16")
    ('float32', 'bfloat16', 'float16')
    """
    name = str(dtype).removeprefix("torch.").lower()
    return _ALIASES.get(name, name)


def rank_sum_factor(dtype, summands: int = 1) -> float:
    """How much wider than the table the tolerance of a `dtype` output that is a sum of `summands` terms,
    rounded to `dtype` after each addition (a sum over the W ranks: summands = W), must be.

    The rounding model: an order of summation (NCCL's ring or tree, sequential, fp32 accumulation) rounds
    W-1 partial sums, each by up to half an ulp of that partial sum; two correct orders thus differ by up to
    2(W-1) such half-ulps, where the table allows for the one rounding of each side's final result. Partial
    sums of W independent terms are of the output's own magnitude (both grow like sqrt(W)), where the table
    is set, so the count of roundings is the factor: W-1 (1 up to W = 2, where every order gives the same
    bits). Simulated on the CPU as tests/test_tolerance_ranks.py does: bf16 sums of N(0, 1) buckets (problems
    01, 03) in five orders (rank order, reversed, tree, ring, fp32 accumulation) at W = 4, 8, 16 over 4-16 M
    elements differ by up to 0.52, 0.54, 0.47 of the widened tolerance (fp16: 0.14). float32/64, complex and
    integer outputs keep the table (factor 1).

    >>> rank_sum_factor("bfloat16", 8), rank_sum_factor("bfloat16", 2), rank_sum_factor("float32", 8)
    (7.0, 1.0, 1.0)
    """
    return float(max(1, summands - 1)) if dtype_name(dtype) in LOW_PRECISION else 1.0


def tolerance(dtype, atol: float | None = None, rtol: float | None = None,
              summands: int = 1) -> tuple[float, float]:
    """(atol, rtol) for outputs of `dtype` that sum `summands` terms (`rank_sum_factor`); explicit
    `atol`/`rtol` override the table and are used as given."""
    default = TOLERANCES.get(dtype_name(dtype), (0.0, 0.0))
    grow = rank_sum_factor(dtype, summands)
    return (default[0] * grow if atol is None else atol, default[1] * grow if rtol is None else rtol)


def bf16_gemm(terms: int, roundings: int = 1) -> dict:
    """{'rtol', 'atol'} for a bf16 GEMM output against its float32 product, `terms` products summed per element
    (K): each bf16 rounding of the output (2⁻⁸ relative, with margin 2⁻⁷) plus float32 accumulation-order
    differences growing like √K; `roundings`: how many times the output is rounded to bf16 on the way (2 when
    bf16 partial products are summed in bf16). Keyword arguments of torch.testing.assert_close.

    >>> bf16_gemm(terms=4096)
    {'rtol': 0.0078125, 'atol': 0.064}
    """
    return {"rtol": roundings * 2 ** -7, "atol": roundings * 1e-3 * terms ** 0.5}


# Hopper's FP8 tensor-core MMA keeps about 14 bits of its running sum (DeepSeek-V3 Technical Report, arXiv 2412.19437,
# section 3.3.2), i.e. about 13 below the leading bit; fast accumulation (cuBLASLt's CUBLASLT_MATMUL_DESC_FAST_ACCUM,
# pkit's FP8 GEMM) adds every step's products into that sum.
FP8_ACCUMULATOR_BITS = 13
FP8_STEP = 32  # K per FP8 MMA step (wgmma m64nNk32)


def fp8_fast_accum_bound(a, b, scale: float, want):
    """Elementwise bound on |C - want| for an FP8 GEMM with fast accumulation, C = scale · A · Bᵀ rounded to bf16,
    against its float32 product `want`: the bf16 rounding (2⁻⁷ relative, with margin) plus, per MMA step of K,
    one truncation of the running sum (2^-FP8_ACCUMULATOR_BITS of at most Σ|a||b|)."""
    magnitude = (a.float().abs() @ b.float().abs().T) * scale
    steps = -(-a.shape[1] // FP8_STEP)
    return 2 ** -7 * want.abs() + steps * 2.0 ** -FP8_ACCUMULATOR_BITS * magnitude


def fp8_scale_matches(got, want) -> bool:
    """Whether `got` (an FP8 GEMM's C) follows its float32 product `want` at slope 1 within a bf16 rounding
    (2⁻⁷): the least-squares slope Σ got·want / Σ want². A scale applied twice or not at all, or a share of K
    dropped, moves it far more; fast accumulation's truncations, which fall either way, do not."""
    got, want = got.double(), want.double()
    return abs(float((got * want).sum() / (want * want).sum()) - 1) <= 2 ** -7
