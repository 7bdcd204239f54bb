// Host-side planning for the gfx942 FP8 block-scaled GEMM: pure C++17, no HIP, no torch.
//
// The tile-configuration table, the split-K choice and the workspace size are decided here from
// (M, N, K, layout, alignment) only, so the torch launcher (gemm_rocm.hip), the CPU emulator tests
// and the design-note estimator all use the very same decision. A caller may force a configuration
// and a split count (the emulator tests do, to reach every row of the table with small shapes).
#pragma once

#include <stddef.h>
#include <stdint.h>

namespace gemm_rocm {

enum Layout : int {
  kSeed = 0,     // a (K,M), b (K,N), a_scale (K/128,M), b_scale (K/128,ceil(N/128)): M-/N-contiguous
  kNatural = 1,  // x (M,K), w (N,K), x_scale (M,K/128), w_scale (ceil(N/128),K/128): K-contiguous
};

constexpr int kBK = 128;  // K-block of the tile loop == the scale block along K

// One row of the configuration table. The kernel template instances are defined from the same
// numbers in gemm_kernels.h (static_asserts tie the two together).
struct ConfigInfo {
  const char* name;
  int bm, bn;            // block tile (rows of M, columns of N); BN divides 128 or equals it
  int waves_m, waves_n;  // wave grid inside the block
  int mfma;              // 16 -> v_mfma_f32_16x16x32_fp8_fp8, 32 -> v_mfma_f32_32x32x16_fp8_fp8
  int waves_per_eu;      // occupancy asked of the compiler (__launch_bounds__ second argument)
  double efficiency;     // fraction of MFMA peak a CU reaches with this tile (cost model only)
  constexpr int threads() const { return 64 * waves_m * waves_n; }  // a block's (TileCfg::THREADS)
};

constexpr int kNumConfigs = 3;

inline constexpr ConfigInfo kConfigs[kNumConfigs] = {
    // name        bm   bn  wm wn mfma wpe  eff
    {"t256x128", 256, 128, 4, 2, 16, 2, 0.30},  // 8 waves of 64x64: big M x N
    {"t128x128", 128, 128, 4, 2, 16, 2, 0.26},  // 8 waves of 32x64: medium / split-K
    {"t64x64", 64, 64, 2, 2, 32, 2, 0.15},      // 4 waves of 32x32: tiny outputs
};

inline const ConfigInfo& config_info(int i) {
  return kConfigs[i < 0 ? 0 : (i >= kNumConfigs ? kNumConfigs - 1 : i)];
}

// Machine model of MI300X used by the planner (public numbers, see mi300x-notes.md).
constexpr int kNumCUs = 304;
constexpr double kClockHz = 2.1e9;
constexpr double kFp8FlopPerClkPerCU = 4096.0;
constexpr double kHbmBytesPerSec = 5.3e12;
constexpr double kLaunchGapSec = 2.0e-6;   // a second kernel on the stream (split-K reduce)
constexpr double kPrologueSec = 1.0e-6;    // first tile load + epilogue of one block
constexpr double kSeedStagingFactor = 0.92;  // seed layout: byte transposes while staging
constexpr size_t kMaxWorkspaceBytes = size_t(256) << 20;  // split-K fp32 partials, bounded
constexpr int kMaxSplits = 16;

struct Plan {
  int config = 0;        // row of the table
  int splits = 1;        // split-K factor actually used (every split non-empty)
  int kb_per_split = 1;  // K-blocks of 128 per split
  int tiles_m = 1, tiles_n = 1;
  int grid_x = 1, grid_z = 1;  // the tiles' blocks: along x, and along z too past HIP's limit (set_grid)
  bool vec = true;       // vector global loads (alignment holds); else byte loads
  size_t workspace_bytes = 0;  // fp32 [splits][M][N] when splits > 1
  double est_seconds = 0.0;    // cost-model estimate (design note / diagnostics only)
};

inline int ceil_div(long long a, long long b) { return int((a + b - 1) / b); }

// Cost model: a block's time is its K-blocks times the MFMA time of one K-block at the config's
// efficiency; blocks run in rounds over the CUs; bounded below by the HBM bytes; split-K adds the
// fp32 partials traffic and a reduce kernel.
inline double estimate_seconds(int M, int N, int K, int layout, int config, int splits) {
  const ConfigInfo& ci = config_info(config);
  const int KB = K / kBK;
  const int kbps = ceil_div(KB, splits);
  const int s = ceil_div(KB, kbps);
  const long long tiles = (long long)ceil_div(M, ci.bm) * ceil_div(N, ci.bn);
  const long long blocks = tiles * s;
  double eff = ci.efficiency * (layout == kSeed ? kSeedStagingFactor : 1.0);
  double cyc_kblock = 2.0 * ci.bm * ci.bn * kBK / (kFp8FlopPerClkPerCU * eff);
  long long rounds = (blocks + kNumCUs - 1) / kNumCUs;
  double t_compute = double(rounds) * kbps * cyc_kblock / kClockHz;
  double bytes = double(M) * K + double(N) * K + 2.0 * M * N;
  if (s > 1) bytes += 2.0 * 4.0 * s * M * N;  // partials written once, read once
  double t_mem = bytes / kHbmBytesPerSec;
  double t = (t_compute > t_mem ? t_compute : t_mem) + kPrologueSec;
  if (s > 1) t += kLaunchGapSec;
  return t;
}

// HIP refuses a launch whose grid times block passes 2^32 - 1 work-items along any dimension (hipamd checks
// each dimension's global work size), which one grid row of tiles would at M <= ~20 and N near 2^30.
constexpr unsigned long long kMaxWorkItemsPerDim = 0xffffffffull;

// The most blocks of `threads` work-items one grid dimension takes.
constexpr long long max_blocks_per_dim(int threads) {
  return (long long)(kMaxWorkItemsPerDim / (unsigned long long)threads);
}

// The grid of a plan's tiles: grid_x blocks along x, at most `per_row` (0: as many as HIP's limit allows),
// grid_z rows of them (1 unless the tiles need more). The kernel numbers its block z * grid_x + x; the blocks
// past the last tile (fewer than grid_x, in the last row) return at once. A small `per_row` forces rows
// (the emulator's tests).
inline void set_grid(Plan& p, long long per_row = 0) {
  if (per_row <= 0) per_row = max_blocks_per_dim(config_info(p.config).threads());
  const long long tiles = (long long)p.tiles_m * p.tiles_n;
  p.grid_z = int((tiles + per_row - 1) / per_row);
  p.grid_x = int((tiles + p.grid_z - 1) / p.grid_z);
}

inline Plan make_plan(int M, int N, int K, int layout, bool aligned, int force_config = -1,
                      int force_splits = 0) {
  Plan best;
  const int KB = K / kBK > 0 ? K / kBK : 1;
  bool have = false;
  const int c_lo = force_config >= 0 ? force_config : 0;
  const int c_hi = force_config >= 0 ? force_config : kNumConfigs - 1;
  for (int c = c_lo; c <= c_hi; ++c) {
    const int s_lo = force_splits > 0 ? force_splits : 1;
    const int s_hi = force_splits > 0 ? force_splits : kMaxSplits;
    for (int s_req = s_lo; s_req <= s_hi; ++s_req) {
      int kbps = ceil_div(KB, s_req < KB ? s_req : KB);
      int s = ceil_div(KB, kbps);  // no empty split
      if (force_splits <= 0 && s != s_req) continue;  // visit each effective split once
      size_t ws = s > 1 ? size_t(s) * size_t(M) * size_t(N) * 4 : 0;
      if (ws > kMaxWorkspaceBytes && force_splits <= 0) continue;
      double t = estimate_seconds(M, N, K, layout, c, s);
      if (!have || t < best.est_seconds * 0.98) {  // prefer earlier (bigger tile, fewer splits)
        have = true;
        best.config = c;
        best.splits = s;
        best.kb_per_split = kbps;
        best.workspace_bytes = ws;
        best.est_seconds = t;
      }
    }
  }
  const ConfigInfo& ci = config_info(best.config);
  best.tiles_m = ceil_div(M, ci.bm);
  best.tiles_n = ceil_div(N, ci.bn);
  best.vec = aligned;
  set_grid(best);
  return best;
}

// Alignment that the vector loads of a layout need (checked on the real pointers and extents).
// Seed: 4-byte loads along M (resp. N): M % 4 == 0, N % 4 == 0 and 4-byte aligned bases.
// Natural: 16-byte loads along K (K % 128 == 0 always): 16-byte aligned bases.
// The vector path also adds 32-bit lane offsets to a uniform 64-bit base (saddr addressing), which
// needs 32 * max(M, N) (seed) resp. 256 * K (natural) below 2^32; larger problems take the byte
// path, whose lane offsets are 64-bit.
inline bool layout_aligned(int layout, int M, int N, int K, uintptr_t a, uintptr_t b) {
  if (layout == kSeed)
    return M % 4 == 0 && N % 4 == 0 && a % 4 == 0 && b % 4 == 0 && M < (1 << 26) && N < (1 << 26);
  return a % 16 == 0 && b % 16 == 0 && K < (1 << 23);
}

}  // namespace gemm_rocm
