"""The rocm variant on an MI300X (gfx942), loaded through `kernels`: all 29 challenge shapes and random
ones, both layouts, poisoned outputs, signed scales, the byte-load path (odd extents, misaligned
storage), split-K shapes, and launches on a side stream. Skipped, with the reason, anywhere without a
ROCm torch and a visible GPU; the project's MI300X runners run it."""

from __future__ import annotations

import random

import pytest
import torch

from benchmarks.problem import BENCH_SHAPES, TEST_SHAPES
from tests.conftest import assert_matches, make_problem, poisoned_output

pytestmark = pytest.mark.skipif(
    torch.version.hip is None or not torch.cuda.is_available(),
    reason="needs a ROCm build of torch and an AMD GPU (MI300X); "
    f"this torch is {torch.__version__} (hip={torch.version.hip}), cuda available={torch.cuda.is_available()}",
)

FP8 = torch.float8_e4m3fnuz
BLOCK = 128


def _id(shape: tuple[int, int, int]) -> str:
    return "x".join(map(str, shape))


@pytest.fixture(scope="module")
def rocm(kernel):
    """The loaded module, checked to be the rocm variant running on gfx942."""
    assert kernel.BACKEND == "rocm", f"loaded the {kernel.BACKEND} variant on a ROCm machine"
    arch = torch.cuda.get_device_properties(0).gcnArchName
    if not arch.startswith("gfx942"):
        pytest.skip(f"the rocm variant is built for gfx942 (MI300X), this GPU is {arch}")
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False  # a full fp32 reference
    yield kernel
    torch.backends.cuda.matmul.allow_tf32 = tf32


def reference(a, b, a_scale, b_scale) -> torch.Tensor:
    """fp32 dequantise + fp32 matmul (seed layout), rounded once to bf16."""
    k, m = a.shape
    n = b.shape[1]
    a32 = a.float() * a_scale.repeat_interleave(BLOCK, dim=0)
    b32 = b.float() * b_scale.repeat_interleave(BLOCK, dim=0).repeat_interleave(BLOCK, dim=1)[:, :n]
    return (a32.T @ b32).to(torch.bfloat16)


def run_both_layouts(rocm, m, n, k, seed):
    p = make_problem(m, n, k, FP8, "cuda", seed)
    ref = reference(p.a, p.b, p.a_scale, p.b_scale)
    c = poisoned_output(m, n, "cuda")
    assert rocm.gemm(p.a, p.b, p.a_scale, p.b_scale, c) is c
    assert_matches(c, ref, f"gemm seed {_id((m, n, k))} seed={seed}")
    x, w, xs, ws = p.natural()
    out = poisoned_output(m, n, "cuda")
    assert rocm.gemm_natural(x, w, xs, ws, out) is out
    assert_matches(out, ref, f"gemm_natural {_id((m, n, k))} seed={seed}")


@pytest.mark.parametrize("shape", list(TEST_SHAPES) + list(BENCH_SHAPES), ids=_id)
def test_contract_shapes(rocm, shape, seeds):
    run_both_layouts(rocm, *shape, next(seeds))


def _random_shapes(count: int, seed: int) -> list[tuple[int, int, int]]:
    rng = random.Random(seed)
    shapes = []
    for _ in range(count):
        shapes.append((rng.randint(1, 700), rng.randint(1, 1500), BLOCK * rng.randint(1, 24)))
    return shapes


# M = 1, odd extents (seed layout takes the byte-load path), N not a multiple of 128, K = 128, and
# shapes whose plan splits K (small M x N, long K).
EDGE_SHAPES = [(1, 1, 128), (1, 7168, 7168), (3, 5, 128), (129, 127, 256), (257, 383, 1152),
               (1000, 33, 4096), (33, 77, 7168), (64, 64, 16384), (6144, 1, 256), (2, 4608, 7168)]  # fmt: skip


@pytest.mark.parametrize("shape", EDGE_SHAPES + _random_shapes(12, 20261202), ids=_id)
def test_edge_and_random_shapes(rocm, shape, seeds):
    run_both_layouts(rocm, *shape, next(seeds))


def test_misaligned_storage_takes_the_byte_path(rocm, seeds):
    """Contiguous tensors whose data starts 1 byte into their storage: the vector loads' alignment
    does not hold, the kernel must still be right (byte-load path)."""
    m, n, k = 130, 300, 512
    p = make_problem(m, n, k, FP8, "cuda", next(seeds))
    ref = reference(p.a, p.b, p.a_scale, p.b_scale)

    def shifted(t: torch.Tensor) -> torch.Tensor:
        raw = torch.empty(t.numel() + 1, dtype=torch.uint8, device=t.device)
        view = raw[1:].view(t.dtype).view(t.shape)
        view.copy_(t)
        assert view.is_contiguous() and view.data_ptr() % 2 == 1
        return view

    c = poisoned_output(m, n, "cuda")
    rocm.gemm(shifted(p.a), shifted(p.b), p.a_scale, p.b_scale, c)
    assert_matches(c, ref, "seed layout, misaligned a/b")
    x, w, xs, ws = p.natural()
    out = poisoned_output(m, n, "cuda")
    rocm.gemm_natural(shifted(x), shifted(w), xs, ws, out)
    assert_matches(out, ref, "natural layout, misaligned x/w")


def test_signed_scales_are_applied_per_block(rocm, seeds):
    """All-negative scales flip the sign; one flipped K-block changes the result."""
    m, n, k = 96, 640, 1024
    p = make_problem(m, n, k, FP8, "cuda", next(seeds))
    base = rocm.gemm(p.a, p.b, p.a_scale.abs(), p.b_scale.abs())
    neg = rocm.gemm(p.a, p.b, -p.a_scale.abs(), p.b_scale.abs())
    assert_matches(neg, -base.float(), "negated a_scale")
    flipped = p.b_scale.abs().clone()
    flipped[3] = -flipped[3]
    out = rocm.gemm(p.a, p.b, p.a_scale.abs(), flipped)
    assert_matches(out, reference(p.a, p.b, p.a_scale.abs(), flipped), "one flipped K-block")
    assert not torch.equal(out, base)


def test_runs_on_the_current_stream(rocm, seeds):
    """Inputs produced on a side stream, the op called under it, synchronised only with it."""
    m, n, k = 1024, 576, 7168  # a split-K plan: GEMM + reduce kernels, workspace from the allocator
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        p = make_problem(m, n, k, FP8, "cuda", next(seeds))
        c = poisoned_output(m, n, "cuda")
        rocm.gemm(p.a, p.b, p.a_scale, p.b_scale, c)
        ref = reference(p.a, p.b, p.a_scale, p.b_scale)
    side.synchronize()
    assert_matches(c, ref, "side stream")


def test_repeated_calls_reuse_workspace(rocm, seeds):
    """Split-K scratch comes from torch's caching allocator, bounded (256 MiB, gemm_plan.h), and is
    given back: repeated calls do not grow memory."""
    m, n, k = 1024, 512, 7168
    p = make_problem(m, n, k, FP8, "cuda", next(seeds))
    out = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
    rocm.gemm(p.a, p.b, p.a_scale, p.b_scale, out)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    for _ in range(5):
        rocm.gemm(p.a, p.b, p.a_scale, p.b_scale, out)
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() == before
    assert torch.cuda.max_memory_allocated() - before <= 256 * 1024**2
