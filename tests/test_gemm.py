"""pkit's Hopper GEMM: argument checks on CPU; on a GPU, C = A · Bᵀ against float32 at shapes whose tiles do not
divide, with a poisoned output."""
import pytest

torch = pytest.importorskip("torch")

from pkit.ops import gemm as G  # noqa: E402


def test_kernel_compiles_for_sm90a(cache_dir):
    import pkit

    kernel = pkit.compile("gemm.cu", "gemm_bf16_tn", arch="sm_90a")
    assert kernel.module.lowered["gemm_bf16_tn"].startswith("_Z")


@pytest.mark.parametrize("a, b, text", [
    (torch.zeros(4, 8), torch.zeros(4, 8), "a: expected a 2-D bfloat16 CUDA tensor"),
    (torch.zeros(4, 8, dtype=torch.bfloat16), torch.zeros(4, 8), "a: expected a 2-D bfloat16 CUDA tensor"),
])
def test_bad_arguments_name_the_argument(a, b, text):
    with pytest.raises(ValueError, match=text):
        G.gemm(a, b)


@pytest.mark.gpu
@pytest.mark.parametrize("m, n, k", [(128, 256, 64), (1000, 776, 1096), (8, 2, 8), (333, 512, 4096)])
def test_gemm_matches_float32(m, n, k):
    gen = torch.Generator(device="cuda").manual_seed(m * n + k)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=gen)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=gen)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    G.gemm(a, b, out)
    torch.cuda.synchronize()
    want = a.float() @ b.float().T
    # bf16 output rounding (2^-8 relative) plus fp32 accumulation-order differences over k terms
    torch.testing.assert_close(out.float(), want, rtol=2 ** -7, atol=1e-3 * k ** 0.5)


@pytest.mark.gpu
@pytest.mark.parametrize("kwargs, text", [
    (dict(m=64, n=64, k=12), "b: expected N × K with K = 12"),
    (dict(m=64, n=63, k=64), "b: expected an even number of rows"),
])
def test_gpu_argument_errors(kwargs, text):
    a = torch.zeros(kwargs["m"], kwargs["k"], device="cuda", dtype=torch.bfloat16)
    b = torch.zeros(kwargs["n"], kwargs["k"], device="cuda", dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=text):
        G.gemm(a, b)
