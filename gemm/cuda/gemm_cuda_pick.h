// Hopper (sm_90a) backend of gemm: the configurations' ids, the tuning knobs, and the per-shape choice among
// them (pick_tuning). Free of torch and CUDA, so that a plain C++ compiler can check the choice on a machine
// without a GPU (tests/cuda/test_cuda_pick.py).
#pragma once

#include <cstdint>

namespace gemm_cuda {

// A choice of compiled configuration plus the tile scheduler's runtime knobs (see GemmArgs in
// gemm_cuda_kernels.h). cfg < 0 means: let pick_tuning decide everything.
struct Tuning {
  int cfg = -1;
  int raster = 0;
  int swizzle = 1;
  int splits = 1;
  int kslices = 1;  // K slices of the K-sliced and the decode configurations (ignored by the others)
  // The hand-written configurations (6-8, 10) store a tile beside the next one's first batch (GemmArgs).
  bool overlap_store = false;
  // Seed layout: the GEMM launches as a programmatic dependent of the preparation (GemmArgs::pdl); false
  // only to measure what that saves (tests/cuda/config_sweep.py variant `spicknopdl`).
  bool pdl = true;
  // Seed layout: -1 the choice of pick_seed_fused (while kSeedFusedOnTheOpsPath), 1 the fused seed kernel
  // (no preparation pass; where seed_fused_fits allows), 0 the preparation pass and then the natural path;
  // 2 or 4 the fused kernel's timing-only diagnostic in clusters of that many CTAs, 20 or 40 its control
  // without the copies between CTAs (wrong results by design; builds with GEMM_SEED_DSMEM_EXPERIMENT only,
  // else the call fails).
  int seed_fused = -1;
  // Seed layout, on the preparation path: -1 where pick_seed_a says (with a forced configuration, cfg >= 0:
  // wherever that configuration can), 1 always (the call fails where no configuration can: seed_a_config),
  // 0 never. With it the preparation transposes b alone and the GEMM
  // reads a as it is (GemmArgs::seed_a); without it the preparation transposes both. 2: as 1, through the
  // staged form (GemmArgs::seed_a_staged; configurations 6 and 7, builds with GEMM_SEED_A_EXPERIMENT only).
  int seed_a = -1;
  // Natural layout only (natural_with_config): > 0 runs the seed-A kernel of the forced configuration on x's
  // bytes as if they were a (K, M), timing only (wrong results): 1 the kernel as shipped, 2-5 its probes
  // (SeedProbe in gemm_cuda_wgmma.cu; builds with GEMM_SEED_A_EXPERIMENT only, else the call fails),
  // kSeedProbeStagedKernel the staged form (Tuning::seed_a = 2) on those bytes.
  int seed_probe = 0;
};

// Tuning::seed_probe: the seed-A kernel's staged form, timed on a natural call's bytes.
constexpr int kSeedProbeStagedKernel = 6;

constexpr int64_t kBlock = 128;  // K block: one x_scale / w_scale entry's extent along K
// The configuration that writes fp32 partials per K slice (gemm_cuda_cfg5.cu); the others write bf16,
// except the decode configuration in more than one K slice (the hand-written kernels' split tails keep
// their fp32 pieces in their own workspace and write bf16).
constexpr int kKSliceConfig = 5;
// The hand-written wgmma kernel with 128x128 tiles, 128x192 ones and 192x128 ones (gemm_cuda_wgmma.cu).
constexpr int kSquare128Config = 6;
constexpr int kWide192Config = 7;
constexpr int kTall192Config = 8;
// M <= 64: w streamed through 64-row tiles with the operands swapped, in K slices (gemm_cuda_decode.cu).
constexpr int kDecodeConfig = 9;
// The hand-written kernel with 192x144 tiles (three consumer warpgroups, like 192x128).
constexpr int kTall144Config = 10;
// How many configurations gemm_cuda.cu's table has (it asserts so).
// The hand-written kernel with 128x96 tiles and two batch accumulators (a block promoted while the next
// one's batch runs).
constexpr int kNarrow96TwoAccConfig = 11;
constexpr int kConfigCount = kNarrow96TwoAccConfig + 1;

// The SM count the rules were measured with: H100/H200 SXM. Only the choice depends on it, not correctness.
constexpr int64_t kSms = 132;

// How many tiles of `tile` cover `extent` (the last maybe partial).
inline int64_t ceil_div(int64_t extent, int64_t tile) { return (extent + tile - 1) / tile; }

// How many waves `tiles` equal tiles make on `sms` SMs, the last one maybe partial.
inline int64_t wave_count(int64_t tiles, int64_t sms) { return ceil_div(tiles, sms); }

// Average occupancy of those waves (1.0: the last wave is full).
inline double wave_fill(int64_t tiles, int64_t sms) {
  int64_t const waves = wave_count(tiles, sms);
  return waves == 0 ? 0.0 : static_cast<double>(tiles) / static_cast<double>(waves * sms);
}

// The most K slices (dividing the kblocks K blocks) that keep tiles x slices CTAs within `sms` and at
// least 4 K blocks in each slice; 1 when no cut does.
inline int max_kslices(int64_t tiles, int64_t kblocks, int64_t sms) {
  int slices = 1;
  for (int64_t s = 2; s * tiles <= sms && kblocks / s >= 4; ++s) {
    if (kblocks % s == 0) slices = static_cast<int>(s);
  }
  return slices;
}

// Whether cfg is one of CUTLASS's configurations (gemm_cuda_cfg0-5.cu). They describe B and D with N rounded
// up to 8: where N % 8 != 0 w is copied into a padded scratch and the output goes through a padded scratch
// copied after. The others (hand-written, decode) read w through a tensor map of its own rows and write out at
// any row stride and alignment (natural_impl).
inline bool cutlass_config(int cfg) { return cfg >= 0 && cfg <= kKSliceConfig; }

// Measured on one H200 (NOTES.md, run 2): every configuration and scheduler variant on the 18 challenge
// shapes and 8192^3; these rules reproduce the per-shape winners (or a variant within ~3% of it).
// pick_tuning applies them, moving N % 8 != 0 shapes off CUTLASS's configurations.
inline Tuning pick_by_shape(int64_t M, int64_t N, int64_t K) {
  auto const tile_count = [M, N](int64_t bm, int64_t bn) { return ceil_div(M, bm) * ceil_div(N, bn); };
  int64_t const tiles = tile_count(128, 128);
  int64_t const kblocks = K / kBlock;
  Tuning t;
  // The hand-written kernels' store beside the next tile's first batch, from K = 2048 (16 K blocks per
  // tile). Measured in one build each (tests/cuda/config_sweep.py, us, overlapped vs stored first; runs 71
  // and 72): 6144x7168x2048 162.0 / 175.7 vs 175.8 / 178.6, 6144x7168x2304 191.9 / 191.9 vs 195.5 / 196.5,
  // 6144x1536x7168 115.2 / 124.7 vs 130.1 / 127.2, 8192^3 964.5 vs 977.4, 6144x4608x7168 360.9 / 361.6 vs
  // 368.3 / 360.6. It lost at K <= 1536 (run 71: 6144x7168x256 33.2 vs 31.8, 6144x4096x512 31.2 vs 29.5,
  // 6144x3072x1536 56.5 vs 54.6), where a tile's few K blocks do not hide the epilogue's shared-memory traffic.
  t.overlap_store = K >= 2048;
  // Decode-like (M <= 64): the decode kernel (w's rows on wgmma's M, gemm_cuda_decode.cu); at K >= 4096 with
  // K cut into the most slices that keep one CTA per SM and >= 4 K blocks per slice. Measured (run 43,
  // tests/cuda/config_sweep.py, us; before -> after): 1x4608x7168 23.0 -> 18.8 (one slice), 3x520x7168
  // 12.8 -> 10.2 (14), 64x512x7168 14.8 -> 12.0 (14), 1x1536x7168 16.3 -> 13.3 (4), 8x4096x512 8.3 -> 6.5,
  // 64x64x128 10.3 -> 6.1; slicing lost at K < 4096 (64x3072x1536 10.1 in one slice, 11.9 in two) and
  // where the tiles alone fill half the SMs. From 33 rows on, once w has more than a wave of 64-row
  // tiles, the rules below (CUTLASS's 64-row tiles) are as fast or faster: run 91 (us, those / decode in
  // one slice) 64x18432x7168 58.0 / 58.3, 64x24576x1536 20.5 / 22.1; up to a wave the decode kernel is
  // ahead since its scales come through shared memory (run 88): 64x4608x7168 22.8 / 22.7, 48x4608x7168
  // 22.8 / 22.4, 64x4096x7168 22.3 / 21.8, 64x7168x2304 12.9 / 12.4, 40x7168x2304 12.8 / 12.4,
  // 48x7168x2048 12.1 / 11.6 (run 43, before it: 64x4608x7168 23.1 vs 23.8, 64x7168x2304 13.1 vs 13.8).
  int64_t const tiles64 = ceil_div(N, 64);
  if (M <= 64 && !(M > 32 && tiles64 > kSms)) {
    t.cfg = kDecodeConfig;
    t.kslices = K >= 4096 ? max_kslices(tiles64, kblocks, kSms) : 1;
    return t;
  }
  // Short K over at least four waves: the hand-written 192x128 kernel (three consumer warpgroups, whose
  // epilogue is split three ways). Measured (runs 34 and 35, tests/cuda/config_sweep.py, us): 6144x4096x512
  // 31.6 / 31.9 vs 33.2 / 33.3 for 128x192, 6144x7168x256 34.0 / 34.7 vs 36.2 / 36.2, 6144x7168x2304
  // 200.4 / 205.5 vs 204.7 / 206.4, 6144x3072x1536 55.1 / 58.9 vs 59.2 / 61.4 for CUTLASS's 128x128.
  // But from K = 1536 on, since the 128x192 kernel took its scales through shared memory (runs 50-52)
  // and, from K = 2048, its store beside the next tile's first batch (runs 70-72), that kernel instead
  // (over four waves of either, the last wave's fill matters little). Measured (tests/cuda/config_sweep.py,
  // 5 rounds, us, 192x128 / 128x192), run 85: 6144x7168x2304 199.1 / 194.3, 6144x7168x2048 179.0 / 177.2,
  // 4096x7168x2304 138.8 / 133.9, 8192x7168x2048 238.7 / 232.8, 6144x4096x2304 112.7 / 111.2,
  // 3072x7168x2304 99.4 / 96.0, 6144x3072x2048 74.1 / 73.0; run 87 (store first at K = 1536, as
  // t.overlap_store says): 6144x3072x1536 56.2 / 54.4, 4096x3072x1536 38.6 / 37.0, 8192x4096x1536 104.3 /
  // 102.5; run 86: 6144x7168x1536 132.8 / 133.0. At K <= 512 the 192x128 kernel stays ahead (run 86:
  // 6144x4096x512 29.4 / 31.7, 6144x7168x256 32.4 / 33.5).
  int64_t const tiles_tall = tile_count(192, 128);
  if (K <= 2304 && tiles_tall >= 4 * kSms) {
    t.cfg = K >= 1536 ? kWide192Config : kTall192Config;
    return t;
  }
  // The hand-written 128x192 kernel (gemm_cuda_wgmma.cu) when its tiles fill at least one wave and its
  // waves are fuller than 128x128's: measured (run 13, tests/cuda/config_sweep.py) 8192^3 1031 us vs
  // 1158, 6144x7168x256 36.6 vs 42.8, 6144x4096x512 34.1 vs 37.4, 1024x3072x1536 15.3 vs 17.6; within
  // ~3% of the CUTLASS pick on the other large shapes it takes; slower where its waves are emptier. (The
  // short-K shapes of that list now take the 192x128 rule above.) At K >= 4096 from three quarters of a
  // wave on (run 79, us, against stream-K or the 192x128 kernel, which took them before): 1024x2432x7168
  // (104 tiles) 36.5 vs 39.4, 1024x2560x7168 (112) 37.0 vs 39.5, 768x3584x7168 (114) 38.2 vs 42.6.
  int64_t const tiles192 = tile_count(128, 192);
  bool const fills_wave = K >= 4096 ? 4 * tiles192 >= 3 * kSms : 10 * tiles192 >= 9 * kSms;
  bool const fuller_last_wave = wave_fill(tiles192, kSms) > wave_fill(tiles, kSms) + 0.01 && fills_wave;
  // Also deep K over 8 or more waves of 128x128 tiles, where the last wave's fill hardly matters (the
  // rule above gave these to CUTLASS's 128x128 kernel when 128x192's last wave was the emptier one).
  // Measured (run 147, H100, tests/cuda/config_sweep.py, 2 rounds, us, CUTLASS 128x128 / hand-written
  // 128x128 / 128x192): 2048x50256x4096 829.8 / 827.2 / 699.1, 8192x2999x7168 429.8 / 387.5 / 341.6,
  // 512x50257x4096 396.5 / 254.4 / 236.1 (CUTLASS's with w copied, N % 8 != 0). M >= 512 as measured.
  bool const many_waves = K >= 4096 && M >= 512 && wave_count(tiles, kSms) >= 8;
  if (fuller_last_wave || many_waves) {
    t.cfg = kWide192Config;
    return t;
  }
  if (K <= 512) {
    // Three or more waves of 128x128 tiles, fewer of 192x128 ones whose last wave is no emptier: the
    // 192x128 kernel (three consumer warpgroups, its epilogue split three ways), as for four waves above.
    // Measured (tests/cuda/config_sweep.py, us, runs 34, 35, 37, 48, 51, 67): 1024x7168x256 12.7-13.3 vs
    // 13.0-14.3 on 128x128 tiles in all six (3 waves vs 4, both 85 % full). 1024x4096x512 (two waves of
    // either, the 192x128 ones 73 % full) stays on 128x128: 13.2 vs 11.8 (run 67).
    if (wave_count(tiles, kSms) >= 3 && wave_count(tiles_tall, kSms) < wave_count(tiles, kSms) &&
        wave_fill(tiles_tall, kSms) + 0.01 >= wave_fill(tiles, kSms)) {
      t.cfg = kTall192Config;
      return t;
    }
    // At least a wave of 128x128 tiles: the hand-written 128x128 kernel. Measured (runs 34 and 35):
    // 1024x4096x512 11.7 / 11.5 us vs 12.6 / 12.5 for CUTLASS's ping-pong.
    if (tiles >= kSms) {
      t.cfg = kSquare128Config;
      return t;
    }
    // Fewer: output-bound, and ping-pong overlaps one tile's epilogue with the next one's mainloop.
    t.cfg = 2;
    t.raster = 2;
    t.swizzle = 4;
    return t;
  }
  // Deep K, between a quarter and a half of the SMs busy with 128x128 tiles: cut K into 4 (or 2) slices
  // run side by side (fp32 partials, then one summing pass). Measured (run 8, tests/cuda/kslice_sweep.py):
  // 1024x512x7168 18.2 us with 4 slices vs 22.0 with 64-row tiles; 1024x576x7168 21.6 (2) vs 22.2.
  // It loses wherever the tiles already fill the SMs (the partials cost a write and a read), and on a
  // single 64-row tile (run 34: 16x4608x7168 26.3 us in 2 slices, 22.7 on 64-row tiles).
  // Where 4 slices do not fit but 3 do, the hand-written 128x128 kernel cuts each tile into 3 K pieces
  // (any count: they need not divide the K blocks) and sums them in the kernel (a split tail, in
  // gemm_cuda_wgmma.cu). Measured (runs 46-47, tests/cuda/config_sweep.py, us): 1024x576x7168 21.1 / 22.1
  // vs 22.2 / 22.8 in 2 slices, 96x4608x7168 23.6 vs 25.2; at 4 pieces it lost to 4 slices (1024x512x7168
  // 19.5 vs 18.2). (It keeps this rule's kblocks % 4 == 0, under which it was measured; the pieces
  // themselves need no divisibility.)
  if (K >= 4096 && kblocks % 4 == 0 && M > 64 && tiles >= 32 && 2 * tiles <= kSms) {
    if (4 * tiles > kSms && 3 * tiles <= kSms) {
      t.cfg = kSquare128Config;
      t.splits = 3;
      return t;
    }
    t.cfg = kKSliceConfig;
    t.kslices = 4 * tiles <= kSms ? 4 : 2;
    return t;
  }
  // Decode-like: a few tiles (a handful of rows against a deep weight) would stream all of K through a
  // few SMs. Cut K into as many slices as the SMs take, each of at least 4 K blocks; the fp32 partials
  // are small at these sizes. Run 34 (64-row tiles -> this): 128x512x7168 21.3 -> 14.1 us (torch 19.3),
  // 1024x256x7168 21.7 -> 15.4 (25.5), and 64x1536x7168 21.6 -> 16.6 before the decode rule above took
  // it; at K = 2048 it lost (64x3072x2048 13.6 vs 11.7).
  if (K >= 4096 && tiles < 32) {
    int const slices = max_kslices(tiles, kblocks, kSms);
    if (slices > 1) {
      t.cfg = kKSliceConfig;
      t.kslices = slices;
      return t;
    }
  }
  if (2 * tiles <= kSms) {  // fewer than half the SMs busy with 128x128 tiles: 64-row tiles
    t.cfg = 2;
    t.raster = 2;
    return t;
  }
  // Deep K where 192x128 tiles (three consumer warpgroups) make exactly one wave at least 90% full:
  // measured (run 32, tests/cuda/config_sweep.py) 6144x512x7168 45.0 us vs 47.9 for stream-K on 128x128
  // tiles (1.45 waves); on full multi-wave shapes that kernel is 3-10% slower than the 128x192 one.
  if (K >= 4096 && tiles_tall <= kSms && 10 * tiles_tall >= 9 * kSms) {
    t.cfg = kTall192Config;
    t.raster = 2;
    return t;
  }
  // Deep K where 192x128 tiles make more than a wave but 192x144 ones make one wave at least 90 % full
  // (6144x576x7168: 160 tiles of 192x128, 1.21 waves; 128 of 192x144): those, the tiles 12 % larger.
  // Only where M and N fill the 192x144 tiles to at least 90 % each, as on the shapes measured (a 128-row
  // M would leave a third of every tile's rows on padding).
  // Measured (run 94, tests/cuda/config_sweep.py, 4 rounds, us): 6144x576x7168 45.1 vs 51.4 for the
  // rules below (CUTLASS's 128x128, 1.82 waves), 69.6 for 192x128, torch 48.4; 5800x556x4096 43.1 vs 49.0.
  // (Where they make many waves they lost to 128x192: 6144x4608x7168 372.5 vs 362.4, 8192^3 1010 vs 946.)
  int64_t const tiles_tall144 = tile_count(192, 144);
  auto const fills = [](int64_t extent, int64_t tile) { return 10 * extent >= 9 * ceil_div(extent, tile) * tile; };
  if (K >= 4096 && tiles_tall144 <= kSms && 10 * tiles_tall144 >= 9 * kSms && fills(M, 192) && fills(N, 144)) {
    t.cfg = kTall144Config;
    t.raster = 2;
    return t;
  }
  // Deep K where 128x128 tiles leave a quarter of the SMs idle but 128x96 ones make one wave at least 90 %
  // full (1024x1536x7168: 96 tiles of 128x128, 128 of 128x96), M and N filling them to at least 90 %: the
  // hand-written kernel with 128x96 tiles and two batch accumulators. Measured call by call against
  // torch's blockwise kernel (run 107, tests/cuda/config_sweep.py, 5 stretches each): torch / ours
  // 1.027-1.037 at 1024x1536x7168 where CUTLASS's 128x128 kernel gave 1.001-1.010; 1.6-7 % faster than
  // it at 1024x1536 with K = 4096 and 16384, 2048x768x7168, 512x3072x7168 and 1000x1500x7168. Only where
  // 128x128 tiles fill the wave less well (a single full wave of them stays with the rules below).
  int64_t const tiles96 = tile_count(128, 96);
  if (K >= 4096 && tiles96 <= kSms && 10 * tiles96 >= 9 * kSms && fills(M, 128) && fills(N, 96) &&
      wave_fill(tiles96, kSms) > wave_fill(tiles, kSms) + 0.01) {
    t.cfg = kNarrow96TwoAccConfig;
    return t;
  }
  double const waves = static_cast<double>(tiles) / kSms;
  double const tail = waves - static_cast<double>(static_cast<int64_t>(waves));
  if (K >= 4096 && tiles > kSms && waves < 3.0 && tail <= 0.5) {  // a poor last wave of deep tiles
    // More than a wave of 128x192 tiles: the hand-written kernel, its last wave's tiles cut into K pieces
    // (a split tail; make_schedule caps the pieces at one per CTA). Measured against stream-K
    // (tests/cuda/config_sweep.py, runs 76-77, us): 1024x4608x7168 63.7 / 63.5 vs 66.5 / 65.5,
    // 1536x3072x4096 42.0 vs 44.4, 3072x1536x4096 42.2 vs 44.4.
    if (tiles192 > kSms) {
      t.cfg = kWide192Config;
      t.splits = 8;
      return t;
    }
    t.cfg = 1;  // stream-K
    return t;
  }
  t.cfg = 0;
  return t;
}

// The configuration and knobs for an (M, N, K) call: pick_by_shape's, except that where N % 8 != 0 the
// shapes it gives CUTLASS take the hand-written 128x128 kernel, which reads w's own rows and writes the
// output itself. Measured (run 154, H100, tests/cuda/config_sweep.py, 2 rounds, us, CUTLASS's pick /
// hand-written 128x128 / 128x192): 1024x2001x4096 38.3 / 23.2 / 27.1 (at N = 2000 CUTLASS 21.1),
// 300x4001x7168 60.8 / 33.2 / 39.6, 1024x6143x1024 43.4 / 25.8 / 26.3, 1024x7167x2048 67.7 / 44.8 / 47.2,
// 96x32001x4096 164.7 / 65.1 / 77.8, 100x1001x512 15.9 / 10.5 / 12.7, 128x3001x7168 44.4 / 30.4 / 38.2
// (CUTLASS's in 4 K slices), 2048x3001x2048 54.8 / 35.7 / 34.3.
// Fewer tiles than SMs at K >= 4096 get splits = 4: make_schedule cuts each tile into min(4, SMs / tiles) K
// pieces, so up to 66 tiles run as a split tail (where pick_by_shape gives the even-N shapes CUTLASS's K
// slices or 64-row tiles) and from 67 on the tiles stay whole. Measured (run 156,
// H100, 2 rounds, us, whole tiles / 4 pieces / 8 pieces): 65x137x8192 33.3 / 19.5 / 18.9 (CUTLASS in 16
// K slices, w copied: 22.8), 128x3001x7168 30.4 / 25.4 / 26.2, 256x1001x4096 21.3 / 18.4 / 20.1,
// 96x577x4096 21.0 / 17.8 / 18.3; 80x577x7168 29.2 / - / 19.7, 128x1001x7168 29.7 / - / 20.9.
inline Tuning pick_tuning(int64_t M, int64_t N, int64_t K) {
  Tuning t = pick_by_shape(M, N, K);
  if (N % 8 != 0 && cutlass_config(t.cfg)) {
    bool const overlap_store = t.overlap_store;
    t = Tuning{};
    t.cfg = kSquare128Config;
    t.overlap_store = overlap_store;
    if (K >= 4096 && ceil_div(M, 128) * ceil_div(N, 128) < kSms) t.splits = 4;
  }
  return t;
}

// Seed layout: whether the fused seed kernel (gemm_cuda_wgmma.cu: a and b read as they are, 128x128 tiles)
// beats the preparation pass followed by the natural path. It saves the pass over 2 (M + N) K bytes but
// runs each K block ~1.4x slower than a natural 128x128 kernel (its shared memory carries B's transpose:
// ~900 wavefronts per K block against ~640, runs 115-118). Measured on 34 shapes (runs 117, 119; NOTES.md):
// it wins where K is short and the tiles make at most 7 waves, and over one wave of tiles where M + N is
// large (the pass is long against the GEMM: 96x7168x2048 17.8 against 23.4 us); it loses wherever the
// GEMM itself dominates (K = 7168 beyond one wide wave, 8 or more waves). M <= 64 keeps the decode
// kernel (64-row tiles); M and N must be multiples of 16 (the kernel's TMA row strides).
//
// On the op's path since run 125 (kSeedFusedOnTheOpsPath): racecheck had reported its consumers' reads of a
// stage's scales unordered with the producer's 16-byte cp.async copies into it (runs 121-122); with the
// natural kernels' 4-byte copies it is clean where its stage ring wraps (runs 124 and 126: 0 hazards at
// 256x1024x1024 and 96x7168x2048, the latter through the op). False would send the seed layout back to the
// preparation pass; Tuning::seed_fused forces either (tests/cuda/config_sweep.py's `sfused` / `sprep`).
constexpr bool kSeedFusedOnTheOpsPath = true;
inline bool pick_seed_fused(int64_t M, int64_t N, int64_t K, int64_t sms = kSms) {
  if (M <= 64 || M % 16 != 0 || N % 16 != 0 || K % kBlock != 0) return false;
  int64_t const tiles = ceil_div(M, 128) * ceil_div(N, 128);
  if (tiles > 7 * sms) return false;
  return K <= 1024 || (tiles <= sms && M + N >= 6144);
}

// Seed layout: whether configuration cfg can read the seed's a (K, M) as it is (GemmArgs::seed_a), its A
// fragments built in registers from raw M-major boxes: the hand-written kernels with one accumulator and
// whole 64-column output boxes, 128x128, 128x192 and 192x128. Not 192x144 (its accumulators leave no 16
// registers for the fragments) nor 128x96 with two accumulators (each batch in flight would need its own).
inline bool seed_a_config(int cfg) {
  return cfg == kSquare128Config || cfg == kWide192Config || cfg == kTall192Config;
}

// Seed layout: the configuration that reads a as it is for this shape, or cfg = -1 for none: the natural
// path's pick where seed_a_config allows, 128x192 tiles with a split tail where that pick is 192x144
// (measured at 6144x576x7168, run 131: 64.4 us against 67.3 for 128x128 tiles and 69.7 for 192x128 in 4
// pieces).
// (pick_by_shape's choice, not pick_tuning's: the odd-N shapes that pick_tuning moves off CUTLASS were not
// measured reading a so, and these kernels would write their output through a padded scratch there.)
inline Tuning seed_a_tuning(int64_t M, int64_t N, int64_t K) {
  Tuning t = pick_by_shape(M, N, K);
  if (t.cfg == kTall144Config) {
    t.cfg = kWide192Config;
    t.splits = 8;
    t.raster = 0;
  } else if (!seed_a_config(t.cfg)) {
    t.cfg = -1;
  }
  return t;
}

// Seed layout: seed_a_tuning where reading a as it is, after a preparation pass over b alone, beats the pass
// over a and b and then the natural path's pick; cfg = -1 elsewhere. Reading a so saves the pass 2 M K
// bytes but slows each K block (A's fragments come through registers: 1.11-1.2x the natural kernel's time,
// 128x128 tiles to 128x192), so it wins where a is large against the GEMM, i.e. N is small. Measured (runs
// 130-131, tests/cuda/config_sweep.py, us, reading a so against the old path): 6144x512x7168 49.2 / 67.4,
// 1024x576x7168 27.5 / 29.7, 6144x576x7168 64.4 / 72.1 (`seedraw7p8` against `spick`); level at
// 6144x1536x7168 (138.9 / 140.4) and 1024x3072x1536 (20.1 / 20.5); behind from N = 4096 on
// (6144x4608x7168 398 / 357, 8192^3 1114 / 952, 6144x7168x256 39.6 / 36.9).
inline Tuning pick_seed_a(int64_t M, int64_t N, int64_t K) {
  Tuning t = seed_a_tuning(M, N, K);
  if (N > 1024) t.cfg = -1;
  return t;
}

}  // namespace gemm_cuda
