"""The accuracy rule itself (gemm.reference): the contract's elementwise tolerance, widened for the cuda
backend by ACCUMULATION_ALLOWANCE times the sum of the terms' magnitudes. These check that the widening
is needed by reduced-precision accumulation, accepts it, and still rejects wrong results."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import make_problem

CUDA_ALLOWANCE_CASES = [(64, 256, 7168), (96, 300, 256)]


@pytest.fixture
def ref_mod(kernel):
    return kernel.reference


def test_contract_rule_unchanged_for_cpu_and_rocm(kernel, ref_mod):
    assert ref_mod.ACCUMULATION_ALLOWANCE["cpu"] == 0.0
    assert ref_mod.ACCUMULATION_ALLOWANCE["rocm"] == 0.0
    assert 0.0 < ref_mod.ACCUMULATION_ALLOWANCE["cuda"] < 1e-3
    assert kernel.ACCUMULATION_ALLOWANCE == ref_mod.ACCUMULATION_ALLOWANCE[kernel.BACKEND]


def test_magnitude_bounds_the_result_and_matches_across_layouts(ref_mod):
    p = make_problem(40, 200, 384, torch.float8_e4m3fn, "cpu", seed=1)
    terms = ref_mod.magnitude(p.a, p.b, p.a_scale, p.b_scale)
    exact = ref_mod.gemm_reference(p.a, p.b, p.a_scale, p.b_scale).float()
    assert terms.shape == exact.shape
    assert (exact.abs() <= terms * (1 + 2**-7)).all(), "|sum| > sum |terms|"
    assert torch.allclose(ref_mod.natural_magnitude(*p.natural()), terms, rtol=1e-6)


def _reduced_precision_product(p, frac_bits: int = 11, chunk: int = 32) -> torch.Tensor:
    """A model of an FP8 tensor core that keeps `frac_bits` below the largest term of each k-chunk:
    every chunk's exact sum is truncated to that grid, then block-scaled and added in fp32. With 11 bits
    it is coarser than the H200 measured (up to 2.9e-4 ~ 2^-11.7 of a k=32 product's magnitude); its error
    is at most 2^-11 of the magnitude, half the allowance: this checks that the allowance covers such an
    accumulator with room to spare, not the hardware itself (tests/cuda and benchmarks.precision do)."""
    K, M = p.a.shape
    N = p.b.shape[1]
    a, b = p.a.double(), p.b.double()
    out = torch.zeros(M, N, dtype=torch.float64)
    sb = p.b_scale.double().repeat_interleave(128, dim=1)[:, :N]
    for k0 in range(0, K, chunk):
        terms = a[k0 : k0 + chunk].T[:, :, None] * b[k0 : k0 + chunk][None, :, :]  # (M, chunk, N)
        biggest = terms.abs().amax(dim=1).clamp_min(2.0**-30)
        ulp = torch.exp2(torch.floor(torch.log2(biggest)) - frac_bits)
        chunk_sum = torch.trunc(terms.sum(dim=1) / ulp) * ulp
        kb = k0 // 128
        out += chunk_sum * p.a_scale.double()[kb][:, None] * sb[kb][None, :]
    return out.float().to(torch.bfloat16)


@pytest.mark.parametrize("shape", CUDA_ALLOWANCE_CASES, ids=lambda s: "x".join(map(str, s)))
def test_allowance_accepts_reduced_precision_accumulation(ref_mod, shape):
    """A model of Hopper-like accumulation misses the contract's rule near zero and passes the allowance."""
    p = make_problem(*shape, torch.float8_e4m3fn, "cpu", seed=7)
    ref = ref_mod.gemm_reference(p.a, p.b, p.a_scale, p.b_scale)
    terms = ref_mod.magnitude(p.a, p.b, p.a_scale, p.b_scale)
    out = _reduced_precision_product(p)
    if shape[2] >= 2048:  # deep K: the modelled error exceeds the 1e-3 floor on a few near-zero outputs
        assert not ref_mod.within_tolerance(out, ref).all()
    assert ref_mod.within_tolerance(out, ref, ref_mod.ACCUMULATION_ALLOWANCE["cuda"], terms).all()


@pytest.mark.parametrize("shape", CUDA_ALLOWANCE_CASES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("fault", ["one K-block dropped", "b_scale blocks swapped", "K shifted by one"])
def test_allowance_still_rejects_wrong_results(ref_mod, shape, fault):
    m, n, k = shape
    p = make_problem(m, n, k, torch.float8_e4m3fn, "cpu", seed=11)
    ref = ref_mod.gemm_reference(p.a, p.b, p.a_scale, p.b_scale)
    terms = ref_mod.magnitude(p.a, p.b, p.a_scale, p.b_scale)
    a, b, sa, sb = p.a, p.b, p.a_scale.clone(), p.b_scale.clone()
    if fault == "one K-block dropped":
        sa[k // 128 // 2] = 0
    elif fault == "b_scale blocks swapped":
        sb = sb.flip(1) if sb.shape[1] > 1 else sb.flip(0)
    else:
        a = torch.roll(a.float(), 1, dims=0).to(a.dtype)
    wrong = ref_mod.gemm_reference(a, b, sa, sb)
    ok = ref_mod.within_tolerance(wrong, ref, ref_mod.ACCUMULATION_ALLOWANCE["cuda"], terms)
    assert (~ok).sum() >= max(1, ok.numel() // 10), f"{fault}: only {(~ok).sum()} elements flagged"


def test_allowance_needs_the_terms(ref_mod):
    ref = torch.zeros(2, 2)
    with pytest.raises(ValueError, match="magnitude"):
        ref_mod.tolerance(ref, 1e-4)


def test_non_finite_reference_needs_the_same_value(ref_mod):
    """inf or NaN scales give inf or NaN references: the same value passes, anything else fails, and a
    finite reference still refuses inf or NaN."""
    inf, nan = float("inf"), float("nan")
    ref = torch.tensor([inf, -inf, nan, inf, nan, 1.0, 1.0]).bfloat16()
    out = torch.tensor([inf, -inf, nan, -inf, 2.0, inf, nan]).bfloat16()
    assert ref_mod.within_tolerance(out, ref).tolist() == [True, True, True, False, False, False, False]
