"""Shape lists, argument parsing, speed of light and the result check of the benchmark harness."""

from __future__ import annotations

import pytest
import torch

from benchmarks import problem, sol
from benchmarks.problem import Shape, check, make_inputs, parse_layouts, parse_shapes

# op-contract.md, "Shapes that must work", written out again here so a change in either place shows.
CONTRACT_TESTS = [
    (64, 64, 128), (64, 1536, 7168), (64, 3072, 1536), (64, 576, 7168), (96, 7168, 256), (96, 7168, 2048),
    (96, 4608, 7168), (128, 7168, 2304), (128, 512, 7168), (512, 4096, 512), (512, 1536, 7168),
]  # fmt: skip
CONTRACT_NK = [(1536, 7168), (3072, 1536), (576, 7168), (7168, 256), (7168, 2048), (4608, 7168), (7168, 2304),
               (512, 7168), (4096, 512)]  # fmt: skip


def test_shape_lists_are_the_contracts_29():
    assert [tuple(s) for s in problem.TEST_SHAPES] == CONTRACT_TESTS
    assert sorted(problem.BENCH_SHAPES) == sorted((m, n, k) for m in (1024, 6144) for n, k in CONTRACT_NK)
    everything = parse_shapes("all")
    assert len(everything) == 29 == len(set(everything))
    assert [(s.m, s.n, s.k) for s in parse_shapes("challenge")] == list(problem.BENCH_SHAPES)
    assert [(s.m, s.n, s.k) for s in parse_shapes("tests")] == CONTRACT_TESTS
    assert set(problem.CPU_DEFAULT_SHAPES) <= set(problem.TEST_SHAPES) | set(problem.BENCH_SHAPES)


def test_parse_shapes_lists_and_errors():
    assert parse_shapes("1x1x128, 33x200x640,1x1x128") == [Shape(1, 1, 128), Shape(33, 200, 640)]
    assert parse_shapes("tests,64x64x128")[-1] == Shape(512, 1536, 7168)  # duplicates dropped
    with pytest.raises(ValueError, match="--shapes: cannot read 'big'"):
        parse_shapes("big")
    with pytest.raises(ValueError, match="K must be a positive multiple of 128"):
        parse_shapes("64x64x100")
    with pytest.raises(ValueError, match="--shapes is empty"):
        parse_shapes(" ")
    assert parse_layouts("natural,seed,natural") == ["natural", "seed"]
    with pytest.raises(ValueError, match="--layouts"):
        parse_layouts("seed,tn")


# docs/mi300x-notes.md, "Speed of light per shape", us.
MI300X_NOTES_US = {
    1024: [8.62, 3.70, 3.23, 3.17, 11.50, 25.87, 12.93, 2.87, 2.08],
    6144: [51.74, 22.17, 19.40, 17.26, 68.98, 155.22, 77.61, 17.25, 10.49],
}


def test_mi300x_speed_of_light_matches_the_notes():
    got = []
    for m, row in MI300X_NOTES_US.items():
        for (n, k), want in zip(CONTRACT_NK, row, strict=True):
            us = sol.MI300X.us(m, n, k)
            assert us == pytest.approx(want, abs=0.006), (m, n, k)
            got.append(us)
    assert sol.geomean(got) == pytest.approx(14.0, abs=0.05)
    # memory-bound case: bytes / 5.3 TB/s wins over FLOPs for a skinny product
    assert sol.MI300X.us(1, 7168, 7168) == pytest.approx((7168 + 7168 * 7168 + 2 * 7168) / 5.3e12 * 1e6)
    assert sol.MI300X.pct(1024, 1536, 7168, 2 * sol.MI300X.us(1024, 1536, 7168)) == pytest.approx(50.0)


def _ref_and_out(seed: int = 0, m: int = 48, n: int = 200, k: int = 256):
    inp = problem.make_inputs(Shape(m, n, k), "cpu", torch.float8_e4m3fn, torch.Generator().manual_seed(seed))
    ref = problem.reference(inp)
    return inp, ref


def test_reference_matches_a_loop_over_blocks():
    inp, ref = _ref_and_out()
    x, w = inp.x.double(), inp.w.double()
    want = torch.zeros(48, 200, dtype=torch.float64)
    for kb in range(256 // 128):
        sl = slice(kb * 128, (kb + 1) * 128)
        part = x[:, sl] @ w[:, sl].T
        ws = inp.w_scale[:, kb].double().repeat_interleave(128)[:200]
        want += part * inp.x_scale[:, kb].double()[:, None] * ws[None, :]
    assert torch.allclose(ref.double(), want, rtol=1e-5, atol=1e-4)
    # the seed tensors are the transposes of the natural ones
    assert torch.equal(inp.a.float(), inp.x.float().T) and torch.equal(inp.b_scale, inp.w_scale.T)


def test_check_accepts_the_reference_and_refuses_wrong_results():
    inp, ref = _ref_and_out()
    good = check(ref.to(torch.bfloat16), ref)
    assert good.ok and good.mode == "elementwise" and good.bad == 0
    # one 128-block of K left out: a typical kernel bug
    partial = problem.dequantize_x(inp.x, inp.x_scale)[:, :128] @ problem.dequantize_w(inp.w, inp.w_scale)[:, :128].T
    assert not check(partial.to(torch.bfloat16), ref).ok
    # scales swapped between rows
    assert not check(ref.flip(0).to(torch.bfloat16), ref).ok
    # one unwritten (NaN) element is refused even though everything else is right
    poisoned = ref.to(torch.bfloat16).clone()
    poisoned[3, 7] = float("nan")
    verdict = check(poisoned, ref)
    assert not verdict.ok and verdict.bad == 1 and "[3,7]" in verdict.message
    assert not check(ref[:, :-1].to(torch.bfloat16), ref).ok  # wrong shape


def test_check_accumulation_allowance_accepts_small_errors_and_refuses_wrong_elements():
    inp = make_inputs(Shape(64, 256, 1024), "cpu", torch.float8_e4m3fn, torch.Generator().manual_seed(5))
    ref, terms = problem.reference(inp), problem.magnitude(inp)
    near_zero = ref.abs().flatten().argsort()[:3]
    out = ref.clone().flatten()
    out[near_zero] += 0.01  # accumulation-order noise at outputs that cancel to ~0
    out = out.view_as(ref).to(torch.bfloat16)
    assert not check(out, ref).ok  # the plain contract rule misses them
    verdict = check(out, ref, terms)
    assert verdict.ok and verdict.mode == "accumulation-allowance" and verdict.bad >= 1
    # one wrong 8x8 corner (0.4 % of elements, an unwritten edge tile's worth): refused, whatever the norm
    broken = ref.clone()
    broken[-8:, -8:] = -broken[-8:, -8:]
    bad = check(broken.to(torch.bfloat16), ref, terms)
    assert not bad.ok and "outside even with the accumulation allowance" in bad.message


def test_allowance_matches_the_kernels_cuda_rule(kernel):
    assert problem.ACCUMULATION_ALLOWANCE == kernel.reference.ACCUMULATION_ALLOWANCE["cuda"]
