// FP8 (e4m3fnuz bytes) block-scaled GEMM kernels for gfx942 (MI300X), torch-free.
//
//   C[m, n] = sum_kb  sa(m, kb) * sb(n / 128, kb) * sum_{k in kb} A[m, k] * B[n, k]     (fp32, bf16 store)
//
// One template, two layouts (seed: M-/N-contiguous; natural: K-contiguous), three tile
// configurations (gemm_plan.h), split-K through a bounded fp32 workspace plus a reduce kernel.
// The same source compiles for gfx942 (hipcc / clang-19 + HIP 5.2) and, with GEMM_HIP_EMULATOR,
// for the host CPU under the emulator (gemm/rocm/emu). See DESIGN.md for the reasoning.
//
// Block tile BM x BN; the scale block of 128 K is staged as two LDS stages of 64 K each, double
// buffered, with one barrier per stage:
//   stage s:  [registers of stage s+1 -> LDS buffer (s+1)&1]  [issue global loads of stage s+2]
//             [MFMAs of stage s from LDS buffer s&1 into this K-block's accumulators `tmp`]
//             [every second stage: acc += tmp * (a_scale[row] * b_scale[tile]), fp32 v_pk_fma]
//             barrier
// so a wave's LDS writes overlap the other waves' MFMAs and the global loads have a whole stage in
// flight: a load's registers are first read by the LDS store one stage later (no select or branch
// on the loaded value; the gfx942 gate checks the waits in the machine code, DESIGN.md). LDS rows are K-contiguous, sX[row][0..63] with a row stride of 72 bytes (+8 B pad: the
// 16 rows one MFMA operand read touches fall on 16 distinct bank pairs); the seed layout is
// transposed 4x4 bytes at a time in registers on the way in (no pre-pass kernel).
// Partial tiles: rows/columns past M/N are staged as copies of the last valid row/column (clamped
// addresses; seed byte path: zeros) and never stored; output (i, j) depends only on A row i and B
// column j, so they never reach a stored element.
#pragma once

#include "gemm_plan.h"
#include "hip_compat.h"

// Device code for gfx942 only: the fp8 MFMA builtins read e4m3fnuz there; gfx950 has the same
// builtins reading OCP e4m3fn (silently wrong numbers), other archs lack them. The host pass and
// the CPU emulator (GEMM_HIP_EMULATOR) do not define __HIP_DEVICE_COMPILE__ (the host pass does
// define __AMDGCN__, so that one is no test).
#if defined(__HIP_DEVICE_COMPILE__) && !defined(__gfx942__)
#error "gemm/rocm: device code is for gfx942 (MI300X) only; compile with --offload-arch=gfx942"
#endif

namespace gemm_rocm {

typedef float floatx4 __attribute__((ext_vector_type(4)));
typedef float floatx16 __attribute__((ext_vector_type(16)));
typedef uint32_t u32x4 __attribute__((ext_vector_type(4)));
typedef uint32_t u32x4_a8 __attribute__((ext_vector_type(4), aligned(8)));  // 72-B LDS rows

constexpr int kStageK = 64;                  // K per LDS stage (two per scale block)
constexpr int kLdsPad = 8;
constexpr int kLdsStride = kStageK + kLdsPad;  // bytes per staged row (72 = 18 dwords)

// Kernel arguments: one struct by value (kernarg segment).
struct Args {
  const uint8_t* a;   // seed: a (K,M)            natural: x (M,K)
  const uint8_t* b;   // seed: b (K,N)            natural: w (N,K)
  const float* sa;    // seed: a_scale (KB,M)     natural: x_scale (M,KB)
  const float* sb;    // seed: b_scale (KB,NB)    natural: w_scale (NB,KB)
  uint16_t* c;        // (M,N) bf16 bits
  float* ws;          // split-K partials [splits][M][N] (fp32), or nullptr when splits == 1
  int M, N, K;
  int tiles_m, tiles_n;
  int kb_per_split;
};

struct ReduceArgs {
  const float* ws;  // [splits][M*N]
  uint16_t* c;      // [M*N]
  long long mn;
  int splits;
};

// ---------------------------------------------------------------------------------------------
// Tile configuration (compile-time mirror of one row of config_info()).
template <int BM_, int BN_, int WAVES_M_, int WAVES_N_, int MT_, int WPE_>
struct TileCfg {
  static constexpr int BM = BM_, BN = BN_, WAVES_M = WAVES_M_, WAVES_N = WAVES_N_, MT = MT_;
  static constexpr int WAVES_PER_EU = WPE_;
  static constexpr int WAVES = WAVES_M * WAVES_N;
  static constexpr int THREADS = 64 * WAVES;
  static constexpr int WTM = BM / WAVES_M;  // wave tile rows
  static constexpr int WTN = BN / WAVES_N;  // wave tile columns
  static constexpr int FM = WTM / MT;       // MFMA fragments per wave along M
  static constexpr int FN = WTN / MT;       // ... along N
  static constexpr int KI = 512 / MT;       // K per MFMA: 32 (16x16x32) or 16 (32x32x16)
  static constexpr int NACC = MT * MT / 64; // fp32 results per lane per fragment
  static constexpr int wave_m0(int wave) { return (wave % WAVES_M) * WTM; }  // wave tile's first row
  static constexpr int wave_n0(int wave) { return (wave / WAVES_M) * WTN; }  // ... and first column
  static constexpr int LDS_STAGE_BYTES = (BM + BN) * kLdsStride;  // one buffer: A rows, then B rows
  static constexpr int LDS_BYTES = 2 * LDS_STAGE_BYTES + 2 * THREADS * 4;  // + a_scale x 2 (all threads)
  static constexpr int NAT_CHUNKS = (BM + BN) * (kStageK / 16) / THREADS;  // 16-B chunks / thread
  static constexpr int SEED_UNITS = (BM + BN) / 64 * (kStageK / 32);      // 64 rows x 32 K units
  static constexpr int SEED_UNITS_PER_WAVE = (SEED_UNITS + WAVES - 1) / WAVES;
  static_assert(MT == 16 || MT == 32, "MFMA shape");
  static_assert(FM * MT == WTM && FN * MT == WTN && FM >= 1 && FN >= 1, "wave tile");
  static_assert(BM % 64 == 0 && BN % 64 == 0, "seed staging units are 64 rows");
  static_assert(128 % BN == 0 || BN == 128, "one b_scale column per block tile");
  static_assert(THREADS >= BM, "one a_scale per thread");
  static_assert(NAT_CHUNKS * THREADS == (BM + BN) * (kStageK / 16), "natural staging chunks");
  static_assert((WAVES * 64) % (kStageK / 16) == 0 && BM % 16 == 0, "a wave's chunks: one operand");
  static_assert(LDS_BYTES <= 65536, "LDS");
};

using Cfg0 = TileCfg<256, 128, 4, 2, 16, 2>;
using Cfg1 = TileCfg<128, 128, 4, 2, 16, 2>;
using Cfg2 = TileCfg<64, 64, 2, 2, 32, 2>;

template <int I> struct CfgOf;
template <> struct CfgOf<0> { using type = Cfg0; };
template <> struct CfgOf<1> { using type = Cfg1; };
template <> struct CfgOf<2> { using type = Cfg2; };
static_assert(kNumConfigs == 3, "keep CfgOf in step with config_info()");
template <int I>
constexpr bool cfg_matches_table() {
  using C = typename CfgOf<I>::type;
  return kConfigs[I].bm == C::BM && kConfigs[I].bn == C::BN && kConfigs[I].waves_m == C::WAVES_M &&
         kConfigs[I].waves_n == C::WAVES_N && kConfigs[I].mfma == C::MT &&
         kConfigs[I].waves_per_eu == C::WAVES_PER_EU && kConfigs[I].threads() == C::THREADS;
}
static_assert(cfg_matches_table<0>() && cfg_matches_table<1>() && cfg_matches_table<2>(),
              "TileCfg instances and gemm_plan.h kConfigs disagree");

// ---------------------------------------------------------------------------------------------
// Where a lane's MFMA results go. The MFMA is issued with the B tile's fragment as its first
// operand, so it computes C^T: result element e of lane l is the instruction's row
// 8 * (e / 4) + 4 * (l / MT) + e % 4 (an output column) and column l % MT (an output row), for both
// MFMA shapes. A lane's results of a fragment are thus in one output row, in runs of 4 consecutive
// columns: one a_scale a fragment, and 8-byte (bf16) or 16-byte (fp32) stores.
template <int MT>
struct OutMap {
  static constexpr int out_row(int lane) { return lane % MT; }
  static constexpr int out_col(int e, int lane) { return 8 * (e / 4) + 4 * (lane / MT) + e % 4; }
  // What the epilogue's 4-element stores rely on: every run of 4 results starts at a column that is a
  // multiple of 4 and goes on in consecutive columns, and the 64 lanes' results cover the MT x MT
  // fragment once each.
  static constexpr bool runs_and_cover() {
    int seen[MT][MT] = {};
    for (int l = 0; l < 64; ++l)
      for (int e = 0; e < MT * MT / 64; ++e) {
        if (e % 4 == 0 && out_col(e, l) % 4 != 0) return false;
        if (e % 4 != 0 && out_col(e, l) != out_col(e - 1, l) + 1) return false;
        if (out_col(e, l) >= MT) return false;
        ++seen[out_row(l)][out_col(e, l)];
      }
    for (int r = 0; r < MT; ++r)
      for (int c = 0; c < MT; ++c)
        if (seen[r][c] != 1) return false;
    return true;
  }
};
static_assert(OutMap<16>::runs_and_cover() && OutMap<32>::runs_and_cover(), "OutMap: runs of 4, each output once");

// Where each lane's LDS accesses fall: byte offsets within one stage buffer (A rows [0, BM), then B
// rows [BM, BM + BN), 72 bytes apart) and rows of the a_scale slots. The kernel forms its LDS
// addresses with these functions only, and tools/lds_check.cpp evaluates the same functions for
// all 64 lanes of every wave to count bank conflicts (32 banks x 4 B) and to check that the staging
// writes every byte of a stage exactly once. A row stride of 18 dwords puts rows 8 apart 16 banks
// apart and any two rows an odd number apart on distinct bank pairs.
template <class Cfg>
struct LdsMap {
  static constexpr int BM = Cfg::BM, MT = Cfg::MT;

  // Natural staging (K-contiguous rows, 16-byte chunks, 4 lanes per row's 64 bytes). Chunk j of a
  // wave covers 16 rows from nat_first_row (wave-uniform: a wave's rows are all A or all B). Within
  // them, 16 consecutive lanes take the rows {x, x + 8, x + 1, x + 9}, x = 2 * (lane / 16): their
  // 8-byte halves fall on 16 distinct bank pairs, and every 8 consecutive lanes' 16-byte chunks
  // (rows x and x + 8, or x + 1 and x + 9) on 32 distinct banks. Rows x .. x + 3 in order (the
  // first version) put rows 2 apart 4 banks apart: a 2-way conflict on every store.
  static constexpr int nat_first_row(int wave, int j) { return (wave * 64 + j * Cfg::THREADS) >> 2; }
  static constexpr int nat_lane_row(int lane) {
    const int i = (lane >> 2) & 3;
    return 2 * (lane >> 4) + 8 * (i & 1) + (i >> 1);
  }
  static constexpr int nat_col(int lane) { return (lane & 3) * 16; }
  // The byte offset of the lane's 16-byte store of chunk j.
  static constexpr int nat_store_off(int wave, int j, int lane) {
    return (nat_first_row(wave, j) + nat_lane_row(lane)) * kLdsStride + nat_col(lane);
  }

  // Seed staging (units of 64 rows x 32 K, see Stager): the lane's 4 rows start at seed_row, its
  // 8 K bytes at seed_col; g = (lane >> 2) & 3 picks the K-rows, ch the 4 rows.
  static constexpr int seed_ch(int lane) { return (lane & 3) + 4 * (lane >> 4); }
  static constexpr int seed_g(int lane) { return (lane >> 2) & 3; }
  static constexpr int seed_row(bool isA, int mu, int lane) { return (isA ? 0 : BM) + mu * 64 + 4 * seed_ch(lane); }
  static constexpr int seed_col(int ku, int lane) { return ku * 32 + 8 * seed_g(lane); }
  // The byte offset of the lane's 8-byte store of row i (0..3) of a unit.
  static constexpr int seed_store_off(bool isA, int mu, int ku, int i, int lane) {
    return (seed_row(isA, mu, lane) + i) * kLdsStride + seed_col(ku, lane);
  }

  // MFMA operands: lane l reads 8 K bytes of row (A) / column (B) l % MT, from K byte 8 * (l / MT)
  // of K-step ks, at operand_base + operand_lane. row0 = wave_m0 + i * MT (A) or BM + wave_n0 +
  // j * MT (B): the fragment's first row. (Kept as two terms: the lane's part is computed once, and
  // in this form the compiler pairs the two K-steps' reads into one ds_read2_b64.)
  static constexpr int operand_base(int row0, int ks) { return row0 * kLdsStride + ks * Cfg::KI; }
  static constexpr int operand_lane(int lane) { return (lane % MT) * kLdsStride + 8 * (lane / MT); }

  // The a_scale slot of the lane's output row in a fragment whose first row is row0: the lane's
  // results all lie in one row (OutMap), so one 4-byte read a fragment.
  static constexpr int sa_row(int row0, int lane) { return row0 + OutMap<MT>::out_row(lane); }
  // The a_scale slot thread tid writes (rows [0, BM) used; one slot per thread, no branch).
  static constexpr int sa_slot(int tid) { return tid; }
};


// ---------------------------------------------------------------------------------------------
// MFMA wrappers (wave-collective: every lane of the wave must call them).
template <int MT> struct Mfma;
template <> struct Mfma<16> {
  using acc_t = floatx4;
  static __device__ __forceinline__ acc_t run(long a, long b, acc_t c) {
    return __builtin_amdgcn_mfma_f32_16x16x32_fp8_fp8(a, b, c, 0, 0, 0);
  }
};
template <> struct Mfma<32> {
  using acc_t = floatx16;
  static __device__ __forceinline__ acc_t run(long a, long b, acc_t c) {
    return __builtin_amdgcn_mfma_f32_32x32x16_fp8_fp8(a, b, c, 0, 0, 0);
  }
};

// bf16 round-to-nearest-even on raw bits (NaN stays a quiet NaN, overflow rounds to inf).
__device__ __forceinline__ uint16_t f32_to_bf16(float f) {
  uint32_t u = __builtin_bit_cast(uint32_t, f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

// Four floats as bf16 to 4 consecutive elements of dst (8-byte aligned): one 8-byte store.
__device__ __forceinline__ void store_bf16x4(uint16_t* dst, float x, float y, float z, float w) {
  const uint64_t run = (uint64_t)f32_to_bf16(x) | ((uint64_t)f32_to_bf16(y) << 16) |
                       ((uint64_t)f32_to_bf16(z) << 32) | ((uint64_t)f32_to_bf16(w) << 48);
  __builtin_memcpy(dst, &run, 8);
}

// 4x4 byte transpose: out[i] byte j = in[j] byte i (v_perm_b32 / v_and_or after instcombine).
__device__ __forceinline__ void transpose4x4(uint32_t d0, uint32_t d1, uint32_t d2, uint32_t d3,
                                             uint32_t out[4]) {
  uint32_t t0 = (d0 & 0x00ff00ffu) | ((d1 << 8) & 0xff00ff00u);  // d0.0 d1.0 d0.2 d1.2
  uint32_t t1 = ((d0 >> 8) & 0x00ff00ffu) | (d1 & 0xff00ff00u);  // d0.1 d1.1 d0.3 d1.3
  uint32_t t2 = (d2 & 0x00ff00ffu) | ((d3 << 8) & 0xff00ff00u);  // d2.0 d3.0 d2.2 d3.2
  uint32_t t3 = ((d2 >> 8) & 0x00ff00ffu) | (d3 & 0xff00ff00u);  // d2.1 d3.1 d2.3 d3.3
  out[0] = (t0 & 0x0000ffffu) | (t2 << 16);
  out[1] = (t1 & 0x0000ffffu) | (t3 << 16);
  out[2] = (t0 >> 16) | (t2 & 0xffff0000u);
  out[3] = (t1 >> 16) | (t3 & 0xffff0000u);
}

// ---------------------------------------------------------------------------------------------
// Staging of one LDS stage (A rows [0, BM) then B rows [BM, BM+BN), 64 K each).
//
// Natural (K-contiguous rows): 16-byte chunks, 4 consecutive threads read one row's 64 bytes;
// 16 consecutive lanes cover 4 rows x 64 B (rows 8 apart in pairs, LdsMap), a wave 16 rows, always
// of one operand (BM % 16 == 0).
// Seed (row dimension contiguous, X is (K, E)): a wave stages "units" of 64 rows x 32 K. Lane l
// reads 8 K-rows (k = 8g + t) x 4 contiguous bytes (rows 4ch .. 4ch+3), with
//   g = (l >> 2) & 3,  ch = (l & 3) + 4 * (l >> 4),
// i.e. 16 lanes read 64 contiguous bytes of each K-row; after two 4x4 byte transposes the lane
// holds 4 rows x 8 K and writes them as 4 x 8-byte LDS stores at [4ch + i][8g]: within every 16
// lanes the bank pair is 8*(ch&3) + 2g (mod 32) (row stride 18 dwords): no conflicts.
// All operand / unit choices are wave-uniform (the wave index comes from readfirstlane), so the
// 64-bit bases are scalar and lanes add 32-bit offsets (vector path; see layout_aligned()).
template <class Cfg, int LAYOUT, bool VEC>
struct Stager {
  static constexpr int BM = Cfg::BM, BN = Cfg::BN;
  using Map = LdsMap<Cfg>;
  static constexpr int NREG = LAYOUT == kNatural ? Cfg::NAT_CHUNKS * 4 : Cfg::SEED_UNITS_PER_WAVE * 8;
  uint32_t r[NREG];

  // Seed unit `unit` (wave-uniform): which operand, its 64-row block mu and its 32-K block ku within the
  // stage. A's units come first, ordered by row block within each K block.
  struct SeedUnit {
    bool isA;
    int mu, ku;
  };
  __device__ __forceinline__ static SeedUnit seed_unit(int unit) {
    constexpr int UA = BM / 64 * (kStageK / 32);
    const bool isA = unit < UA;
    const int u = isA ? unit : unit - UA;
    const int mus = (isA ? BM : BN) / 64;
    return {isA, u % mus, u / mus};
  }

  // k0: first K of the stage. m0/n0: first row/column of the block tile.
  __device__ __forceinline__ void load(const Args& p, int m0, int n0, int k0, int tid, int wave) {
    const int lane = tid & 63;
    if constexpr (LAYOUT == kNatural) {
      const int K = p.K;
#pragma unroll
      for (int j = 0; j < Cfg::NAT_CHUNKS; ++j) {
        const int rbase = Map::nat_first_row(wave, j);  // wave-uniform
        const bool isA = rbase < BM;
        const int row = (isA ? rbase : rbase - BM) + Map::nat_lane_row(lane);  // row within the operand tile
        const int col = Map::nat_col(lane);
        const uint8_t* X = isA ? p.a : p.b;
        const int E = isA ? p.M : p.N;
        const int row0 = isA ? m0 : n0;
        const bool valid = row0 + row < E;
        u32x4 v = {0u, 0u, 0u, 0u};
        const uint8_t* base = X + (size_t)row0 * (size_t)K + (size_t)k0;
        if constexpr (VEC) {
          // Branch-free, no select: a row past the edge loads the clamped last row (in bounds),
          // whose copy in LDS only feeds MFMA outputs of rows/columns that are never stored. So
          // the loaded registers are used first by the LDS store a stage later: no early wait.
          // 256 * K < 2^32 (plan).
          const int rr = valid ? row : E - 1 - row0;
          v = *(const u32x4*)(base + (uint32_t)(rr * K + col));
        } else {
          // byte path, same rule: the clamped row, bytes assembled in registers, no branch
          const int rr = valid ? row : E - 1 - row0;
          const uint8_t* src = base + ((size_t)rr * (size_t)K + col);
          uint32_t w[4];
#pragma unroll
          for (int q = 0; q < 4; ++q)
            w[q] = (uint32_t)src[4 * q] | ((uint32_t)src[4 * q + 1] << 8) |
                   ((uint32_t)src[4 * q + 2] << 16) | ((uint32_t)src[4 * q + 3] << 24);
          v = u32x4{w[0], w[1], w[2], w[3]};
        }
        r[4 * j + 0] = v.x;
        r[4 * j + 1] = v.y;
        r[4 * j + 2] = v.z;
        r[4 * j + 3] = v.w;
      }
    } else {
      const int g = Map::seed_g(lane);
      const int ch = Map::seed_ch(lane);
#pragma unroll
      for (int j = 0; j < Cfg::SEED_UNITS_PER_WAVE; ++j) {
        const int unit = wave + j * Cfg::WAVES;  // wave-uniform
        if (unit >= Cfg::SEED_UNITS) break;
        const SeedUnit s = seed_unit(unit);
        const bool isA = s.isA;
        const int mu = s.mu, ku = s.ku;
        const uint8_t* X = isA ? p.a : p.b;
        const int E = isA ? p.M : p.N;
        const int urow = (isA ? m0 : n0) + mu * 64;
        const int grow = urow + 4 * ch;
#pragma unroll
        for (int t = 0; t < 8; ++t) {
          // K-row k0 + ku*32 + t (wave-uniform, SGPRs); the lane adds its own K-row offset 8g and
          // column. Every address formed is in bounds: no wrap-around offsets.
          const uint8_t* krow = X + ((size_t)k0 + ku * 32 + t) * (size_t)E;
          uint32_t w = 0;
          if constexpr (VEC) {
            // E % 4 == 0: the 4-byte group is wholly in or out. Branch-free, no select: a group
            // past the edge loads the clamped last group (in bounds, E >= 4); its LDS copy feeds
            // only outputs that are never stored. Offset < 25 * E < 2^32 (layout_aligned).
            const int col = grow < E ? grow : E - 4;
            w = *(const uint32_t*)(krow + (uint32_t)(8 * g * E + col));
          } else {
            const uint8_t* src = krow + ((size_t)(8 * g) * (size_t)E + grow);
#pragma unroll
            for (int i = 0; i < 4; ++i)
              if (grow + i < E) w |= (uint32_t)src[i] << (8 * i);
          }
          r[8 * j + t] = w;
        }
      }
    }
  }

  // lds: base of one stage buffer.
  __device__ __forceinline__ void store(uint8_t* lds, int tid, int wave) const {
    const int lane = tid & 63;
    if constexpr (LAYOUT == kNatural) {
#pragma unroll
      for (int j = 0; j < Cfg::NAT_CHUNKS; ++j) {
        // one 16-byte value (ds_write2_b64): as two 64-bit halves the compiler re-loaded the low
        // half with a second global load
        *(u32x4_a8*)(lds + Map::nat_store_off(wave, j, lane)) =
            u32x4_a8{r[4 * j + 0], r[4 * j + 1], r[4 * j + 2], r[4 * j + 3]};
      }
    } else {
#pragma unroll
      for (int j = 0; j < Cfg::SEED_UNITS_PER_WAVE; ++j) {
        const int unit = wave + j * Cfg::WAVES;
        if (unit >= Cfg::SEED_UNITS) break;
        const SeedUnit s = seed_unit(unit);
        uint32_t lo[4], hi[4];
        transpose4x4(r[8 * j + 0], r[8 * j + 1], r[8 * j + 2], r[8 * j + 3], lo);
        transpose4x4(r[8 * j + 4], r[8 * j + 5], r[8 * j + 6], r[8 * j + 7], hi);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          uint64_t* dst = (uint64_t*)(lds + Map::seed_store_off(s.isA, s.mu, s.ku, i, lane));
          *dst = (uint64_t)lo[i] | ((uint64_t)hi[i] << 32);
        }
      }
    }
  }
};

// Map a linear workgroup id to (tile_m, tile_n): XCD-aware remap (the dispatcher deals
// consecutive workgroups round-robin over the 8 XCDs; give each XCD a contiguous run of tiles so
// neighbours share its L2), then group 8 tile-rows so a run of tiles re-reads the same B columns.
__device__ __forceinline__ void tile_coords(int pid, int tiles_m, int tiles_n, int& tm, int& tn) {
  const int total = tiles_m * tiles_n;
  if (total % 8 == 0) pid = (pid % 8) * (total / 8) + pid / 8;
  const int group = 8;
  const int per_group = group * tiles_n;
  const int first_m = (pid / per_group) * group;
  const int gsz = (tiles_m - first_m) < group ? (tiles_m - first_m) : group;
  const int in_group = pid % per_group;
  tm = first_m + in_group % gsz;
  tn = in_group / gsz;
}

// ---------------------------------------------------------------------------------------------
// The GEMM kernel. grid = (Plan::grid_x, splits, Plan::grid_z) covering tiles_m * tiles_n, block = Cfg::THREADS.
template <class Cfg, int LAYOUT, bool VEC>
__global__ __launch_bounds__(Cfg::THREADS, Cfg::WAVES_PER_EU) void gemm_kernel(Args p) {
  using M = Mfma<Cfg::MT>;
  using acc_t = typename M::acc_t;
  constexpr int BM = Cfg::BM, BN = Cfg::BN, MT = Cfg::MT;

  __shared__ uint64_t lds_tiles[2 * Cfg::LDS_STAGE_BYTES / 8];  // 2 x (sA[BM][72], sB[BN][72])
  // a_scale per K-block parity; one slot per thread (rows [0, BM) used) so that every thread
  // writes its own slot without a branch
  __shared__ float lds_sa[2][Cfg::THREADS];

  uint8_t* const stage_buf0 = (uint8_t*)lds_tiles;
  uint8_t* const stage_buf1 = stage_buf0 + Cfg::LDS_STAGE_BYTES;

  const int tid = threadIdx.x;
  const int lane = tid & 63;
  const int wave = __builtin_amdgcn_readfirstlane(tid >> 6);  // wave-uniform (SGPR)
  const int wm0 = Cfg::wave_m0(wave);
  const int wn0 = Cfg::wave_n0(wave);

  // Block z * gridDim.x + x (Plan::grid_z > 1 only past HIP's per-dimension limit): the last row's blocks
  // past the last tile leave here, the whole block at once, before any barrier.
  const int pid = (int)(blockIdx.z * gridDim.x + blockIdx.x);
  if (pid >= p.tiles_m * p.tiles_n) return;
  int tm, tn;
  tile_coords(pid, p.tiles_m, p.tiles_n, tm, tn);
  const int m0 = tm * BM, n0 = tn * BN;
  const int M_ = p.M, N_ = p.N;
  const int KB = p.K / kBK;
  const int NB = (N_ + 127) / 128;
  const int nb = n0 / 128;
  const int kb0 = blockIdx.y * p.kb_per_split;
  const int kb1 = (kb0 + p.kb_per_split) < KB ? (kb0 + p.kb_per_split) : KB;
  const int s_end = 2 * kb1;  // stages [2*kb0, 2*kb1)

  // Branch-free and select-free: a thread past the tile or past M loads the clamped last row (in
  // bounds); it scales only rows that are never stored (or an unused slot).
  auto load_sa = [&](int kb) -> float {
    const int row = (tid < BM && m0 + tid < M_) ? m0 + tid : M_ - 1;
    return LAYOUT == kSeed ? p.sa[(size_t)kb * M_ + row] : p.sa[(size_t)row * KB + kb];
  };
  auto load_sb = [&](int kb) -> float {
    return LAYOUT == kSeed ? p.sb[(size_t)kb * NB + nb] : p.sb[(size_t)nb * KB + kb];
  };

  Stager<Cfg, LAYOUT, VEC> st;
  // Prologue: stage 2*kb0 -> buffer 0 with its a_scale; stage 2*kb0+1 -> registers.
  st.load(p, m0, n0, kb0 * kBK, tid, wave);
  float sa_next = load_sa(kb0);
  st.store(stage_buf0, tid, wave);
  lds_sa[0][LdsMap<Cfg>::sa_slot(tid)] = sa_next;
  st.load(p, m0, n0, kb0 * kBK + kStageK, tid, wave);
  __syncthreads();

  acc_t acc[Cfg::FM][Cfg::FN];
#pragma unroll
  for (int i = 0; i < Cfg::FM; ++i)
#pragma unroll
    for (int j = 0; j < Cfg::FN; ++j) acc[i][j] = acc_t{};

  using Map = LdsMap<Cfg>;
  const int lane_off = Map::operand_lane(lane);

  for (int kb = kb0; kb < kb1; ++kb) {
    const int par = (kb - kb0) & 1;
    acc_t tmp[Cfg::FM][Cfg::FN];
#pragma unroll
    for (int i = 0; i < Cfg::FM; ++i)
#pragma unroll
      for (int j = 0; j < Cfg::FN; ++j) tmp[i][j] = acc_t{};
    float sb_cur = 0.0f;

#pragma unroll
    for (int h = 0; h < 2; ++h) {  // the two stages of this K-block; stage s uses buffer h
      const int s = 2 * kb + h;
      uint8_t* const cur = h == 0 ? stage_buf0 : stage_buf1;
      uint8_t* const nxt = h == 0 ? stage_buf1 : stage_buf0;
      if (h == 1) sb_cur = load_sb(kb);

      // This stage's MFMA operands.
      constexpr int KS = kStageK / Cfg::KI;
      long av[KS][Cfg::FM], bv[KS][Cfg::FN];
#pragma unroll
      for (int ks = 0; ks < KS; ++ks) {
#pragma unroll
        for (int i = 0; i < Cfg::FM; ++i)
          av[ks][i] = *(const long*)(cur + Map::operand_base(wm0 + i * MT, ks) + lane_off);
#pragma unroll
        for (int j = 0; j < Cfg::FN; ++j) bv[ks][j] = *(const long*)(cur + Map::operand_base(BM + wn0 + j * MT, ks) + lane_off);
      }
      // Registers (stage s+1) -> the other buffer, free since the last barrier. Unconditional, so
      // that it shares a scheduling region with the MFMAs: after the last stage it rewrites the last
      // loaded stage into a buffer nobody reads again.
      st.store(nxt, tid, wave);
      // Global loads of stage s+2, in flight during the next stage; clamped to the last stage
      // (in bounds, unused) so that there is no branch either.
      st.load(p, m0, n0, (s + 2 < s_end ? s + 2 : s_end - 1) * kStageK, tid, wave);
      if (h == 0) sa_next = load_sa(kb + 1 < kb1 ? kb + 1 : kb1 - 1);

#pragma unroll
      for (int ks = 0; ks < KS; ++ks)
#pragma unroll
        for (int i = 0; i < Cfg::FM; ++i)
#pragma unroll
          for (int j = 0; j < Cfg::FN; ++j) tmp[i][j] = M::run(bv[ks][j], av[ks][i], tmp[i][j]);  // C^T (OutMap)

      // Schedule: the operand reads first, then each MFMA followed by one LDS write and one global
      // load of the staging, so those issue in the shadow of the matrix pipe (hints only).
      __builtin_amdgcn_sched_group_barrier(0x100, KS * (Cfg::FM + Cfg::FN), 0);  // DS reads
#pragma unroll
      for (int q = 0; q < KS * Cfg::FM * Cfg::FN; ++q) {
        __builtin_amdgcn_sched_group_barrier(0x008, 1, 0);  // MFMA
        __builtin_amdgcn_sched_group_barrier(0x200, 1, 0);  // DS write
        __builtin_amdgcn_sched_group_barrier(0x020, 1, 0);  // VMEM read
      }

      if (h == 1) {
        // Scale product on this K-block's fp32 partial sums: a lane's results in fragment row i are
        // all in one output row (OutMap), so one scale a fragment row.
#pragma unroll
        for (int i = 0; i < Cfg::FM; ++i) {
          const float sc = lds_sa[par][Map::sa_row(wm0 + i * MT, lane)] * sb_cur;
#pragma unroll
          for (int j = 0; j < Cfg::FN; ++j) acc[i][j] = tmp[i][j] * sc + acc[i][j];
        }
        // the next K-block's a_scale (read two stages from now, after two barriers)
        lds_sa[par ^ 1][Map::sa_slot(tid)] = sa_next;
      }
      __syncthreads();  // stage s consumed by every wave; stage s+1 written
    }
  }

  // Epilogue: bf16 straight to C, or fp32 partials to this split's slice of the workspace. Two
  // separate paths (not one pointer selected against nullptr) so that both stay global stores.
  // A lane holds runs of 4 consecutive columns of one row (OutMap). Where N % 4 == 0 and the base is
  // aligned, a run is wholly in or out of the matrix: one 8-byte (bf16) or 16-byte (fp32) store a
  // run. Otherwise one element at a time. The test is the same for every block: c is one base, and
  // the split's slice starts M * N floats after the last, a multiple of 4 when N % 4 == 0.
  using Out = OutMap<MT>;
  auto store_tile = [&](auto&& put) {
#pragma unroll
    for (int i = 0; i < Cfg::FM; ++i) {
      const int row = m0 + wm0 + i * MT + Out::out_row(lane);
#pragma unroll
      for (int j = 0; j < Cfg::FN; ++j) {
#pragma unroll
        for (int e = 0; e < Cfg::NACC; e += 4) {
          const int col = n0 + wn0 + j * MT + Out::out_col(e, lane);
          put(row, col, (size_t)row * N_ + col, acc[i][j], e);
        }
      }
    }
  };
  if (p.ws) {
    float* const wsz = p.ws + (size_t)blockIdx.y * ((size_t)M_ * (size_t)N_);
    if (N_ % 4 == 0 && (uintptr_t)wsz % 16 == 0) {
      store_tile([&](int row, int col, size_t off, const acc_t& v, int e) {
        if (row < M_ && col < N_) *(floatx4*)(wsz + off) = floatx4{v[e], v[e + 1], v[e + 2], v[e + 3]};
      });
    } else {
      store_tile([&](int row, int col, size_t off, const acc_t& v, int e) {
#pragma unroll
        for (int q = 0; q < 4; ++q)
          if (row < M_ && col + q < N_) wsz[off + q] = v[e + q];
      });
    }
  } else {
    uint16_t* const c = p.c;
    if (N_ % 4 == 0 && (uintptr_t)c % 8 == 0) {
      store_tile([&](int row, int col, size_t off, const acc_t& v, int e) {
        if (row < M_ && col < N_) store_bf16x4(c + off, v[e], v[e + 1], v[e + 2], v[e + 3]);  // aligned (above)
      });
    } else {
      store_tile([&](int row, int col, size_t off, const acc_t& v, int e) {
#pragma unroll
        for (int q = 0; q < 4; ++q)
          if (row < M_ && col + q < N_) c[off + q] = f32_to_bf16(v[e + q]);
      });
    }
  }
}

// Split-K reduce: c = bf16(sum over splits of the fp32 partials), fixed order (deterministic).
// V = 4: a thread sums 4 consecutive elements (16-byte loads, one 8-byte store); needs M*N % 4 == 0
// and an 8-byte aligned c (the workspace comes from the caching allocator: aligned).
template <int V>
__global__ __launch_bounds__(256) void splitk_reduce_kernel(ReduceArgs r) {
  const long long stride = (long long)gridDim.x * 256 * V;
  for (long long i = ((long long)blockIdx.x * 256 + threadIdx.x) * V; i < r.mn; i += stride) {
    if constexpr (V == 4) {
      floatx4 s = {0.0f, 0.0f, 0.0f, 0.0f};
      for (int z = 0; z < r.splits; ++z)
        s += *(const floatx4*)(r.ws + (size_t)z * (size_t)r.mn + (size_t)i);
      store_bf16x4(r.c + i, s.x, s.y, s.z, s.w);
    } else {
      float s = 0.0f;
      for (int z = 0; z < r.splits; ++z) s += r.ws[(size_t)z * (size_t)r.mn + (size_t)i];
      r.c[i] = f32_to_bf16(s);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Host side: problem description, kernel choice, launch through a caller-supplied launcher.
//   launch(kernel_function_pointer, dim3 grid, dim3 block, args_struct)
// The torch launcher passes a lambda doing kernel<<<grid, block, 0, stream>>>(args); the emulator
// tests pass one calling emu::launch. Both therefore run exactly this dispatch.
struct Problem {
  int layout;  // kSeed or kNatural
  const void* a;
  const void* b;
  const float* sa;
  const float* sb;
  void* c;  // bf16 (M,N)
  int M, N, K;
};

template <int C, int L, bool V>
struct KernelOf {
  static constexpr auto ptr = &gemm_kernel<typename CfgOf<C>::type, L, V>;
};

template <int C, class Launch>
inline void launch_config(const Args& args, const Plan& plan, int layout, Launch&& launch) {
  using Cfg = typename CfgOf<C>::type;
  const dim3 grid((unsigned)plan.grid_x, (unsigned)plan.splits, (unsigned)plan.grid_z);
  const dim3 block((unsigned)Cfg::THREADS, 1u, 1u);
  if (layout == kSeed) {
    if (plan.vec)
      launch(KernelOf<C, kSeed, true>::ptr, grid, block, args);
    else
      launch(KernelOf<C, kSeed, false>::ptr, grid, block, args);
  } else {
    if (plan.vec)
      launch(KernelOf<C, kNatural, true>::ptr, grid, block, args);
    else
      launch(KernelOf<C, kNatural, false>::ptr, grid, block, args);
  }
}

// Plan for a problem: aligned-ness is read from the real pointers.
inline Plan plan_problem(const Problem& pr, int force_config = -1, int force_splits = 0) {
  const bool aligned =
      layout_aligned(pr.layout, pr.M, pr.N, pr.K, (uintptr_t)pr.a, (uintptr_t)pr.b);
  return make_plan(pr.M, pr.N, pr.K, pr.layout, aligned, force_config, force_splits);
}

// Run a planned GEMM (a Plan from make_plan / plan_problem for this problem's M, N, K and layout).
// `workspace` must hold plan.workspace_bytes floats' worth of bytes (ignored when splits == 1).
template <class Launch>
inline void run_gemm(const Problem& pr, const Plan& plan, float* workspace, Launch&& launch) {
  Args args;
  args.a = (const uint8_t*)pr.a;
  args.b = (const uint8_t*)pr.b;
  args.sa = pr.sa;
  args.sb = pr.sb;
  args.c = (uint16_t*)pr.c;
  args.ws = plan.splits > 1 ? workspace : nullptr;
  args.M = pr.M;
  args.N = pr.N;
  args.K = pr.K;
  args.tiles_m = plan.tiles_m;
  args.tiles_n = plan.tiles_n;
  args.kb_per_split = plan.kb_per_split;
  switch (plan.config) {
    case 0: launch_config<0>(args, plan, pr.layout, launch); break;
    case 1: launch_config<1>(args, plan, pr.layout, launch); break;
    default: launch_config<2>(args, plan, pr.layout, launch); break;
  }
  if (plan.splits > 1) {
    ReduceArgs r;
    r.ws = workspace;
    r.c = (uint16_t*)pr.c;
    r.mn = (long long)pr.M * pr.N;
    r.splits = plan.splits;
    const bool vec4 = r.mn % 4 == 0 && (uintptr_t)pr.c % 8 == 0 && (uintptr_t)workspace % 16 == 0;
    const int per_thread = vec4 ? 4 : 1;
    long long blocks = (r.mn / per_thread + 255) / 256;
    if (blocks > 8LL * kNumCUs) blocks = 8LL * kNumCUs;
    const dim3 grid((unsigned)blocks, 1u, 1u), block(256u, 1u, 1u);
    if (vec4)
      launch(&splitk_reduce_kernel<4>, grid, block, r);
    else
      launch(&splitk_reduce_kernel<1>, grid, block, r);
  }
}

// Every kernel the dispatch above can launch, for tools that want to list/instantiate them all.
template <class Visit>
inline void for_each_kernel(Visit&& visit) {
  visit("gemm_kernel<t256x128,seed,vec>", KernelOf<0, kSeed, true>::ptr);
  visit("gemm_kernel<t256x128,seed,bytes>", KernelOf<0, kSeed, false>::ptr);
  visit("gemm_kernel<t256x128,natural,vec>", KernelOf<0, kNatural, true>::ptr);
  visit("gemm_kernel<t256x128,natural,bytes>", KernelOf<0, kNatural, false>::ptr);
  visit("gemm_kernel<t128x128,seed,vec>", KernelOf<1, kSeed, true>::ptr);
  visit("gemm_kernel<t128x128,seed,bytes>", KernelOf<1, kSeed, false>::ptr);
  visit("gemm_kernel<t128x128,natural,vec>", KernelOf<1, kNatural, true>::ptr);
  visit("gemm_kernel<t128x128,natural,bytes>", KernelOf<1, kNatural, false>::ptr);
  visit("gemm_kernel<t64x64,seed,vec>", KernelOf<2, kSeed, true>::ptr);
  visit("gemm_kernel<t64x64,seed,bytes>", KernelOf<2, kSeed, false>::ptr);
  visit("gemm_kernel<t64x64,natural,vec>", KernelOf<2, kNatural, true>::ptr);
  visit("gemm_kernel<t64x64,natural,bytes>", KernelOf<2, kNatural, false>::ptr);
  visit("splitk_reduce_kernel<4>", &splitk_reduce_kernel<4>);
  visit("splitk_reduce_kernel<1>", &splitk_reduce_kernel<1>);
}

}  // namespace gemm_rocm
