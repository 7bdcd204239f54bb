"""The Hopper (CUDA) variant on a GPU, through the `kernel` fixture (the built variant loaded by kernels).

tests/kernel/ checks the contract on every backend; these cases aim at the CUDA backend's own paths:
every tile configuration the shape heuristic can pick, outputs that TMA cannot store (N % 8 != 0 or
rows not 16-byte aligned: plain stores in the hand-written kernels, a padded scratch for CUTLASS's),
the seed layout's vectorized and byte-wise transposes,
the current stream, and run-to-run determinism. They skip, with the reason, where the loaded variant
is not the CUDA one or no GPU is present.

Accuracy criterion: every element, the contract's rule plus the cuda backend's accumulation allowance
(gemm.reference.ACCUMULATION_ALLOWANCE times the sum of the terms' magnitudes). Hopper's FP8 tensor
cores add each wgmma's products with fewer bits than fp32, which moves near-zero outputs by more than
atol = 1e-3; torch's own blockwise FP8 path (cuBLASLt) gives bit-identical outputs to this kernel on the
same inputs (outside the shapes whose K is cut into pieces), and benchmarks/results/h200/precision.json
measures how much is needed.
"""

from __future__ import annotations

import pathlib
import re

import pytest
import torch

from tests.conftest import assert_seed_matches, make_problem, poisoned_output

# Shapes chosen to cross the heuristic's tile choices (few tiles -> 64-row tiles, many -> 128x128,
# narrow N with deep K), N % 8 != 0 (plain stores, or a padded output), M % 16 != 0 (byte-wise seed transpose).
SHAPES = [
    (1024, 512, 7168),  # K-sliced, 4 slices
    (512, 1024, 4096),  # K-sliced, 4 slices, shorter K
    (1024, 640, 4608),  # hand-written 128x128 kernel, 40 tiles cut into 3 K pieces (12 K blocks each)
    (1, 4096, 4096),  # a single row: the decode kernel (M <= 64), 2 K slices
    (100, 4104, 4608),  # K-sliced, 33 tiles (4 slices fill 132 SMs exactly)
    (64, 1536, 7168),  # decode kernel, 64 rows (wgmma N = 64), 4 K slices
    (3, 520, 7168),  # decode kernel, 14 K slices of 4 K blocks, N % 64 != 0
    (300, 2001, 4096),  # N % 8 != 0, which keeps off CUTLASS (here K-sliced): the hand-written 128x128 kernel
    (1152, 2047, 256),  # hand-written 128x128 kernel, N odd: plain stores, rows at odd element offsets
    (3072, 4223, 256),  # hand-written 192x128 kernel, N odd: plain stores
    (1024, 576, 7168),  # hand-written 128x128 kernel, each of 40 tiles cut into 3 K pieces summed in the kernel
    (256, 2304, 4096),  # the same split, 36 tiles, pieces of 10, 11 and 11 K blocks
    (6144, 7168, 256),  # hand-written 192x128 kernel (gemm_cuda_wgmma.cu): short K, many waves
    (6144, 1536, 2560),  # hand-written 128x192 kernel
    (1152, 2048, 256),  # hand-written 128x128 kernel: K <= 512, a wave of tiles
    (1000, 2056, 384),  # 128x128, M and N partial tiles
    (1024, 3072, 1536),  # 128x192, N tiles straddling two w_scale blocks (n0 % 128 == 64)
    (1000, 2999, 512),  # 128x192, M and N partial tiles, N odd (plain stores)
    (1000, 2432, 4096),  # 128x192 at 0.79 of a wave (104 tiles), partial M, straddling N tiles
    (1000, 4200, 4096),  # 128x192 past a wave (176 tiles), the last 44 cut into 3 K pieces; partial M and N tiles
    (1000, 4201, 4096),  # the same with N odd: the split tail's sum and the overlapped store through plain stores
    (2048, 2048, 1024),
    (6144, 512, 7168),  # hand-written 192x128 kernel (three consumer warpgroups): one full wave
    (5800, 512, 4096),  # 192x128, last M tile of 40 rows: two of its three warpgroups have no rows
    (6144, 576, 7168),  # hand-written 192x144 kernel: one wave of 128 tiles, N tiles straddling w_scale blocks
    (5800, 556, 4096),  # 192x144, 40-row last M tile, N % 8 != 0, last N tile's direct-stored columns past N
    (5800, 568, 4096),  # 192x144, last N tile: one directly stored 8-column group written, one past N
    (1024, 1536, 4096),  # hand-written 128x96 kernel with two batch accumulators: one wave of 128 tiles
    (1000, 1500, 4224),  # 128x96 two accumulators: partial M and N tiles, 33 K blocks (odd), N % 8 != 0
    (1000, 1501, 4224),  # the same with N odd: plain stores
    (96, 577, 4096),  # N odd, few tiles at deep K: the 128x128 kernel in a split tail of 4 pieces, plain stores
    (1008, 1520, 384),  # partial M and N tiles of 112 rows and columns
    (80, 2064, 128),  # 80 rows, one K block
    (3, 100, 2**22 + 128),  # seed: byte-wise transposes of 65538 blocks of 64 K rows, past gridDim.y's 65535
    (96, 7168, 2048),  # one wave of 128x128 tiles with M + N >= 6144
    (1, 4096, 1024),  # decode kernel, one K slice
    (32, 4096, 4096),  # decode kernel, 32 rows, 2 K slices
    (64, 4096, 2048),  # decode kernel: 64 rows against 64 w tiles (up to a wave of them: run 91)
    (40, 8704, 1024),  # 40 rows against 136 w tiles, past a wave: CUTLASS's 128x128 tiles, not the decode kernel
    (40, 1000, 1024),  # decode kernel, 40 of 64 rows, a partial last w tile
    (17, 2999, 512),  # decode kernel, one K slice, N odd (its own stores)
    (8, 8, 128),
    (16, 24, 256),
    (100, 1001, 512),
    (257, 7, 128),
    (4000, 136, 1536),
    (31, 4104, 384),
    (640, 1920, 3072),
    (128, 128, 16384),
    # Seed layout, a read as it is (GemmArgs::seed_a) by the hand-written kernels:
    (5776, 512, 4096),  # 192x128, last M tile of 16 rows: two of its three raw A boxes wholly past M
    (3008, 960, 1536),  # 128x192, last M tile of 64 rows, N tiles straddling two w_scale blocks
    # the same with partial N tiles and N % 8 != 0 (the seed layout's through a padded output: the kernels
    # reading a as it is store by TMA alone; the natural layout's by plain stores)
    (3008, 954, 1536),  # 128x192
    (6144, 508, 7168),  # 192x128
]


@pytest.fixture(scope="module")
def cuda_kernel(kernel):
    if kernel.BACKEND != "cuda":
        pytest.skip(f"the loaded variant is the {kernel.BACKEND} backend, not cuda")
    if not torch.cuda.is_available():
        pytest.skip("the cuda variant needs a GPU, and this machine has none")
    return kernel


def _id(shape):
    return "x".join(map(str, shape))


def assert_matches(kernel, out: torch.Tensor, p, what: str) -> None:
    """`out` against the reference of problem `p` (seed layout), at the cuda backend's tolerance."""
    assert_seed_matches(kernel, out, p.a, p.b, p.a_scale, p.b_scale, what)


@pytest.mark.parametrize("shape", SHAPES, ids=_id)
def test_both_layouts(cuda_kernel, shape, seeds):
    m, n, k = shape
    seed = next(seeds)
    p = make_problem(m, n, k, torch.float8_e4m3fn, "cuda", seed)
    c = poisoned_output(m, n, "cuda")
    assert cuda_kernel.gemm(p.a, p.b, p.a_scale, p.b_scale, c) is c
    assert_matches(cuda_kernel, c, p, f"seed {_id(shape)} seed={seed}")
    out = poisoned_output(m, n, "cuda")
    assert cuda_kernel.gemm_natural(*p.natural(), out) is out
    assert_matches(cuda_kernel, out, p, f"natural {_id(shape)} seed={seed}")


@pytest.mark.parametrize(
    "shape",
    [
        (64, 264, 256),  # the decode kernel (its own stores)
        (1000, 2056, 512),  # the hand-written 128x128 kernel: plain stores
        (5800, 568, 4096),  # 192x144: plain stores, and the columns past its boxes from registers
        (300, 2000, 4096),  # CUTLASS's K-sliced configuration: an aligned scratch, then a copy
    ],
    ids=_id,
)
def test_output_rows_not_16_byte_aligned(cuda_kernel, seeds, shape):
    """An output view that starts 2 bytes past a 16-byte boundary (so TMA cannot store it) is written right,
    and nothing before or after it."""
    m, n, k = shape
    p = make_problem(m, n, k, torch.float8_e4m3fn, "cuda", next(seeds))
    backing = torch.full((m * n + 2,), float("nan"), dtype=torch.bfloat16, device="cuda")
    out = backing[1:-1].view(m, n)  # contiguous, data_ptr 2 bytes past the allocation
    cuda_kernel.gemm_natural(*p.natural(), out)
    assert_matches(cuda_kernel, out, p, f"natural {_id(shape)}, offset output")
    assert torch.isnan(backing[0]) and torch.isnan(backing[-1]), "an element next to the output was overwritten"


def _kernel_names(fn) -> set[str]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return {e.name for e in prof.events() if e.device_type.name == "CUDA"}


@pytest.mark.parametrize(
    ("shape", "scratch"),
    [
        ((17, 2999, 512), False),  # the decode kernel in one K slice
        ((1000, 2999, 512), False),  # the hand-written 128x192 kernel
        ((1152, 2047, 256), False),  # the hand-written 128x128 kernel
        ((300, 2001, 4096), False),  # the same in a split tail, where N % 8 == 0 takes CUTLASS's K slices
        ((3, 521, 7168), True),  # the decode kernel in 14 K slices: fp32 partials summed into a padded scratch
    ],
    ids=lambda v: _id(v) if isinstance(v, tuple) else str(v),
)
def test_n_not_a_multiple_of_8_copies_nothing_but_summed_partials(cuda_kernel, seeds, shape, scratch):
    """N % 8 != 0: the hand-written and decode kernels' TMA loads fill w's rows past N with zeros
    (GemmArgs::w_rows) and they write the output themselves (plain stores where TMA cannot), and pick_tuning
    keeps such shapes off CUTLASS's configurations, so w is never copied (a device-to-device memcpy) and the
    call is the GEMM kernel alone (and a split tail's counter memset); only K slices' fp32 partials are summed
    into a padded scratch copied after.
    Before, every call copied w (206 MB for a 50257 x 4096 projection), and every such output went through
    the scratch (run 148: 894 us at 2048x50257x4096 against 689 at N = 50256)."""
    m, n, k = shape
    p = make_problem(m, n, k, torch.float8_e4m3fn, "cuda", next(seeds))
    out = poisoned_output(m, n, "cuda")
    natural = p.natural()  # its transposes outside the profiled call
    names = _kernel_names(lambda: cuda_kernel.gemm_natural(*natural, out))
    assert not any(s.startswith("Memcpy DtoD") for s in names), names
    assert any("copy" in s for s in names) == scratch, names
    if not scratch:  # (and a split tail's memset of its counters)
        assert all("gemm_kernel" in s or s.startswith("Memset") for s in names), names
    assert_matches(cuda_kernel, out, p, f"natural {_id(shape)}")


def _fused_on_the_ops_path() -> bool:
    """gemm_cuda_pick.h's kSeedFusedOnTheOpsPath, which the built kernel was compiled with."""
    text = (pathlib.Path(__file__).resolve().parents[2] / "gemm" / "cuda" / "gemm_cuda_pick.h").read_text()
    (value,) = re.findall(r"constexpr bool kSeedFusedOnTheOpsPath = (true|false);", text)
    return value == "true"


def test_seed_layout_takes_the_kernel_that_pick_seed_fused_names(cuda_kernel, seeds):
    """At 512x4096x512 (short K) pick_seed_fused takes the fused seed kernel: it is what runs while
    kSeedFusedOnTheOpsPath is on (since run 125), the preparation pass otherwise. At
    1024x1536x7168 (one wave of tiles, M + N < 6144) the preparation pass runs either way. Views of a and b
    that start off a 16-byte boundary (no TMA) take the preparation pass too, and every view computes the
    right answer. A view of a or b that starts off a 16-byte boundary (rows of whole 16-byte multiples) is
    copied once and then takes the path an aligned one takes, never the byte-wise transpose; a_scale's view
    needs no copy (its scales are read 4 bytes at a time)."""
    on = _fused_on_the_ops_path()
    for m, n, k, fused in ((512, 4096, 512, on), (1024, 1536, 7168, False)):
        p = make_problem(m, n, k, torch.float8_e4m3fn, "cuda", next(seeds))
        c = poisoned_output(m, n, "cuda")
        names = _kernel_names(lambda p=p, c=c: cuda_kernel.gemm(p.a, p.b, p.a_scale, p.b_scale, c))
        took = (any("seed_fused_kernel" in s for s in names), any("seed_prep" in s for s in names))
        assert took == (fused, not fused), ((m, n, k), names)
        assert_matches(cuda_kernel, c, p, "seed")

    def shifted(t: torch.Tensor, elements: int) -> torch.Tensor:  # the same values, data_ptr moved
        backing = torch.empty(t.numel() + elements, dtype=t.dtype, device=t.device)
        view = backing[elements:].view(t.shape)
        view.copy_(t)
        return view

    m, n, k = 512, 4096, 512
    p = make_problem(m, n, k, torch.float8_e4m3fn, "cuda", next(seeds))
    for what, args, copied in (
        ("a one byte off", (shifted(p.a, 1), p.b, p.a_scale, p.b_scale), True),
        ("b one byte off", (p.a, shifted(p.b, 1), p.a_scale, p.b_scale), True),
        ("a_scale one float off", (p.a, p.b, shifted(p.a_scale, 1), p.b_scale), False),
    ):
        c = poisoned_output(m, n, "cuda")
        names = _kernel_names(lambda args=args, c=c: cuda_kernel.gemm(*args, c))
        assert any("Memcpy" in s for s in names) == copied, (what, names)
        assert any("seed_fused_kernel" in s for s in names) == on, (what, names)
        assert not any("transpose_bytes" in s for s in names), (what, names)
        assert_matches(cuda_kernel, c, p, f"seed, {what}")


_SEED_A_KERNEL = re.compile(r"wgmma_gemm_kernel<\d+, \d, (?:true|false), true>")


def test_seed_layout_reads_a_as_it_is_where_the_configuration_can(cuda_kernel, seeds):
    """Where pick_seed_a (gemm_cuda_pick.h) names a configuration, N <= 1024 on the hand-written 128x128,
    128x192 or 192x128 kernel, and M % 16 == 0, the seed layout's preparation pass transposes b alone and
    the GEMM reads a as it is (wgmma_gemm_kernel<.., seed A = true>). Elsewhere (wider N, other
    configurations, M % 16 != 0: no TMA on a) the pass transposes both and the GEMM reads the copy. Every
    case computes the right answer."""
    cases = (
        ((6144, 512, 7168), True),  # 192x128
        ((3008, 960, 1536), True),  # 128x192
        ((1024, 576, 7168), True),  # 128x128 with a split tail
        ((6144, 576, 7168), True),  # 128x192 with a split tail where the natural layout takes 192x144
        ((6144, 1536, 2560), False),  # 128x192, but N > 1024
        ((5800, 512, 4096), False),  # 192x128, but 5800 % 16 != 0
    )
    for (m, n, k), raw in cases:
        p = make_problem(m, n, k, torch.float8_e4m3fn, "cuda", next(seeds))
        c = poisoned_output(m, n, "cuda")
        names = _kernel_names(lambda p=p, c=c: cuda_kernel.gemm(p.a, p.b, p.a_scale, p.b_scale, c))
        assert any("seed_prep" in s for s in names), ((m, n, k), names)
        assert any(_SEED_A_KERNEL.search(s) for s in names) == raw, ((m, n, k), names)
        assert_matches(cuda_kernel, c, p, f"seed {m}x{n}x{k}")


def test_runs_on_the_current_stream(cuda_kernel, seeds):
    m, n, k = 512, 1024, 2048
    p = make_problem(m, n, k, torch.float8_e4m3fn, "cuda", next(seeds))
    x, w, xs, ws = p.natural()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        out = poisoned_output(m, n, "cuda")
        c = poisoned_output(m, n, "cuda")
        for _ in range(3):  # queue work behind itself on the side stream
            cuda_kernel.gemm_natural(x, w, xs, ws, out)
            cuda_kernel.gemm(p.a, p.b, p.a_scale, p.b_scale, c)
    side.synchronize()
    assert_matches(cuda_kernel, out, p, "natural on a side stream")
    assert_matches(cuda_kernel, c, p, "seed on a side stream")


# One shape per path that launches more than one kernel or uses scratch: the decode kernel in K slices
# (fp32 partials + the summing pass; with N % 8 != 0 into a padded output copied after), the K-sliced
# configuration, a split tail (its counters zeroed by a memset), the 192x144 kernel, plain stores (N odd),
# plus the seed layout's preparation (and its dependent launch) on each.
GRAPH_SHAPES = [
    (3, 520, 7168),
    (3, 521, 7168),
    (1024, 512, 7168),
    (1024, 576, 7168),
    (5800, 568, 4096),
    (300, 2001, 4096),
]


@pytest.mark.parametrize("shape", GRAPH_SHAPES, ids=_id)
def test_cuda_graph_capture_and_replay(cuda_kernel, shape, seeds):
    """Serving stacks capture decode steps in CUDA graphs: both layouts must capture (no host sync, no
    legacy-stream work, scratch from the graph's pool) and a replay must compute on the inputs' new values."""
    m, n, k = shape
    first = make_problem(m, n, k, torch.float8_e4m3fn, "cuda", next(seeds))
    x, w, xs, ws = (t.clone() for t in first.natural())
    a, b, sa, sb = (t.clone() for t in (first.a, first.b, first.a_scale, first.b_scale))
    out, c = poisoned_output(m, n, "cuda"), poisoned_output(m, n, "cuda")
    for _ in range(2):  # warm-up outside the capture, as torch.cuda.graphs asks
        cuda_kernel.gemm_natural(x, w, xs, ws, out)
        cuda_kernel.gemm(a, b, sa, sb, c)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        cuda_kernel.gemm_natural(x, w, xs, ws, out)
        cuda_kernel.gemm(a, b, sa, sb, c)
    # New values in the captured inputs, poisoned outputs: the replay alone must write the right answer,
    # twice (state a replay leaves behind, such as a split tail's counters, must not spoil the next).
    for replay in (1, 2):
        p = make_problem(m, n, k, torch.float8_e4m3fn, "cuda", next(seeds))
        for dst, src in zip((x, w, xs, ws, a, b, sa, sb), (*p.natural(), p.a, p.b, p.a_scale, p.b_scale), strict=True):
            dst.copy_(src)
        out.fill_(float("nan"))
        c.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert_matches(cuda_kernel, out, p, f"natural {_id(shape)}, graph replay {replay}")
        assert_matches(cuda_kernel, c, p, f"seed {_id(shape)}, graph replay {replay}")


def test_deterministic(cuda_kernel, seeds):
    """Same inputs, same bits: no race between CTAs (the split tiles' in-kernel sums, whichever piece
    arrives last, and the decode kernel's K slices included)."""
    for shape in ((1024, 576, 7168), (6144, 1536, 7168), (3, 520, 7168)):
        p = make_problem(*shape, torch.float8_e4m3fn, "cuda", next(seeds))
        x, w, xs, ws = p.natural()
        first = cuda_kernel.gemm_natural(x, w, xs, ws)
        for _ in range(2):
            assert torch.equal(cuda_kernel.gemm_natural(x, w, xs, ws), first), _id(shape)
        assert torch.equal(cuda_kernel.gemm(p.a, p.b, p.a_scale, p.b_scale), first), _id(shape)


def test_rejects_e4m3fnuz(cuda_kernel, seeds):
    p = make_problem(64, 64, 128, torch.float8_e4m3fnuz, "cuda", next(seeds))
    c = poisoned_output(64, 64, "cuda")
    with pytest.raises((TypeError, ValueError, RuntimeError), match="a"):
        cuda_kernel.gemm(p.a, p.b, p.a_scale, p.b_scale, c)
    assert torch.isnan(c.float()).all(), "a rejected call wrote its output"
