"""The CUDA backend's per-shape choices (pick_tuning and pick_seed_fused in gemm/cuda/gemm_cuda_pick.h),
checked on the CPU.

The header needs neither torch nor CUDA: a small C++ program includes it and prints the choice for each
shape read from stdin. The H200 runs in gemm/cuda/NOTES.md measured which configuration is fastest where.
These tests pin the choice on the challenge shapes to those measurements. They also check properties
that every choice must have: a configuration that exists, K slices that divide K, the decode kernel only
for M <= 64, and 192x144 tiles only where they make one full wave of well-filled tiles.
"""

from __future__ import annotations

import itertools
import shutil
import subprocess
from pathlib import Path

import pytest

CUDA_DIR = Path(__file__).resolve().parents[2] / "gemm" / "cuda"
SMS = 132  # the rules' H100/H200 SM count (gemm_cuda::kSms: the program below asserts they agree)

# Configuration ids (gemm_cuda_pick.h, and the table in gemm_cuda.cu).
COOP_128, STREAM_K, PINGPONG_64, KSLICED = 0, 1, 2, 5
WGMMA_128x128, WGMMA_128x192, WGMMA_192x128, DECODE, WGMMA_192x144, WGMMA_128x96_TWO_ACC = 6, 7, 8, 9, 10, 11
CONFIGS = 12

_MAIN = r"""
#include <cstdio>
#include "gemm_cuda_pick.h"
static_assert(gemm_cuda::kConfigCount == CONFIGS, "tests/cuda/test_cuda_pick.py lists every configuration");
static_assert(gemm_cuda::kSms == SMS, "tests/cuda/test_cuda_pick.py counts the rules' SMs");
int main() {
  long long m, n, k;
  while (std::scanf("%lld %lld %lld", &m, &n, &k) == 3) {
    gemm_cuda::Tuning const t = gemm_cuda::pick_tuning(m, n, k);
    gemm_cuda::Tuning const s = gemm_cuda::pick_seed_a(m, n, k);
    std::printf("%d %d %d %d %d %d ", t.cfg, t.raster, t.swizzle, t.splits, t.kslices, int(t.overlap_store));
    gemm_cuda::Tuning const b = gemm_cuda::pick_by_shape(m, n, k);
    std::printf("%d %d %d %d %d %d\n", int(gemm_cuda::pick_seed_fused(m, n, k)), int(gemm_cuda::seed_a_config(t.cfg)),
                s.cfg, s.splits, b.cfg, b.splits);
  }
}
""".replace("CONFIGS", str(CONFIGS)).replace("SMS", str(SMS))


@pytest.fixture(scope="module")
def pick_program(tmp_path_factory) -> Path:
    cxx = next((c for c in ("c++", "g++", "clang++") if shutil.which(c)), None)
    if cxx is None:
        pytest.skip("no C++ compiler on PATH (c++, g++ or clang++) to build the pick_tuning harness")
    work = tmp_path_factory.mktemp("pick")
    (work / "main.cpp").write_text(_MAIN)
    exe = work / "pick"
    proc = subprocess.run(
        [cxx, "-std=c++17", "-O1", "-Wall", "-Wextra", "-Werror", f"-I{CUDA_DIR}", str(work / "main.cpp"), "-o", exe],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, f"gemm_cuda_pick.h does not compile on its own:\n{proc.stderr[-3000:]}"
    return exe


def picks(exe: Path, shapes) -> dict[tuple[int, int, int], dict[str, int]]:
    shapes = list(shapes)
    out = subprocess.run(
        [str(exe)], input="".join(f"{m} {n} {k}\n" for m, n, k in shapes), capture_output=True, text=True, check=True
    ).stdout.splitlines()
    keys = ("cfg", "raster", "swizzle", "splits", "kslices", "overlap_store", "seed_fused", "seed_a")
    keys += ("seed_a_cfg", "seed_a_splits", "by_shape_cfg", "by_shape_splits")
    return {s: dict(zip(keys, map(int, line.split()), strict=True)) for s, line in zip(shapes, out, strict=True)}


# The challenge shapes and 8192^3: the configuration each takes, and the knob that matters, as measured
# (NOTES.md; the run that settled each pick in brackets).
CHALLENGE_PICKS = {
    (1024, 1536, 7168): {"cfg": WGMMA_128x96_TWO_ACC},  # run 107 (runs 83, 95, 99: split tails no faster)
    (1024, 3072, 1536): {"cfg": WGMMA_128x192},  # run 13
    (1024, 576, 7168): {"cfg": WGMMA_128x128, "splits": 3},  # runs 46-47
    (1024, 7168, 256): {"cfg": WGMMA_192x128},  # runs 34-67
    (1024, 7168, 2048): {"cfg": COOP_128},  # runs 89, 92, 95
    (1024, 4608, 7168): {"cfg": WGMMA_128x192, "splits": 8},  # runs 76-77
    (1024, 7168, 2304): {"cfg": COOP_128},  # runs 92, 95
    (1024, 512, 7168): {"cfg": KSLICED, "kslices": 4},  # run 8
    (1024, 4096, 512): {"cfg": WGMMA_128x128},  # runs 34-35, 67
    (6144, 1536, 7168): {"cfg": WGMMA_128x192},  # runs 13, 71-72
    (6144, 3072, 1536): {"cfg": WGMMA_128x192, "overlap_store": 0},  # run 87
    (6144, 576, 7168): {"cfg": WGMMA_192x144},  # run 94
    (6144, 7168, 256): {"cfg": WGMMA_192x128},  # runs 34-35, 86
    (6144, 7168, 2048): {"cfg": WGMMA_128x192, "overlap_store": 1},  # runs 71-72, 85
    (6144, 4608, 7168): {"cfg": WGMMA_128x192, "overlap_store": 1},  # runs 72, 94
    (6144, 7168, 2304): {"cfg": WGMMA_128x192, "overlap_store": 1},  # run 85
    (6144, 512, 7168): {"cfg": WGMMA_192x128},  # run 32
    (6144, 4096, 512): {"cfg": WGMMA_192x128},  # runs 34-35, 86
    (8192, 8192, 8192): {"cfg": WGMMA_128x192, "overlap_store": 1},  # runs 13, 71-72
}


def test_challenge_shapes_take_the_measured_configurations(pick_program):
    got = picks(pick_program, CHALLENGE_PICKS)
    wrong = {s: (want, got[s]) for s, want in CHALLENGE_PICKS.items() if any(got[s][k] != v for k, v in want.items())}
    assert not wrong, wrong


def test_many_waves_at_deep_k_take_the_128x192_kernel(pick_program):
    """8 or more waves of 128x128 tiles at K >= 4096 and M >= 512: the hand-written 128x192 kernel, not
    CUTLASS's 128x128 one (run 147: 16-40 % faster on the first three shapes below); fewer waves, or fewer rows
    than were measured, keep the rules measured before."""
    shapes = [(2048, 50256, 4096), (8192, 2999, 7168), (512, 50257, 4096), (2048, 3000, 7168)]
    shapes += [(1024, 14848, 4096), (1024, 14720, 4096), (48, 152064, 4096)]
    got = picks(pick_program, shapes)
    assert got[(2048, 50256, 4096)]["cfg"] == WGMMA_128x192
    assert got[(8192, 2999, 7168)]["cfg"] == WGMMA_128x192
    assert got[(512, 50257, 4096)]["cfg"] == WGMMA_128x192
    assert got[(2048, 3000, 7168)]["cfg"] == COOP_128  # 384 tiles: 3 waves
    assert got[(1024, 14848, 4096)]["cfg"] == WGMMA_128x192  # 928 tiles: 8 waves, the rule's edge
    assert got[(1024, 14720, 4096)]["cfg"] == COOP_128  # 920 tiles: 7 waves
    assert got[(48, 152064, 4096)]["cfg"] != WGMMA_128x192  # 9 waves, but M under the measured 512


def test_decode_shapes_take_the_decode_kernel_up_to_a_wave_of_weight_tiles(pick_program):
    """M <= 64: the decode kernel, K cut into slices from K = 4096 where its 64-row weight tiles leave SMs idle
    (run 43); from 33 rows on only up to a wave (132) of those tiles (runs 88, 91)."""
    got = picks(pick_program, [(1, 4608, 7168), (3, 520, 7168), (64, 4608, 7168), (33, 8448, 2048), (40, 8704, 1024)])
    assert got[(1, 4608, 7168)]["cfg"] == DECODE
    assert got[(1, 4608, 7168)]["kslices"] == 1  # 72 weight tiles: two slices would not fit one CTA per SM
    assert got[(3, 520, 7168)]["cfg"] == DECODE and got[(3, 520, 7168)]["kslices"] == 14  # 9 tiles, 4 K blocks a slice
    assert got[(64, 4608, 7168)]["cfg"] == DECODE  # 72 weight tiles
    assert got[(33, 8448, 2048)]["cfg"] == DECODE  # 132 weight tiles: a full wave
    assert got[(40, 8704, 1024)]["cfg"] != DECODE  # 136: past a wave


def test_n_not_a_multiple_of_8_keeps_off_cutlass(pick_program):
    """N % 8 != 0: the shapes the rules give CUTLASS's configurations (which would copy w into a padded scratch
    and write a padded output copied after) take the hand-written 128x128 kernel instead (run 154: 1.4-2.5x
    faster on the first eight shapes; run 156: 65x137x8192 in 4 pieces 19.5 us against CUTLASS's 22.8); the same
    shapes with N % 8 == 0 keep CUTLASS's."""
    measured = [(1024, 2001, 4096), (300, 4001, 7168), (1024, 6143, 1024), (1024, 7167, 2048), (96, 32001, 4096)]
    measured += [(100, 1001, 512), (128, 3001, 7168), (2048, 3001, 2048), (65, 137, 8192), (256, 1001, 4096)]
    # fewer 128x128 tiles than SMs at K >= 4096: splits = 4 (run 156); make_schedule leaves 300x4001x7168 (96
    # tiles) and 1024x2001x4096 (128) whole
    split = {(300, 4001, 7168), (1024, 2001, 4096), (128, 3001, 7168), (65, 137, 8192), (256, 1001, 4096)}
    got = picks(pick_program, measured + [(m, n - n % 8, k) for m, n, k in measured])
    for m, n, k in measured:
        assert got[(m, n, k)]["cfg"] == WGMMA_128x128, ((m, n, k), got[(m, n, k)])
        assert got[(m, n, k)]["kslices"] == 1, ((m, n, k), got[(m, n, k)])
        assert got[(m, n, k)]["splits"] == (4 if (m, n, k) in split else 1), ((m, n, k), got[(m, n, k)])
        assert got[(m, n - n % 8, k)]["cfg"] in (COOP_128, STREAM_K, PINGPONG_64, KSLICED), (m, n - n % 8, k)
    for shape, t in picks(pick_program, GRID).items():  # N % 8 == 0: pick_by_shape's choice as it is
        if shape[1] % 8 == 0:
            assert (t["cfg"], t["splits"]) == (t["by_shape_cfg"], t["by_shape_splits"]), (shape, t)
    # The seed layout's choice to read a as it is stays pick_by_shape's: those shapes were not measured so.
    seed = picks(pick_program, [(128, 1001, 7168), (80, 577, 7168), (96, 577, 4096)])
    assert all(t["cfg"] == WGMMA_128x128 and t["seed_a_cfg"] == -1 for t in seed.values()), seed
    odd = picks(pick_program, [(m, n + d, k) for m, n, k in GRID for d in (1, 4) if (n + d) % 8 != 0])
    assert all(t["cfg"] >= WGMMA_128x128 for t in odd.values()), [s for s, t in odd.items() if t["cfg"] < 6][:5]


# A grid of shapes around the rules' edges: M from decode sizes to 8192, N and K over the model widths.
GRID = list(
    itertools.product(
        (1, 17, 33, 64, 65, 128, 200, 512, 1000, 1024, 2048, 4096, 5800, 6144, 8192),
        (8, 136, 512, 556, 576, 1000, 1536, 2304, 3072, 4096, 4608, 7168, 8704, 18432),
        (128, 256, 512, 1024, 1536, 2048, 2304, 4096, 7168, 8192),
    )
)


def test_every_choice_is_a_configuration_the_kernel_accepts(pick_program):
    for (m, n, k), t in picks(pick_program, GRID).items():
        assert 0 <= t["cfg"] < CONFIGS, ((m, n, k), t)
        assert t["splits"] >= 1 and t["kslices"] >= 1, ((m, n, k), t)
        assert t["cfg"] != DECODE or m <= 64, ((m, n, k), t)
        if t["cfg"] in (KSLICED, DECODE):  # natural_impl refuses slices that do not divide the K blocks
            assert (k // 128) % t["kslices"] == 0, ((m, n, k), t)
        else:
            assert t["kslices"] == 1, ((m, n, k), t)
        # the overlapped store only from 16 K blocks a tile (runs 70-72)
        assert t["overlap_store"] == int(k >= 2048), ((m, n, k), t)


def test_192x144_tiles_only_for_one_full_wave_of_full_tiles(pick_program):
    """Configuration 10 was measured where 128 tiles of 192x144 fill the 132 SMs and M and N fill the tiles
    (runs 94, 100); elsewhere its larger tiles lose (6144x4608x7168: 372 vs 362 us)."""
    chosen = [s for s, t in picks(pick_program, GRID).items() if t["cfg"] == WGMMA_192x144]
    assert (6144, 576, 7168) in chosen and (5800, 556, 4096) in chosen
    for m, n, k in chosen:
        tiles_m, tiles_n = -(-m // 192), -(-n // 144)
        assert k >= 4096 and 0.9 * SMS <= tiles_m * tiles_n <= SMS, (m, n, k)
        assert m >= 0.9 * 192 * tiles_m and n >= 0.9 * 144 * tiles_n, (m, n, k)
    # a 128-row M would leave a third of every tile's rows on padding
    assert all(m > 128 for m, _, _ in chosen)


def test_128x96_tiles_only_for_one_full_wave_of_full_tiles_at_deep_k(pick_program):
    """Configuration 11 was measured where 128x96 tiles fill one wave of the 132 SMs and 128x128 ones leave a
    quarter idle, at K >= 4096 (run 107); elsewhere its narrow tiles lose (runs 95, 99)."""
    extra = [(1024, 1536, 4096), (1024, 1536, 16384), (2048, 768, 7168), (512, 3072, 7168), (1000, 1500, 7168)]
    chosen = [s for s, t in picks(pick_program, GRID + extra).items() if t["cfg"] == WGMMA_128x96_TWO_ACC]
    assert set(extra) <= set(chosen) and (1024, 1536, 7168) in chosen
    for m, n, k in chosen:
        tiles_m, tiles_n = -(-m // 128), -(-n // 96)
        assert k >= 4096 and 0.9 * SMS <= tiles_m * tiles_n <= SMS, (m, n, k)
        assert 10 * m >= 9 * 128 * tiles_m and 10 * n >= 9 * 96 * tiles_n, (m, n, k)
        assert tiles_m * -(-n // 128) < 0.9 * SMS, f"{(m, n, k)}: 128x128 tiles fill the wave as well"
    # 128x128 tiles make the same full wave here (66 x 2 = 132 of them): not measured with 128x96, left alone
    assert picks(pick_program, [(8448, 192, 4096)])[(8448, 192, 4096)]["cfg"] != WGMMA_128x96_TWO_ACC
    assert picks(pick_program, [(1024, 1536, 2048)])[(1024, 1536, 2048)]["cfg"] != WGMMA_128x96_TWO_ACC


# The seed layout: fused kernel (True) or the preparation pass and the natural path (False), as measured
# (run 119 and run 117's challenge shapes, us in NOTES.md: the faster of the two, except where noted). The
# rule is on the op's path since run 125 (kSeedFusedOnTheOpsPath).
SEED_FUSED_PICKS = {
    (96, 7168, 256): True,  # 9.1 against 10.3
    (96, 7168, 2048): True,  # 17.8 against 23.4: one wave, the pass over b long against the GEMM
    (128, 7168, 2304): True,  # 18.4 against 24.3
    (512, 4096, 512): True,  # 10.4 against 13.8
    (256, 7168, 512): True,  # 10.5 against 13.9
    (1024, 2048, 512): True,  # 10.0 against 13.3
    (1024, 4096, 512): True,  # 13.2 against 15.5 (a challenge shape)
    (1024, 7168, 256): True,  # 14.2 against 15.6 (a challenge shape)
    (1024, 7168, 768): True,  # 23.0 against 25.7
    (1024, 7168, 1024): True,  # 28.0 against 29.9
    (512, 7168, 1024): True,  # 17.9 against 21.0
    (2048, 4096, 512): True,  # 18.6 against 20.1
    (2048, 7168, 256): True,  # 19.2 against 19.7 (7 waves of 128x128 tiles: the rule's edge)
    (4096, 4096, 512): False,  # 29.9 against 28.9: 8 waves
    (3072, 7168, 256): False,  # 25.7 against 23.7: 11 waves
    (6144, 7168, 256): False,  # 42.6 against 36.7
    (6144, 4096, 512): False,  # 40.7 against 35.1
    (128, 512, 7168): False,  # 38.0 against 17.0: 4 tiles, deep K
    (1024, 1536, 7168): False,  # 40.1 against 38.8
    (1024, 576, 7168): False,  # 39.2 against 29.1
    (1024, 3072, 1536): False,  # 22.1 against 20.2
    (1024, 7168, 2048): False,  # 46.5 against 46.6: a tie, left to the preparation pass
    (1024, 7168, 2304): False,  # 51.2 against 50.2
    (1024, 4608, 7168): False,  # 113.5 against 87.4
    (6144, 576, 7168): False,  # 77.5 against 72.1
    (6144, 7168, 2048): False,  # 225.4 against 169.6
    (8192, 8192, 8192): False,  # 1484 against 928
    (64, 7168, 512): False,  # 10.3 against 10.9, but M <= 64 stays on the decode kernel (64-row tiles)
}


def test_seed_layout_takes_the_fused_kernel_where_measured_faster(pick_program):
    got = picks(pick_program, SEED_FUSED_PICKS)
    wrong = {s: want for s, want in SEED_FUSED_PICKS.items() if bool(got[s]["seed_fused"]) != want}
    assert not wrong, wrong


def test_fused_seed_kernel_only_where_it_runs(pick_program):
    """The fused kernel needs M and N multiples of 16 (TMA row strides of a and b); M <= 64 keeps the decode
    kernel; past 7 waves of 128x128 tiles it loses everywhere measured; K > 1024 only within one wave and
    with M + N >= 6144."""
    extra = [(1000, 7168, 256), (1024, 7160, 256), (80, 7168, 2048), (96, 7184, 512)]
    for (m, n, k), t in picks(pick_program, GRID + extra).items():
        if not t["seed_fused"]:
            continue
        tiles = -(-m // 128) * -(-n // 128)
        assert m > 64 and m % 16 == 0 and n % 16 == 0, (m, n, k)
        assert tiles <= 7 * SMS, (m, n, k)
        assert k <= 1024 or (tiles <= SMS and m + n >= 6144), (m, n, k)
    got = picks(pick_program, extra)
    assert [bool(got[s]["seed_fused"]) for s in extra] == [False, False, True, True]


def test_seed_layout_reads_a_as_it_is_only_on_the_kernels_that_can(pick_program):
    """seed_a_config: the hand-written kernels with one accumulator and whole 64-column output boxes (128x128,
    128x192, 192x128) can read the seed's a (K, M) as it is; 192x144 (no registers left for A's fragments),
    128x96 with two accumulators, CUTLASS's configurations and the decode kernel cannot. pick_seed_a takes
    them only for N <= 1024 (runs 130-131: ahead at N = 512 and 576, level at 1536 and 3072, behind from
    4096 on), the natural pick's configuration where it can, 128x192 with a split tail where that is
    192x144. (pick_by_shape's configuration: pick_tuning moves odd-N shapes off CUTLASS, not this choice.)"""
    for shape, t in picks(pick_program, GRID).items():
        assert t["seed_a"] == int(t["cfg"] in (WGMMA_128x128, WGMMA_128x192, WGMMA_192x128)), (shape, t)
        n, cfg = shape[1], t["by_shape_cfg"]
        if n > 1024 or cfg not in (WGMMA_128x128, WGMMA_128x192, WGMMA_192x128, WGMMA_192x144):
            assert t["seed_a_cfg"] == -1, (shape, t)
        elif cfg == WGMMA_192x144:
            assert (t["seed_a_cfg"], t["seed_a_splits"]) == (WGMMA_128x192, 8), (shape, t)
        else:
            assert (t["seed_a_cfg"], t["seed_a_splits"]) == (cfg, t["by_shape_splits"]), (shape, t)
    got = picks(pick_program, CHALLENGE_PICKS)
    reads_a = sorted(s for s, t in got.items() if t["seed_a_cfg"] >= 0)
    assert reads_a == [(1024, 576, 7168), (6144, 512, 7168), (6144, 576, 7168)], reads_a
