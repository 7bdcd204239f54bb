"""The built variant against the fp32 reference: all 29 challenge shapes and odd ones, every FP8
dtype the backend takes, both layouts, poisoned outputs, signed scales, fresh random data."""

from __future__ import annotations

import pytest
import torch

from benchmarks.problem import BENCH_SHAPES, TEST_SHAPES
from tests.conftest import (
    assert_matches,
    assert_natural_matches,
    assert_seed_matches,
    at_odd_offset,
    make_problem,
    poisoned_output,
)

# Shapes the challenge never used: M = 1, odd M and N, N not a multiple of 128, K = 128.
ODD_SHAPES = [(1, 1, 128), (1, 129, 256), (7, 200, 128), (33, 1000, 384), (257, 129, 256), (130, 255, 1152)]
SHAPES = list(TEST_SHAPES) + list(BENCH_SHAPES) + ODD_SHAPES


def _id(shape: tuple[int, int, int]) -> str:
    return "x".join(map(str, shape))


@pytest.mark.parametrize("shape", SHAPES, ids=_id)
def test_seed_layout(kernel, device, fp8, shape, seeds):
    m, n, k = shape
    seed = next(seeds)
    p = make_problem(m, n, k, fp8, device, seed)
    c = poisoned_output(m, n, device)
    out = kernel.gemm(p.a, p.b, p.a_scale, p.b_scale, c)
    assert out is c
    assert_seed_matches(kernel, c, p.a, p.b, p.a_scale, p.b_scale, f"gemm {_id(shape)} {fp8} seed={seed}")


@pytest.mark.parametrize("shape", SHAPES, ids=_id)
def test_natural_layout(kernel, device, fp8, shape, seeds):
    m, n, k = shape
    seed = next(seeds)
    x, w, x_scale, w_scale = make_problem(m, n, k, fp8, device, seed).natural()
    out = poisoned_output(m, n, device)
    assert kernel.gemm_natural(x, w, x_scale, w_scale, out) is out
    assert_natural_matches(kernel, out, x, w, x_scale, w_scale, f"gemm_natural {_id(shape)} {fp8} seed={seed}")


def test_layouts_agree_and_allocate_output(kernel, device, seeds):
    """Both entry points compute the same product; c=None allocates a fresh bf16 output."""
    p = make_problem(100, 300, 512, kernel.SUPPORTED_DTYPES[0], device, next(seeds))
    seed_out = kernel.gemm(p.a, p.b, p.a_scale, p.b_scale)
    natural_out = kernel.gemm_natural(*p.natural())
    assert seed_out.dtype == natural_out.dtype == torch.bfloat16
    assert seed_out.shape == natural_out.shape == (100, 300)
    assert_matches(natural_out, seed_out, "natural vs seed layout")


def test_challenge_views_reach_the_kernel_without_a_copy(kernel, device, seeds, monkeypatch):
    """A caller holding the challenge's views (a as (M, K) with strides (1, M), and so on) passes their .T:
    the op receives the caller's own storage, not a copy, and computes the product."""
    p = make_problem(64, 576, 256, kernel.SUPPORTED_DTYPES[0], device, next(seeds))
    a_view, b_view, sa_view, sb_view = p.a.T, p.b.T, p.a_scale.T, p.b_scale.T
    assert not a_view.is_contiguous() and a_view.shape == (64, 256)
    real_ops, seen = kernel.ops, {}

    class Spy:  # records what the wrapper hands the op
        def __getattr__(self, name):
            return getattr(real_ops, name)

        def gemm(self, a, b, a_scale, b_scale, c):
            seen.update(a=a.data_ptr(), b=b.data_ptr(), a_scale=a_scale.data_ptr(), b_scale=b_scale.data_ptr())
            return real_ops.gemm(a, b, a_scale, b_scale, c)

    monkeypatch.setattr(kernel, "ops", Spy())
    out = kernel.gemm(a_view.T, b_view.T, sa_view.T, sb_view.T)
    assert seen == {"a": p.a.data_ptr(), "b": p.b.data_ptr(), "a_scale": p.a_scale.data_ptr(),
                    "b_scale": p.b_scale.data_ptr()}  # fmt: skip
    assert_seed_matches(kernel, out, p.a, p.b, p.a_scale, p.b_scale, "views")


def test_scale_signs_matter(kernel, device, seeds):
    """Negating one K-block's scales changes the result: the scales are really applied per block."""
    p = make_problem(64, 256, 256, kernel.SUPPORTED_DTYPES[0], device, next(seeds))
    base = kernel.gemm(p.a, p.b, p.a_scale, p.b_scale)
    flipped_scale = p.a_scale.clone()
    flipped_scale[1] = -flipped_scale[1]
    flipped = kernel.gemm(p.a, p.b, flipped_scale, p.b_scale)
    assert not torch.equal(base, flipped)
    assert_seed_matches(kernel, flipped, p.a, p.b, flipped_scale, p.b_scale, "flipped block")


@pytest.mark.parametrize("shape", [(96, 256, 256), (130, 384, 1024), (7, 200, 128)], ids=_id)
def test_tensors_at_odd_offsets_in_memory(kernel, device, shape, seeds):
    """Every operand and the output one element off their allocation's alignment, both layouts: the
    backends' aligned fast paths (vector loads, TMA, 4-column stores) must notice and still be right, and
    every element of c must be written (poisoned first)."""
    m, n, k = shape
    seed = next(seeds)
    p = make_problem(m, n, k, kernel.SUPPORTED_DTYPES[0], device, seed)
    a, b, sa, sb = (at_odd_offset(t) for t in (p.a, p.b, p.a_scale, p.b_scale))
    c = at_odd_offset(poisoned_output(m, n, device))
    assert kernel.gemm(a, b, sa, sb, c) is c
    assert_seed_matches(kernel, c, p.a, p.b, p.a_scale, p.b_scale, f"offset seed {_id(shape)} seed={seed}")
    x, w, x_scale, w_scale = (at_odd_offset(t) for t in p.natural())
    out = at_odd_offset(poisoned_output(m, n, device))
    assert kernel.gemm_natural(x, w, x_scale, w_scale, out) is out
    assert_natural_matches(kernel, out, *p.natural(), f"offset natural {_id(shape)} seed={seed}")


@pytest.mark.parametrize("shape", [(0, 200, 256), (64, 0, 256), (0, 0, 128)], ids=_id)
def test_empty_m_or_n_gives_an_empty_result(kernel, device, shape, seeds):
    """M or N of 0 (an MoE expert that received no tokens) is a valid call with an empty result, as in
    torch's own matmul: both layouts, output allocated or given (empty tensors all share storage address 0,
    which must not read as aliasing), and linear on no rows or a weight without rows."""
    m, n, k = shape
    p = make_problem(m, n, k, kernel.SUPPORTED_DTYPES[0], device, seed=next(seeds))
    for result in (kernel.gemm(p.a, p.b, p.a_scale, p.b_scale), kernel.gemm_natural(*p.natural())):
        assert result.shape == (m, n) and result.dtype == torch.bfloat16 and result.device == p.a.device
    c = torch.empty(m, n, dtype=torch.bfloat16, device=device)
    assert kernel.gemm(p.a, p.b, p.a_scale, p.b_scale, c) is c
    assert kernel.gemm_natural(*p.natural(), c) is c
    kernel.ops.gemm(p.a, p.b, p.a_scale, p.b_scale, c)  # the C++ binding, called directly, agrees
    kernel.ops.gemm_natural(*p.natural(), c)
    x, w, _, w_scale = p.natural()
    hidden = torch.randn(2, m, k, device=device, dtype=torch.bfloat16)
    assert kernel.linear(hidden, w, w_scale).shape == (2, m, n)
