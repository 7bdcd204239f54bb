// A hand-written sm_90a FP8 block-scaled GEMM (configurations 6, 7, 8 and 10, see gemm_cuda_kernels.h), for
// the tile shapes CUTLASS 4.2's blockwise collective cannot build: 128 x 192 output tiles (its builder
// wants the N tile to equal the 128-wide B-scale block), 192 x 128 ones (three consumer warpgroups) and
// 192 x 144 ones (three, for one full wave where 192 x 128 makes 1.2: 6144x576x7168, run 94), beside a
// plain 128 x 128 one (pick_tuning takes it for K <= 512 with a wave of tiles, runs 34-36, with a split
// tail where 3 K pieces per tile fill the SMs and 4 K slices would not, runs 45-48, and for N % 8 != 0 where
// the rules would take CUTLASS's configurations, runs 154-156).
//
// Structure (one CTA per SM, persistent, 1 + C warpgroups, C = 2 or 3 consumers):
//   warpgroup 0    producer: one thread streams 64C x 128 (x) and BN x 128 (w) FP8 tiles of each K block
//                  into a ring of shared-memory stages with TMA (128-byte swizzle), mbarrier-tracked;
//                  its warp's 32 lanes copy the K block's 64C x_scale values and 2 w_scale values
//                  into the same stage with 4-byte cp.async, tracked by the same barrier;
//   warpgroups 1-C consumers: 64 rows each; per K block 4 wgmma m64nBNk32 into a fresh fp32
//                  accumulator, then the promotion `out += acc * x_scale[row] * w_scale[col block]` in
//                  fp32 registers (the contract's per-block scaling, the same arithmetic as CUTLASS's
//                  and cuBLASLt's blockwise kernels), the scales read from shared memory, then the
//                  stage goes back to the producer;
//                  epilogue: bf16 into 128-byte-swizzled shared memory, TMA store (clipped at M, N),
//                  the columns past the last whole 64-column box (16 of BN = 144) straight from
//                  registers; where TMA cannot store the output (N % 8 != 0, a base off 16 bytes), plain
//                  stores from that shared memory (store_block);
//                  from K = 2048 on, issued while the next unit's first batch runs (overlap_store).
// Seed layout (GemmArgs::seed_a, configurations 6-8): x is the seed's a (K, M), read as it is. The producer
// loads the tile's raw boxes of 128 K rows (one 128 M bytes wide, 128-byte swizzle, for two consumer
// warpgroups; one 64 wide, 64-byte swizzle, per warpgroup for three) and the K block's a_scale row; each
// consumer warp builds its wgmma A fragments from its 16 M bytes of them in registers (load_seed_a:
// transposing ldmatrix and prmt), and wgmma reads A from them (m64nBNk32 ..._RS). The fragment rows come
// paired, so the accumulator's rows are too (store_block<.., true>).
// Split tail (GemmArgs::splits > 1): the tiles past the last full wave are cut into K pieces, one per CTA;
// each piece's fp32 block goes to the workspace and the last piece to arrive sums them (split_fixup).
// A 192- or 144-wide N tile straddles two 128-wide w_scale blocks; which columns take which scale depends
// only on n0 % 128 (0 or 64 for BN = 192, a multiple of 16 for BN = 144), so the promotion is compiled for
// each split and picked per tile (promote_cols).
//
// The fragment layout of a wgmma m64nNk32 fp32 accumulator (PTX ISA, "Register fragments"): thread t of
// the warpgroup holds, for j < N/8, d[4j + 2h + e] = D[16 (t/32) + (t%32)/4 + 8h][8j + 2 (t%4) + e].

// wgmma m64n144k32 (the 192x144 tiles) is one of cute's "extended" shapes, which cute declares only under
// this macro (set here alone: no other translation unit instantiates them).
#define CUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED 1

#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <type_traits>

#include "gemm_cuda_kernels.h"
#include "gemm_cuda_sm90.cuh"

namespace gemm_cuda {
namespace {
using namespace sm90;

// One 64-row x 64-column bf16 output box in shared memory (128-byte rows).
constexpr int kOutChunk = 64 * 128;
// wgmma_gemm_kernel<.., kSeedA>: the width in M bytes of the raw A boxes, each 128 K rows: one box of 128
// for two consumer warpgroups, one of 64 per warpgroup for three. (Boxes of 64 for two made the 128x192
// kernel 2-7 % slower: run 131.)
template <int kConsumers>
constexpr int seed_box_width() {
  return kConsumers == 2 ? 128 : 64;
}

// The seed-A kernel's timing-only probes (GemmArgs::seed_probe, builds with GEMM_SEED_A_EXPERIMENT only):
// each leaves out part of what reading a as it is adds to the natural kernel's K block, to find which part
// costs the 1.11-1.2x (runs 130-132). Wrong results by design; the sweep times them on natural-layout calls,
// x's bytes read as if they were a (K, M) (tests/cuda/config_sweep.py, knob q).
enum SeedProbe : int {
  kProbeNone = 0,     // the kernel as shipped
  kProbeShipped = 1,  // the same kernel, on a natural call's bytes (no probe kernel: GemmArgs::seed_a alone)
  kProbeNoLoads = 2,  // RS wgmma on fragments built once per CTA: no ldmatrix / prmt per K block
  kProbeLoadsSs = 3,  // the fragments built every K block and kept, but wgmma reads A from the raw box (SS)
  kProbeSsOnly = 4,   // neither: SS wgmma on the raw box (the seed layout's TMA boxes and scale copies alone)
  // The staged form's work: the fragments built every K block, written back K-major (one stmatrix per 32-deep
  // step), proxy fence, warpgroup barrier, SS wgmma on them. Written over the stage's raw box while other
  // warps still read it (a real staged kernel needs a buffer of its own: 8 KB a warpgroup).
  kProbeStaged = 5,
};

// An M tile of 64 rows per consumer warpgroup (each issues m64 wgmma), BN columns. kStaged: the seed-A
// kernel's staged form (wgmma_seed_staged_kernel) also holds each consumer warpgroup's A tile, K-major,
// 64 rows x 128 K bytes, and assumes the dynamic shared memory starts 1024-aligned (checked: __trap) instead
// of keeping 1024 bytes of slack, so that 128x192 tiles keep their 4 stages.
template <int BN, int kConsumers, bool kStaged = false>
struct Layout {
  static_assert(BN % 16 == 0 && BN >= 64 && BN <= 192, "N tile: a multiple of 16 from 64 to 192");
  // Tiles start at multiples of BN, so at an offset into a w_scale block up to 128 - gcd(BN, 128): the
  // promotion and the producer's two w_scale copies handle a tile that touches at most two blocks (BN = 176
  // would touch three at offset 112).
  static_assert(128 - std::gcd(BN, 128) + BN <= 256, "N tile: every tile must lie within two w_scale blocks");
  static_assert(kConsumers == 2 || (kConsumers == 3 && BN <= 144),
                "3 consumer warpgroups get 160 registers each: room for 72 + 72 accumulators, not 96 + 96");
  static constexpr int kBlockM = 64 * kConsumers;
  static constexpr int kThreads = 128 * (1 + kConsumers);
  // setmaxnreg: the producer gives registers to the consumers. Only the CTA's own allocation moves (what
  // __launch_bounds__(kThreads, 1) gives each thread, times kThreads: 64512 for 384 threads, not the SM's
  // 65536): consumers asking for more than the producer released wait forever.
  // The producer warp's loop (TMA issue, scale copies) needs 48 / 32 without spilling; the consumers get the rest.
  static constexpr int kLaunchRegs = 65536 / kThreads / 8 * 8;
  static constexpr int kProducerRegs = kConsumers == 2 ? 48 : 32;
  static constexpr int kConsumerRegs = (kLaunchRegs * kThreads / 128 - kProducerRegs) / kConsumers / 8 * 8;
  static_assert(128 * (kProducerRegs + kConsumers * kConsumerRegs) <= kLaunchRegs * kThreads, "register file");
  static constexpr int kBytesA = kBlockM * kBlockK;  // per stage
  static constexpr int kBytesB = BN * kBlockK;
  // Every consumer warpgroup's block, in whole 64-column boxes (columns past the last one, BN % 64 of them,
  // are stored straight from registers: store_block).
  static constexpr int kBytesOut = kConsumers * (BN / 64) * kOutChunk;
  // A stage's scales: the K block's x_scale of the tile's kBlockM rows, then (from float kBlockM on) its two
  // w_scale blocks (the second unused when BN = 128), padded to 16 bytes.
  static constexpr int kBytesScale = (kBlockM + 4) * 4;
  static constexpr int kBytesStaged = kStaged ? kConsumers * 64 * kBlockK : 0;
  static constexpr int kSlack = kStaged ? 0 : 1024;  // to align the base to 1024
  static constexpr int kStages =
      (kSmemPerBlock - kSlack - 256 - kBytesOut - kBytesStaged) / (kBytesA + kBytesB + kBytesScale);
  static constexpr int kOffB = kStages * kBytesA;
  static constexpr int kOffOut = kOffB + kStages * kBytesB;
  static constexpr int kOffStaged = kOffOut + kBytesOut;
  static constexpr int kOffScale = kOffStaged + kBytesStaged;
  static constexpr int kOffBar = kOffScale + kStages * kBytesScale;
  static constexpr int kSmem = kSlack + kOffBar + 2 * kStages * 8;
  static_assert(kSmem <= kSmemPerBlock, "shared memory");
  static_assert(kStages >= 3, "pipeline depth");
};

// ---------------------------------------------------------------------------------------------
// The promotion (sm_90a; the PTX wrappers and the wgmma batch are in gemm_cuda_sm90.cuh)
// ---------------------------------------------------------------------------------------------
#ifdef GEMM_WGMMA_DEVICE
// out += acc * scale (kFirst: out = 0 + acc * scale, a unit's first K block): the scale of row h (0: row r,
// 1: row r + 8) and of the column's w_scale block (8-column groups j < JB of the tile are in its first block).
template <int NJ, int JB, bool kFirst>
__device__ __forceinline__ void promote(float *out, float const *acc, float s00, float s01, float s10, float s11) {
#pragma unroll
  for (int j = 0; j < NJ; ++j) {
    float const r0 = j < JB ? s00 : s01;
    float const r1 = j < JB ? s10 : s11;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      out[4 * j + e] = fmaf(acc[4 * j + e], e < 2 ? r0 : r1, kFirst ? 0.f : out[4 * j + e]);
    }
  }
}

// The same for a BN-wide tile starting at column n0 whose first w_scale block covers its 8-column groups
// j < jb = 16 - offset / 8 (offset = n0 % 128). Tiles start at multiples of BN, so offset is a multiple of
// gcd(BN, 128): the promotion is compiled for each jb that allows (16 and 8 for BN = 192, 16, 14, .., 2 for
// BN = 144, 16 alone for BN = 128) and picked per K block by warp-uniform branches.
template <int BN, bool kFirst, int JB>
__device__ __forceinline__ void promote_offset(int offset, float *out, float const *acc, float a0, float a1,
                                               float b0, float b1) {
  constexpr int kStep = std::gcd(BN, 128) / 8;
  if constexpr (JB > kStep) {
    if (offset != 8 * (16 - JB)) {
      promote_offset<BN, kFirst, JB - kStep>(offset, out, acc, a0, a1, b0, b1);
      return;
    }
  }
  promote<BN / 8, JB, kFirst>(out, acc, a0 * b0, a0 * b1, a1 * b0, a1 * b1);
}

// The promotion of a tile with that offset; `unaligned` = offset != 0, computed once per tile. Two splits
// (BN = 192) take one if / else on it: the code runs 96-98 measured for 128x192 tiles, which the offset chain
// compiled differently (1.5-3 % slower).
template <int BN, bool kFirst>
__device__ __forceinline__ void promote_cols(bool unaligned, int offset, float *out, float const *acc, float a0,
                                             float a1, float b0, float b1) {
  if constexpr (std::gcd(BN, 128) == 64) {
    if (unaligned) {
      promote<BN / 8, 8, kFirst>(out, acc, a0 * b0, a0 * b1, a1 * b0, a1 * b1);
    } else {
      promote<BN / 8, 16, kFirst>(out, acc, a0 * b0, a0 * b1, a1 * b0, a1 * b1);
    }
  } else {
    promote_offset<BN, kFirst, 16>(offset, out, acc, a0, a1, b0, b1);
  }
}

// A piece of a split tile: this warpgroup's fp32 block `out` (NR registers per thread) goes to its slot
// of `partials` (slots of 128 x NR floats, stored in register order so that each warp writes 512
// contiguous bytes per float4), then is counted on the warpgroup's counter. The warpgroup whose piece
// arrives last sums every piece's slot, its own included, into `out` in piece order (so the bits do not
// depend on which arrives last) and returns true: it writes the tile. The others return false. Nothing
// waits for another CTA: no CTA depends on one that may not be resident yet.
template <int NR>
__device__ __forceinline__ bool split_fixup(float *out, float *partials, unsigned *counter, int piece, int pieces,
                                            int64_t slot_stride, int barrier, int t128) {
  float4 *const mine = reinterpret_cast<float4 *>(partials + piece * slot_stride) + t128;
#pragma unroll
  for (int q = 0; q < NR / 4; ++q) {
    __stcg(mine + 128 * q, make_float4(out[4 * q], out[4 * q + 1], out[4 * q + 2], out[4 * q + 3]));
  }
  __threadfence();  // the block is visible device-wide before it is counted
  named_sync(barrier);
  bool last = false;
  if (t128 == 0) last = atomicAdd(counter, 1u) == static_cast<unsigned>(pieces - 1);
  // Broadcast from lane 0 although every lane has the same answer: ptxas then knows the branch is
  // warp-uniform, and the consumer loop keeps its descriptors in uniform registers (without it, 12-20 %
  // slower on every shape: run 45).
  if (!__shfl_sync(0xffffffffu, named_sync_or(barrier, last), 0)) return false;
  __threadfence();  // and every other piece's block is visible here
#pragma unroll
  for (int i = 0; i < NR; ++i) out[i] = 0.f;
  for (int j = 0; j < pieces; ++j) {
    float4 const *const block = reinterpret_cast<float4 const *>(partials + j * slot_stride) + t128;
#pragma unroll
    for (int q = 0; q < NR / 4; ++q) {
      float4 const v = __ldcg(block + 128 * q);
      out[4 * q] += v.x, out[4 * q + 1] += v.y, out[4 * q + 2] += v.z, out[4 * q + 3] += v.w;
    }
  }
  return true;
}

// Two bf16 outputs at p and p + 1 (the second only where `both`): one 4-byte store where p is 4-byte aligned,
// else two 2-byte ones (rows of an output whose row stride is odd start at odd element offsets).
__device__ __forceinline__ void store_pair(__nv_bfloat16 *p, __nv_bfloat162 v, bool both) {
  if (both && (reinterpret_cast<uintptr_t>(p) & 3) == 0) {
    *reinterpret_cast<__nv_bfloat162 *>(p) = v;
  } else {
    p[0] = v.x;
    if (both) p[1] = v.y;
  }
}

// Epilogue: a consumer warpgroup's 64 x BN bf16 block `out` at (row, col) of the output (d, row stride ldd),
// through its 128-byte-swizzled shared-memory boxes of 64 columns at out_base, then TMA stores (clipped at
// M, N). Columns past the last whole box (16 of BN = 144) go straight to global memory: 4 lanes write a
// row's 16 contiguous bytes of each 8-column group, clipped at M and N.
// plain (Schedule::plain_store): the output's rows are not 16-byte strided and based (N % 8 != 0, or a view
// off a 16-byte boundary), which TMA needs, so each warp copies 16 of the boxes' rows to global memory
// itself, a row of 64 columns per instruction (each lane 2 columns, clipped at M and N): no padded scratch
// and no copy after the kernel.
// kPairedRows: the accumulator rows of the kernels that build their A fragments with a transposing ldmatrix
// (load_seed_a: the fused seed kernel, wgmma_gemm_kernel<.., kSeedA>), where the fragment's rows r and r + 8
// of each warp's 16 hold the block's rows 2 (r % 8) and 2 (r % 8) + 1.
template <int BN, bool kPairedRows = false>
__device__ __forceinline__ void store_block(float const *out, uint32_t out_base, CUtensorMap const *map_d,
                                            __nv_bfloat16 *d, int64_t ldd, int row, int col, int M, int N,
                                            int barrier, int t128, bool plain) {
  constexpr int kBoxed = BN / 64 * 8;  // 8-column groups stored through shared memory
  static_assert(!kPairedRows || kBoxed == BN / 8, "paired rows: whole 64-column boxes only");
  if (t128 == 0) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");  // last block's store read
  named_sync(barrier);
  int const lane = t128 % 32;
  int const r = 16 * (t128 / 32) + lane / 4;  // row within the block (and r + 8)
#pragma unroll
  for (int j = 0; j < kBoxed; ++j) {
    uint32_t const chunk = out_base + (j / 8) * kOutChunk;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      int const rr = kPairedRows ? 16 * (t128 / 32) + 2 * (lane / 4) + h : r + 8 * h;
      __nv_bfloat162 const v = __floats2bfloat162_rn(out[4 * j + 2 * h], out[4 * j + 2 * h + 1]);
      uint32_t const addr = chunk + rr * 128 + (((j % 8) ^ (rr % 8)) << 4) + 4 * (lane % 4);
      asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(*reinterpret_cast<uint32_t const *>(&v)));
    }
  }
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // make the writes visible to TMA
  named_sync(barrier);
  if (plain) {
    // Warp w copies rows 16 w .. 16 w + 15 of each box; lane l reads the 4 bytes of columns 2 l, 2 l + 1
    // (the 32 lanes read a whole 128-byte row: every bank once). The next store_block's shared-memory
    // writes come after its first named_sync, which every thread reaches only after these reads.
    int const warp = t128 / 32;
#pragma unroll 1
    for (int c = 0; c < BN / 64; ++c) {
      int const cc = col + 64 * c + 2 * lane;
#pragma unroll 1
      for (int i = 0; i < 16; ++i) {
        int const rr = 16 * warp + i;
        if (row + rr >= M) break;
        uint32_t word;
        asm volatile("ld.shared.b32 %0, [%1];"
                     : "=r"(word)
                     : "r"(out_base + c * kOutChunk + rr * 128 + (((lane / 4) ^ (rr % 8)) << 4) + 4 * (lane % 4)));
        if (cc < N) store_pair(d + (row + rr) * ldd + cc, *reinterpret_cast<__nv_bfloat162 *>(&word), cc + 1 < N);
      }
    }
  } else if (t128 == 0 && row < M) {
#pragma unroll
    for (int c = 0; c < BN / 64; ++c) {
      if (col + 64 * c < N) tma_store(map_d, out_base + c * kOutChunk, col + 64 * c, row);
    }
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
  }
  if constexpr (kBoxed < BN / 8) {  // the columns past the boxes, straight from registers
#pragma unroll
    for (int j = kBoxed; j < BN / 8; ++j) {
      int const cc = col + 8 * j + 2 * (lane % 4);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        int const rr = row + r + 8 * h;
        if (rr < M && cc < N) {
          store_pair(d + rr * ldd + cc, __floats2bfloat162_rn(out[4 * j + 2 * h], out[4 * j + 2 * h + 1]), cc + 1 < N);
        }
      }
    }
  }
}
#endif  // GEMM_WGMMA_DEVICE

// ---------------------------------------------------------------------------------------------
// The seed layout's A operand from registers (wgmma_gemm_kernel<.., kSeedA> and the fused seed kernel)
// ---------------------------------------------------------------------------------------------
#ifdef GEMM_WGMMA_DEVICE
// Row r (0-7) of the two 8-row matrices a transposing ldmatrix reads per 16 K rows: the thread that
// receives rows 2c and 2c + 1 (c = its lane % 4) gets K rows 4c, 4c + 1 from matrix 0 and 4c + 2, 4c + 3
// from matrix 1 for c < 2, the other way round for c >= 2, so that each matrix's 8 rows have distinct
// (row % 8): {0, 1, 4, 5, 10, 11, 14, 15} and {2, 3, 6, 7, 8, 9, 12, 13}.
__device__ __forceinline__ int seed_krow(int matrix, int r) {
  int const c = r / 2, e = r % 2;
  bool const low = (c < 2) == (matrix == 0);
  return 4 * c + (low ? 0 : 2) + e;
}

// The byte selectors that turn a thread's two transposed registers (x: matrix 0, y: matrix 1; byte
// 2i + j = K row i of the pair, column 2g + j) into its column 2g (sel_even) and 2g + 1 (sel_odd), each
// 4 consecutive K bytes 4c .. 4c + 3.
__device__ __forceinline__ uint32_t seed_sel(int c, bool odd) {
  if (c < 2) return odd ? 0x7531u : 0x6420u;
  return odd ? 0x3175u : 0x2064u;
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t addr, uint32_t &r0, uint32_t &r1, uint32_t &r2,
                                                  uint32_t &r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr)
               : "memory");
}

__device__ __forceinline__ void stmatrix_x4(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr), "r"(r0), "r"(r1),
               "r"(r2), "r"(r3)
               : "memory");
}

// A warp's A fragments of one K block (16 registers: 4 per 32-deep step) from an M-major box, K rows of
// `row_bytes` (64 or 128) in shared memory, 32 K rows apart per step: one transposing ldmatrix and 4 prmt per
// step. `off` is the lane's address in the box's first step (seed_a_offset), `sel_even` its seed_sel(c, false);
// the fragment's rows come paired (rows 2g, 2g + 1 where the fragment wants g, g + 8; see seed_krow).
template <int kRowBytes>
__device__ __forceinline__ void load_seed_a(uint32_t *a, uint32_t box, uint32_t off, uint32_t sel_even) {
  uint32_t const sel_odd = sel_even + 0x1111u;  // seed_sel: each selector nibble one byte further
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    uint32_t r0, r1, r2, r3;
    ldmatrix_x4_trans(box + q * 32 * kRowBytes + off, r0, r1, r2, r3);
    a[4 * q] = __byte_perm(r0, r1, sel_even);
    a[4 * q + 1] = __byte_perm(r0, r1, sel_odd);
    a[4 * q + 2] = __byte_perm(r2, r3, sel_even);
    a[4 * q + 3] = __byte_perm(r2, r3, sel_odd);
  }
}

// The lane's address in a box of K rows x kRowBytes M bytes for its warp's 16 M bytes at `col16` (in 16-byte
// units): lane l addresses row l % 8 of matrix l / 8 (matrices 2 and 3: the step's second 16 K rows). With
// 128-byte rows the box is 128-byte swizzled (16-byte unit c of row r at c ^ (r % 8)), with 64-byte rows
// 64-byte swizzled (c ^ ((r / 2) % 4)); in both each matrix's 8 rows (distinct r % 8) land in 8 distinct
// 16-byte bank groups.
template <int kRowBytes>
__device__ __forceinline__ uint32_t seed_a_offset(int lane, int col16) {
  static_assert(kRowBytes == 64 || kRowBytes == 128, "a 64- or 128-byte swizzled box");
  int const j = lane / 8;
  int const krow = 16 * (j / 2) + seed_krow(j % 2, lane % 8);
  int const phase = kRowBytes == 128 ? krow % 8 : (krow / 2) % 4;
  return krow * kRowBytes + ((col16 ^ phase) << 4);
}
#endif  // GEMM_WGMMA_DEVICE

// The persistent schedule. Work units u = blockIdx.x, + gridDim.x, ...: the first dp_tiles units are
// whole tiles; when the tiles leave a last wave partly empty, the tiles after dp_tiles (fewer than the
// grid) are each cut into `pieces` K ranges, one unit each, so that the last wave fills the SMs (a split
// tail, summed in the kernel: split_fixup). Tile t -> (tile_m, tile_n), in groups of `group` tiles along
// M (or along N when along_n) so that the CTAs in flight share operand tiles in L2.
struct Schedule {
  int tiles_m, tiles_n, group, along_n;
  int kblocks;
  int dp_tiles;  // == count() when no tile is split
  int pieces;    // K ranges per split tile
  bool overlap_store;  // GemmArgs::overlap_store
  // The output goes out by plain stores instead of TMA (store_block): its row stride or base is not a
  // multiple of 16 bytes. Set by run_wgmma_as; the fused seed kernel's output is always TMA-stored.
  bool plain_store = false;
  __host__ __device__ int count() const { return tiles_m * tiles_n; }
  __host__ __device__ int split_tiles() const { return count() - dp_tiles; }
  __host__ __device__ int units() const { return dp_tiles + split_tiles() * pieces; }
  // Unit u: tile t, K blocks [kb0, kb1); piece >= 0 for a piece of a split tile (-1: a whole tile).
  __device__ void unit(int u, int &t, int &kb0, int &kb1, int &piece) const {
    if (u < dp_tiles) {
      t = u, kb0 = 0, kb1 = kblocks, piece = -1;
      return;
    }
    int const v = u - dp_tiles;
    t = dp_tiles + v / pieces, piece = v % pieces;
    kb0 = piece * kblocks / pieces, kb1 = (piece + 1) * kblocks / pieces;
  }
  __device__ void tile(int t, int &tm, int &tn) const {
    int const major = along_n ? tiles_n : tiles_m, minor = along_n ? tiles_m : tiles_n;
    int const per_group = group * minor;
    int const first = (t / per_group) * group;
    int const size = min(major - first, group);
    int const within = t % per_group;
    int const a = first + within % size, b = within / size;
    tm = along_n ? b : a;
    tn = along_n ? a : b;
  }
};

#ifdef GEMM_WGMMA_DEVICE
// kTwoAcc: two batch accumulators per consumer warpgroup, so that each K block's batch runs on the tensor
// cores while the previous block is promoted (out + 2 x BN / 2 registers: BN <= 128 with two consumers).
// kSeedA: x is the seed layout's a (K, M), read as it is, and sx its a_scale (K/128, M) (GemmArgs::seed_a):
// the tile's rows come as raw boxes of 128 K rows x kBoxWidth M bytes (seed_box_width), and each consumer
// warp builds its wgmma A fragments from them in registers (load_seed_a), the accumulator rows paired.
// kProbe (kSeedA only; kProbeNone in every kernel the op runs): one of the timing-only diagnostics of
// wgmma_seed_probe_kernel (SeedProbe), wrong results by design.
template <int BN, int kConsumers, bool kTwoAcc, bool kSeedA, int kProbe, bool kStaged = false>
__device__ __forceinline__ void wgmma_gemm_body(CUtensorMap const *map_x_ptr, CUtensorMap const *map_w_ptr,
                                                CUtensorMap const *map_d_ptr, __nv_bfloat16 *d, int64_t ldd,
                                                float const *__restrict__ sx, float const *__restrict__ sw, int M,
                                                int N, Schedule sched, float *partials, unsigned *counters) {
  using L = Layout<BN, kConsumers, kStaged>;
  static_assert(kProbe == kProbeNone || kSeedA, "the probes change the seed-A kernel only");
  static_assert(!kStaged || (kSeedA && kProbe == kProbeNone && kConsumers == 2), "staged: the seed-A kernel, 2 consumers");
  CUtensorMap const &map_x = *map_x_ptr;
  CUtensorMap const &map_w = *map_w_ptr;
  CUtensorMap const &map_d = *map_d_ptr;
  static_assert(!kTwoAcc || (kConsumers == 2 && BN <= 128), "two batch accumulators fit 2 consumers, BN <= 128");
  // The A fragments take 16 registers beside the two accumulators, and the paired rows need whole boxes.
  static_assert(!kSeedA || (!kTwoAcc && BN % 64 == 0), "seed A: one accumulator, whole 64-column boxes");
  constexpr int kBlockM = L::kBlockM;
  constexpr int kBoxWidth = seed_box_width<kConsumers>();  // kSeedA: the raw A boxes' M bytes
  extern __shared__ uint8_t smem_raw[];
  // Aligned in the shared address space itself (32-bit arithmetic): aligning the generic pointer made
  // ptxas recompute it from special registers (S2UR SR_CgaCtaId, SR_SWINHI) at the top of every K block.
  uint32_t const base = (smem_addr(smem_raw) + 1023) & ~1023u;
  if constexpr (kStaged) {
    if (base != smem_addr(smem_raw)) __trap();  // no slack in its layout (Layout::kSlack)
  }
  uint32_t const full_bar = base + L::kOffBar;  // kStages barriers: the stage's operands and scales landed
  uint32_t const empty_bar = full_bar + 8 * L::kStages;  // kStages barriers: every consumer thread is done
  // The unit count, kept in a register across the loops; where the consumers' accumulators (and kSeedA's 16
  // fragment registers) take nearly all of their registers (192x144 tiles: 144 of 160), re-read from the
  // parameters instead (ptxas spilled it).
  constexpr bool kRecount = BN + 16 + (kSeedA ? 16 : 0) >= L::kConsumerRegs;
  int const units_kept = sched.units();
  auto const units = [&] { return kRecount ? sched.units() : units_kept; };
  int const kblocks = sched.kblocks;
  int const nblocks = (N + 127) / 128;  // w_scale rows

  // A stage is full once its TMA bytes have landed and each of the producer warp's lanes has counted its
  // scale copies; it is empty again once every consumer thread has arrived, each after its own scale reads
  // (a lane-0 arrival after __syncwarp would rely on the release's cumulativity, which compute-sanitizer's
  // racecheck reports as a race: run 51).
  init_stage_ring(full_bar, L::kStages, 128 * kConsumers, 1 + 32);

  // Warp-uniform as far as ptxas can tell (a broadcast lane), so that what derives from it (the
  // warpgroup's shared-memory descriptors) lives in uniform registers that wgmma reads directly.
  int const wg = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 128), 0);
  if (wg == 0) {  // producer
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(L::kProducerRegs));
    if (threadIdx.x < 32) {  // the producer warp; lane 0 issues the TMA loads
      int const lane = threadIdx.x;
      if (lane == 0) {
        cute::prefetch_tma_descriptor(&map_x);
        cute::prefetch_tma_descriptor(&map_w);
      }
      uint32_t it = 0;
      for (int u = blockIdx.x; u < units(); u += gridDim.x) {
        int t, kb0, kb1, piece, tm, tn;
        sched.unit(u, t, kb0, kb1, piece);
        sched.tile(t, tm, tn);
        // Scale rows past M and blocks past N are clamped (their outputs are clipped by the TMA store).
        int const m0 = tm * kBlockM;
        int const wblock = min(tn * BN / 128 + lane, nblocks - 1);  // lanes 0 and 1
        for (int kb = kb0; kb < kb1; ++kb, ++it) {
          int const s = acquire_stage<L::kStages>(full_bar, empty_bar, it, L::kBytesA + L::kBytesB, lane == 0);
          if (lane == 0) {
            if constexpr (kSeedA) {  // raw boxes of the K block's rows, kBoxWidth M bytes each
#pragma unroll
              for (int c = 0; c < kBlockM / kBoxWidth; ++c) {
                tma_load(&map_x, full_bar + 8 * s, base + s * L::kBytesA + c * kBlockK * kBoxWidth,
                         m0 + kBoxWidth * c, kb * kBlockK);
              }
            } else {
              tma_load(&map_x, full_bar + 8 * s, base + s * L::kBytesA, kb * kBlockK, m0);
            }
            tma_load(&map_w, full_bar + 8 * s, base + L::kOffB + s * L::kBytesB, kb * kBlockK, tn * BN);
          }
          uint32_t const scales = base + L::kOffScale + s * L::kBytesScale;
          if constexpr (kSeedA) {  // a_scale's K block kb is its row kb: consecutive rows 4 bytes apart
            copy_row_scales<kBlockM>(scales, sx + static_cast<int64_t>(kb) * M, m0, M, 1, 0, lane);
          } else {
            copy_row_scales<kBlockM>(scales, sx, m0, M, kblocks, kb, lane);
          }
          if (lane < 2) {
            cp_async_4(scales + 4 * (kBlockM + lane), sw + static_cast<int64_t>(wblock) * kblocks + kb);
          }
          cp_async_arrive_noinc(full_bar + 8 * s);
        }
      }
      asm volatile("cp.async.wait_all;" ::: "memory");  // no thread exits with copies in flight
    }
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(L::kConsumerRegs));
  int const cw = wg - 1;  // consumer warpgroup: rows 64 cw .. 64 cw + 63 of the tile
  int const t128 = threadIdx.x % 128;
  int const warp = t128 / 32, lane = t128 % 32;
  uint32_t const out_base = base + L::kOffOut + cw * (BN / 64) * kOutChunk;
  float out[BN / 2];
  float acc[BN / 2];
  float acc2[kTwoAcc ? BN / 2 : 1];
  // Stage s's descriptors are these plus s stages (addresses in 16-byte units, all below 2^14).
  uint64_t const desc_a0 = kmajor_sw128_desc(base + cw * 64 * kBlockK);
  uint64_t const desc_b0 = kmajor_sw128_desc(base + L::kOffB);
  // kSeedA: this warp's A fragments (M bytes 16 warp .. of its warpgroup's raw box), 16 registers.
  uint32_t a_frag[kSeedA ? 16 : 1];
  // (warpgroup cw's rows are M bytes 64 cw .. of the tile: in a box of 64, box cw; in one of 128, its 16-byte
  // columns 4 cw ..)
  uint32_t const a_off = kSeedA ? seed_a_offset<kBoxWidth>(lane, (64 * cw % kBoxWidth) / 16 + warp) +
                                      (64 * cw / kBoxWidth) * kBlockK * kBoxWidth
                                : 0;
  uint32_t const sel_even = seed_sel(lane % 4, false);
  uint32_t probe_sink = 0;  // kProbeLoadsSs: the fragments' xor, stored where M < 0 (never)
  // kStaged and kProbeStaged: the byte offset of the row this lane addresses in stmatrix (matrix lane / 8: rows 8 apart
  // for odd matrices, the step's second 16 K bytes from matrix 2 on), in its warpgroup's K-major tile.
  // kStaged: the same rows of its own tile (the accumulator rows stay paired, as with A from registers).
  uint32_t const staged_row = 128 * (16 * warp + 8 * (lane / 8 % 2) + lane % 8);
  uint32_t const staged_tile = base + L::kOffStaged + cw * 64 * kBlockK;
  uint64_t const desc_staged = kmajor_sw128_desc(staged_tile);
  if constexpr (kProbe == kProbeNoLoads) {  // finite e4m3 bytes, not zeros (zeros would draw less power)
#pragma unroll
    for (int i = 0; i < 16; ++i) a_frag[i] = ((0x01010101u * (lane + 1)) ^ (0x3C5A9600u + 0x1F3u * i)) & 0x7E7E7E7Eu;
  }
  // Stage 0's x_scale of this thread's rows r and r + 8 (the fragment rows below), and its w_scale pair;
  // kSeedA: of its paired rows 2g, 2g + 1 (g = lane / 4), 4 bytes apart.
  uint32_t const scale_x0 = base + L::kOffScale + 4 * (64 * cw + 16 * warp + (kSeedA ? 2 : 1) * (lane / 4));
  constexpr uint32_t kScaleX1 = kSeedA ? 4 : 32;  // the second row's x_scale, bytes past the first
  uint32_t const scale_w0 = base + L::kOffScale + 4 * kBlockM;
  uint32_t it = 0;
  // A finished tile whose block is still in `out`, to be stored at (store_row, store_col) while the next
  // unit's first wgmma batch runs, so that the tensor cores do not wait for the epilogue.
  bool pending = false;
  // Plain stores (Schedule::plain_store) cost the seed-A 128x192 kernel spills (its A fragments take 16
  // registers more): the kernels reading a as it is always store by TMA, the host giving them a scratch.
  bool const plain_store = !kSeedA && sched.plain_store;
  int store_row = 0, store_col = 0;
  for (int u = blockIdx.x; u < units(); u += gridDim.x) {
    int t, kb0, kb1, piece, tm, tn;
    sched.unit(u, t, kb0, kb1, piece);
    sched.tile(t, tm, tn);
    int const m0 = tm * kBlockM, n0 = tn * BN;
    // Which columns take the tile's first w_scale block (promote_cols).
    int const offset = n0 % 128;
    bool const unaligned = offset != 0;

    // One K block of the unit; the first (kFirst) starts `out` (promoted onto zeros) and has the previous
    // tile's store (GemmArgs::overlap_store) run beside its batch. Between one batch's promotion and the
    // next batch's issue there is only the stage check: the stage's scales are read and the next stage
    // probed while the batch runs (unconditionally: ptxas kept a probe behind a branch after the promotion).
    int s = ring_stage<L::kStages>(it);
    bar_wait(full_bar + 8 * s, ring_parity<L::kStages>(it));
    auto k_block = [&](int kb, auto first) {
      if constexpr (kProbe == kProbeNoLoads) {
        issue_batch_rs<BN>(acc, a_frag, desc_b0 + static_cast<uint64_t>(s * (L::kBytesB >> 4)));
      } else if constexpr (kStaged || kProbe == kProbeStaged) {
        load_seed_a<kBoxWidth>(a_frag, base + s * L::kBytesA, a_off, sel_even);
        // The staged form writes its own tile, once every warp of the warpgroup has waited for its previous
        // batch (the tile's last reader); the probe writes over the stage's raw box, with no such barrier.
        uint32_t const tile = kStaged ? staged_tile : base + s * L::kBytesA + cw * 64 * kBlockK;
        if constexpr (kStaged) named_sync(1 + cw);
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          stmatrix_x4(tile + staged_row + (((2 * q + lane / 16) ^ (staged_row / 128 % 8)) << 4), a_frag[4 * q],
                      a_frag[4 * q + 1], a_frag[4 * q + 2], a_frag[4 * q + 3]);
        }
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the writes, visible to wgmma
        named_sync(1 + cw);  // and every warp's rows written
        issue_batch<BN>(acc, kStaged ? desc_staged : desc_a0 + static_cast<uint64_t>(s * (L::kBytesA >> 4)),
                        desc_b0 + static_cast<uint64_t>(s * (L::kBytesB >> 4)));
      } else if constexpr (kProbe == kProbeLoadsSs || kProbe == kProbeSsOnly) {
        if constexpr (kProbe == kProbeLoadsSs) {  // kept alive by probe_sink: ptxas drops unused loads
          load_seed_a<kBoxWidth>(a_frag, base + s * L::kBytesA, a_off, sel_even);
#pragma unroll
          for (int i = 0; i < 16; ++i) probe_sink ^= a_frag[i];
        }
        // The raw box read as if it were the K-major tile (the same bytes of the stage).
        issue_batch<BN>(acc, desc_a0 + static_cast<uint64_t>(s * (L::kBytesA >> 4)),
                        desc_b0 + static_cast<uint64_t>(s * (L::kBytesB >> 4)));
      } else if constexpr (kSeedA) {
        load_seed_a<kBoxWidth>(a_frag, base + s * L::kBytesA, a_off, sel_even);
        issue_batch_rs<BN>(acc, a_frag, desc_b0 + static_cast<uint64_t>(s * (L::kBytesB >> 4)));
      } else {
        issue_batch<BN>(acc, desc_a0 + static_cast<uint64_t>(s * (L::kBytesA >> 4)),
                        desc_b0 + static_cast<uint64_t>(s * (L::kBytesB >> 4)));
      }
      uint32_t const stage_scales = s * L::kBytesScale;
      float const a0 = ld_shared_f32(scale_x0 + stage_scales);
      float const a1 = ld_shared_f32(scale_x0 + stage_scales + kScaleX1);
      float2 const b = ld_shared_f32x2(scale_w0 + stage_scales);
      ++it;
      int const ns = ring_stage<L::kStages>(it);
      uint32_t const nparity = ring_parity<L::kStages>(it);
      if (first && pending) {
        store_block<BN, kSeedA>(out, out_base, &map_d, d, ldd, store_row, store_col, M, N, 1 + cw, t128,
                                plain_store);
        pending = false;
      }
      cute::warpgroup_wait<0>();
      fence_all<BN>(acc);
      if constexpr (kSeedA) {  // the registers the batch read are free again only now
#pragma unroll
        for (int i = 0; i < 16; ++i) cute::warpgroup_fence_operand(a_frag[i]);
      }
      bar_arrive(empty_bar + 8 * s);  // this thread is done with the stage's operands and scales
      bool const probed = bar_test(full_bar + 8 * ns, nparity);
      promote_cols<BN, decltype(first)::value>(unaligned, offset, out, acc, a0, a1, b.x, b.y);
      // The next tile's first stage is waited for at that tile's start.
      if (kb + 1 != kb1 && !probed) bar_wait(full_bar + 8 * ns, nparity);
      s = ns;
    };
    if constexpr (kTwoAcc) {
      // Block kb's batch goes into acc or acc2 in turn and block kb - 1 is promoted while it runs. Each
      // array is named statically (the loop goes two blocks a round), so that ptxas sees the registers read
      // after wait<1> belong to a retired batch. A batch's stage and scales travel with it to its promotion.
      struct Batch {
        int stage;
        float a0, a1, b0, b1;
      };
      auto issue = [&](float *cur) {
        issue_batch<BN>(cur, desc_a0 + static_cast<uint64_t>(s * (L::kBytesA >> 4)),
                        desc_b0 + static_cast<uint64_t>(s * (L::kBytesB >> 4)));
        uint32_t const stage_scales = s * L::kBytesScale;
        float2 const b = ld_shared_f32x2(scale_w0 + stage_scales);
        Batch const batch{s, ld_shared_f32(scale_x0 + stage_scales), ld_shared_f32(scale_x0 + stage_scales + 32),
                          b.x, b.y};
        ++it;
        s = ring_stage<L::kStages>(it);
        return batch;
      };
      auto wait_stage = [&] { bar_wait(full_bar + 8 * s, ring_parity<L::kStages>(it)); };
      auto retire = [&](float *done, Batch const &batch, auto first) {  // `done`'s batch has completed
        fence_all<BN>(done);
        bar_arrive(empty_bar + 8 * batch.stage);
        promote_cols<BN, decltype(first)::value>(unaligned, offset, out, done, batch.a0, batch.a1, batch.b0,
                                                 batch.b1);
      };
      Batch batch = issue(acc);
      if (pending) {
        store_block<BN>(out, out_base, &map_d, d, ldd, store_row, store_col, M, N, 1 + cw, t128,
                        plain_store);
        pending = false;
      }
      int left = kb1 - kb0 - 1;  // blocks not issued yet
      if (left == 0) {
        cute::warpgroup_wait<0>();
        retire(acc, batch, std::true_type{});
      } else {
        wait_stage();
        Batch batch2 = issue(acc2);
        cute::warpgroup_wait<1>();
        retire(acc, batch, std::true_type{});
        for (--left; left >= 2; left -= 2) {  // acc2 in flight
          wait_stage();
          batch = issue(acc);
          cute::warpgroup_wait<1>();
          retire(acc2, batch2, std::false_type{});
          wait_stage();
          batch2 = issue(acc2);
          cute::warpgroup_wait<1>();
          retire(acc, batch, std::false_type{});
        }
        if (left == 1) {
          wait_stage();
          batch = issue(acc);
          cute::warpgroup_wait<1>();
          retire(acc2, batch2, std::false_type{});
          cute::warpgroup_wait<0>();
          retire(acc, batch, std::false_type{});
        } else {
          cute::warpgroup_wait<0>();
          retire(acc2, batch2, std::false_type{});
        }
      }
    } else {
      k_block(kb0, std::true_type{});
      for (int kb = kb0 + 1; kb < kb1; ++kb) k_block(kb, std::false_type{});
    }

    if (piece >= 0) {  // slots: (split tile, piece, consumer warpgroup) blocks of 64 x BN floats
      int const split = t - sched.dp_tiles;  // which split tile
      int64_t const slot_stride = int64_t{kBlockM} * BN;
      int64_t const first = static_cast<int64_t>(split) * sched.pieces * slot_stride;
      if (!split_fixup<BN / 2>(out, partials + first + cw * 64 * BN, counters + split * kConsumers + cw, piece,
                               sched.pieces, slot_stride, 1 + cw, t128)) {
        continue;
      }
    }

    if (sched.overlap_store) {  // the store waits for the next unit's first batch to be in flight
      pending = true;
      store_row = m0 + 64 * cw, store_col = n0;
    } else {
      store_block<BN, kSeedA>(out, out_base, &map_d, d, ldd, m0 + 64 * cw, n0, M, N, 1 + cw, t128,
                              plain_store);
    }
  }
  if (pending) {
    store_block<BN, kSeedA>(out, out_base, &map_d, d, ldd, store_row, store_col, M, N, 1 + cw, t128,
                            plain_store);
  }
  if (t128 == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  if constexpr (kProbe == kProbeLoadsSs) {
    if (M < 0) reinterpret_cast<uint32_t *>(d)[t128] = probe_sink;
  }
}
#endif  // GEMM_WGMMA_DEVICE

// The kernel of configurations 6, 7, 8, 10 and 11 (on either form of x with kSeedA, see wgmma_gemm_body).
template <int BN, int kConsumers, bool kTwoAcc, bool kSeedA = false>
__global__ void __launch_bounds__(Layout<BN, kConsumers>::kThreads, 1)
    wgmma_gemm_kernel(__grid_constant__ CUtensorMap const map_x, __grid_constant__ CUtensorMap const map_w,
                      __grid_constant__ CUtensorMap const map_d, __nv_bfloat16 *d, int64_t ldd,
                      float const *__restrict__ sx, float const *__restrict__ sw, int M, int N, Schedule sched,
                      float *partials, unsigned *counters) {
#ifdef GEMM_WGMMA_DEVICE
  wgmma_gemm_body<BN, kConsumers, kTwoAcc, kSeedA, kProbeNone>(&map_x, &map_w, &map_d, d, ldd, sx, sw, M, N, sched,
                                                               partials, counters);
#endif
}

// The seed-A kernel's staged form: each warp writes its A fragments K-major into its warpgroup's tile in
// shared memory (stmatrix), and wgmma reads A from there, not from registers. Correct results. Instantiated
// only by builds with GEMM_SEED_A_EXPERIMENT (run_wgmma), until it is measured faster than the register form.
template <int BN, int kConsumers>
__global__ void __launch_bounds__(Layout<BN, kConsumers, true>::kThreads, 1)
    wgmma_seed_staged_kernel(__grid_constant__ CUtensorMap const map_x, __grid_constant__ CUtensorMap const map_w,
                             __grid_constant__ CUtensorMap const map_d, __nv_bfloat16 *d, int64_t ldd,
                             float const *__restrict__ sx, float const *__restrict__ sw, int M, int N,
                             Schedule sched, float *partials, unsigned *counters) {
#ifdef GEMM_WGMMA_DEVICE
  wgmma_gemm_body<BN, kConsumers, false, true, kProbeNone, true>(&map_x, &map_w, &map_d, d, ldd, sx, sw, M, N,
                                                                 sched, partials, counters);
#endif
}

// The seed-A kernel with one of the timing-only probes (SeedProbe), wrong results by design. Instantiated
// only by builds with GEMM_SEED_A_EXPERIMENT (run_wgmma), never by the shipped one.
template <int BN, int kConsumers, int kProbe>
__global__ void __launch_bounds__(Layout<BN, kConsumers>::kThreads, 1)
    wgmma_seed_probe_kernel(__grid_constant__ CUtensorMap const map_x, __grid_constant__ CUtensorMap const map_w,
                            __grid_constant__ CUtensorMap const map_d, __nv_bfloat16 *d, int64_t ldd,
                            float const *__restrict__ sx, float const *__restrict__ sw, int M, int N,
                            Schedule sched, float *partials, unsigned *counters) {
#ifdef GEMM_WGMMA_DEVICE
  wgmma_gemm_body<BN, kConsumers, false, true, kProbe>(&map_x, &map_w, &map_d, d, ldd, sx, sw, M, N, sched,
                                                       partials, counters);
#endif
}


// ---------------------------------------------------------------------------------------------
// The fused seed kernel: the seed layout's a (K, M) and b (K, N) read as they are, no preparation pass.
// ---------------------------------------------------------------------------------------------
// FP8 wgmma reads K-major operands only, and both seed operands are M- / N-major. This kernel takes the
// two transposes off the GEMM's path in two different ways (run 58's profile of a kernel that transposed
// both in shared memory, byte by byte, found its transposing warps bound by their instruction count):
//   A (a, M-major): wgmma's A operand may come from registers. Each consumer warp builds its 16-row
//     fragments straight from the TMA-loaded (128 K x 128 M bytes) box with `ldmatrix.trans` (16-bit
//     pairs) and one `prmt` per register. The transposing load hands a thread the block's rows 2i and
//     2i + 1 where the fragment wants rows i and i + 8, so the accumulator rows are permuted the same way
//     (store_block<.., true>, and the row scales read in pairs).
//   B (b, N-major): three producer warps turn each (128 K x 128 N bytes) box into the K-major,
//     128-byte-swizzled tile wgmma reads from shared memory: per 16 x 32 bytes one `ldmatrix.x4.trans`,
//     four `prmt` and one `stmatrix.x4`, then a proxy fence and an arrival on the stage's `ready` barrier.
// Both shared-memory passes are free of bank conflicts: each 8-row phase of an ldmatrix reads rows of 8
// distinct (row % 8) at one logical 16-byte column (distinct physical columns under the swizzle), and each
// stmatrix phase writes 8 rows of distinct (row % 8).
// Tiles are 128 x 128 (two consumer warpgroups), persistent, whole tiles only; M and N multiples of 16
// (TMA row strides). The producer warp's lanes copy each K block's scales into the stage.
namespace seed_fused {
constexpr int kBlockM = 128, kBlockN = 128;
constexpr int kBox = kBlockK * 128;  // one raw or K-major 128 x 128-byte box
constexpr int kStageBytes = 3 * kBox;  // raw A, raw B, K-major B
constexpr int kBytesOut = 2 * 2 * kOutChunk;
// A stage's scales: a_scale of the K block's 128 rows, then its b_scale entry (padded to 16 bytes).
constexpr int kBytesScale = (kBlockM + 4) * 4;
// No room for the other kernels' 1024 bytes of alignment slack with 4 stages: the dynamic shared memory
// starts 1024-aligned (what CUTLASS's sm90 kernels assume for their 128-byte-swizzled stages too), and
// the kernel traps if it does not.
constexpr int kStages = (kSmemPerBlock - kBytesOut - 256) / (kStageBytes + kBytesScale);
constexpr int kOffOut = kStages * kStageBytes;
constexpr int kOffScale = kOffOut + kBytesOut;
constexpr int kOffBar = kOffScale + kStages * kBytesScale;
constexpr int kSmem = kOffBar + 3 * kStages * 8;
constexpr int kThreads = 384;
constexpr int kProducerRegs = 64;
// What each of the two consumer warpgroups may take (setmaxnreg) when the producer warpgroup keeps `producer`.
constexpr int consumer_regs(int producer) {
  return ((65536 / kThreads / 8 * 8) * kThreads / 128 - producer) / 2 / 8 * 8;
}
constexpr int kTransposers = 3;  // warps 1-3 of the producer warpgroup
static_assert(kSmem <= kSmemPerBlock && kStages >= 3, "shared memory");
// The K rows of B's box that one CTA of a cluster of kShare loads and transposes (the diagnostic below);
// the kernel's expected bytes and the host's tensor map box both come from here.
template <int kShare>
constexpr int kShareRows = kBlockK / kShare;
}  // namespace seed_fused


#ifdef GEMM_WGMMA_DEVICE
// A barrier across the thread block cluster: every thread of every CTA in it arrives, then waits.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
}

// kShare = 1: the shipped kernel. kShare = 2 or 4 (only with GEMM_SEED_DSMEM_EXPERIMENT, see
// seed_fused_share_kernel): a TIMING-ONLY diagnostic, wrong results by design. Each CTA of a cluster of
// kShare loads and transposes 1 / kShare of its B box and, with kRemote, also copies each transposed piece
// into the other CTAs' K-major tiles through distributed shared memory (each lane reads back the 16-byte row
// its stmatrix wrote and stores it to each peer), with none of the barriers that would order those stores
// (the cluster's CTAs do not even share an N tile). Without kRemote (the control), the same clusters and
// partial loads without those copies. What it measures: whether B's transpose shared across a cluster along
// M (NOTES.md, "Left to do") runs at the speed its wavefront count promises, before the barriers that design
// needs are written; their cost is not in it, so it bounds the design's time from below.
template <int kShare, bool kRemote = true>
__device__ __forceinline__ void seed_fused_body(CUtensorMap const *map_a_ptr, CUtensorMap const *map_b_ptr,
                                                CUtensorMap const *map_d_ptr, __nv_bfloat16 *d, int64_t ldd,
                                                float const *__restrict__ sa, float const *__restrict__ sb, int M,
                                                int N, Schedule sched) {
  static_assert(kShare == 1 || kShare == 2 || kShare == 4, "a cluster of 1, 2 or 4 CTAs");
  namespace F = seed_fused;
  // The diagnostic's transposing warps hold more registers (addresses of the other CTAs' tiles).
  constexpr int kProducerRegs = kShare == 1 ? F::kProducerRegs : 96;
  constexpr int kConsumerRegs = F::consumer_regs(kProducerRegs);
  CUtensorMap const &map_a = *map_a_ptr;
  CUtensorMap const &map_b = *map_b_ptr;
  CUtensorMap const &map_d = *map_d_ptr;
  // Declared 1024-aligned (the layout has no slack: seed_fused::kStages), so the check below never fires.
  extern __shared__ __align__(1024) uint8_t smem_fused[];
  uint32_t const base = smem_addr(smem_fused);
  if ((base & 1023) != 0) __trap();
  uint32_t const full_bar = base + F::kOffBar;  // the stage's raw boxes (TMA) and scales (cp.async) landed
  uint32_t const empty_bar = full_bar + 8 * F::kStages;  // every consumer thread is done with the stage
  uint32_t const ready_bar = empty_bar + 8 * F::kStages;  // its K-major B tile is written
  if (threadIdx.x == 0) {
    for (int s = 0; s < F::kStages; ++s) bar_init(ready_bar + 8 * s, 32 * F::kTransposers);
  }
  init_stage_ring(full_bar, F::kStages, 256, 1 + 32);
  uint32_t rank = 0;  // in the cluster
  if constexpr (kShare > 1) {
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    cluster_sync();  // every CTA of the cluster has started before any stores into another's shared memory
  }
  int const kblocks = sched.kblocks;
  int const nblocks = (N + 127) / 128;
  auto const raw_a = [&](int s) { return base + s * F::kStageBytes; };
  auto const raw_b = [&](int s) { return base + s * F::kStageBytes + F::kBox; };
  auto const kmajor_b = [&](int s) { return base + s * F::kStageBytes + 2 * F::kBox; };

  int const wg = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 128), 0);
  int const warp = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 32) % 4, 0);
  int const lane = threadIdx.x % 32;
  if (wg == 0) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kProducerRegs));
    if (warp == 0) {  // lane 0 streams both raw boxes of every K block, the lanes copy its scales
      if (lane == 0) {
        cute::prefetch_tma_descriptor(&map_a);
        cute::prefetch_tma_descriptor(&map_b);
      }
      uint32_t it = 0;
      for (int u = blockIdx.x; u < sched.units(); u += gridDim.x) {
        int tm, tn;
        sched.tile(u, tm, tn);
        for (int kb = 0; kb < kblocks; ++kb, ++it) {
          // B's raw box: all of it, or in the diagnostic the K rows of this CTA's pieces (map_b's box has
          // kBlockK / kShare rows then; at a multiple of 1024 bytes in, the swizzle's phase is the same).
          constexpr int kRows = F::kShareRows<kShare>;
          int const s = acquire_stage<F::kStages>(full_bar, empty_bar, it, F::kBox + kRows * 128, lane == 0);
          if (lane == 0) {
            tma_load(&map_a, full_bar + 8 * s, raw_a(s), tm * F::kBlockM, kb * kBlockK);
            tma_load(&map_b, full_bar + 8 * s, raw_b(s) + rank * (kRows * 128), tn * F::kBlockN,
                     kb * kBlockK + static_cast<int>(rank) * kRows);
          }
          uint32_t const scales = base + F::kOffScale + s * F::kBytesScale;
          // a_scale's K block kb is the row kb of (K / 128, M): the natural kernels' copies with a row
          // stride of 1 (4 bytes a row, lane l rows l, l + 32, ...). Not one 16-byte copy a lane: racecheck
          // reported those (cp.async.cg) unordered with the consumers' reads (runs 121-122).
          copy_row_scales<F::kBlockM>(scales, sa + static_cast<int64_t>(kb) * M, tm * F::kBlockM, M, 1, 0, lane);
          if (lane == 0) cp_async_4(scales + 4 * F::kBlockM, sb + static_cast<int64_t>(kb) * nblocks + tn);
          cp_async_arrive_noinc(full_bar + 8 * s);
        }
      }
      asm volatile("cp.async.wait_all;" ::: "memory");  // no thread exits with copies in flight
      if constexpr (kShare > 1) cluster_sync();  // no CTA exits while another may still store into it
      return;
    }
    // Transposing warps: 32 pieces of 16 K rows x 32 N bytes per box, piece i = (K group i / 4, N pair
    // i % 4); warp 1 takes pieces 0-10, warp 2 11-21, warp 3 22-31, four at a time (their loads in flight
    // together). Lane l addresses row l % 8 of matrix l / 8 both in the ldmatrix (matrix j: K rows
    // seed_krow(j % 2, .), N bytes 16 (2p + j / 2) ..) and in the stmatrix (matrix j: N row 32p + n_row,
    // K bytes 16 kg ..).
    int const j = lane / 8, r = lane % 8;
    int const krow = seed_krow(j % 2, r);
    int const half = j / 2;
    // The thread receives N columns 2g and 2g + 1 (g = lane / 4); stmatrix matrix 0 stores column 2g for
    // g < 4 and 2g + 1 for g >= 4 (rows of distinct % 8), matrix 1 the other one.
    int const n_row = 16 * half + ((j % 2 == 0) == (r < 4) ? 2 * r : 2 * r + 1);
    int const c = lane % 4, g = lane / 4;
    uint32_t const sel0 = seed_sel(c, g >= 4), sel1 = seed_sel(c, g < 4);
    uint32_t const ld_row = krow * 128, st_row = n_row * 128;
    int const ld_x = krow % 8, st_x = n_row % 8;
    // This CTA's pieces (all 32 without a cluster), split over the 3 warps.
    constexpr int kPieces = 32 / kShare;
    constexpr int kMaxPerWarp = kShare == 1 ? 12 : ((kPieces + 2) / 3 + 3) / 4 * 4;
    int const first = kShare == 1 ? 11 * (warp - 1) : static_cast<int>(rank) * kPieces + kPieces * (warp - 1) / 3;
    int const last = kShare == 1 ? min(first + 11, 32) : static_cast<int>(rank) * kPieces + kPieces * warp / 3;
    uint32_t it = 0;
    for (int u = blockIdx.x; u < sched.units(); u += gridDim.x) {
      for (int kb = 0; kb < kblocks; ++kb, ++it) {
        int const s = ring_stage<F::kStages>(it);
        bar_wait(full_bar + 8 * s, ring_parity<F::kStages>(it));
        uint32_t const src = raw_b(s) + ld_row, dst = kmajor_b(s) + st_row;
        uint32_t peer_tile[kShare > 1 ? kShare - 1 : 1] = {};
        if constexpr (kShare > 1 && kRemote) {
#pragma unroll
          for (int q = 1; q < kShare; ++q) {
            uint32_t const peer = (rank + q) % kShare;
            asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(peer_tile[q - 1]) : "r"(kmajor_b(s)), "r"(peer));
          }
        }
#pragma unroll
        for (int i0 = 0; i0 < kMaxPerWarp; i0 += 4) {
          uint32_t v[4][4];
#pragma unroll
          for (int n = 0; n < 4; ++n) {
            int const i = first + i0 + n;
            if (i < last) {
              ldmatrix_x4_trans(src + (i / 4) * 2048 + (((2 * (i % 4) + half) ^ ld_x) << 4), v[n][0], v[n][1],
                                v[n][2], v[n][3]);
            }
          }
#pragma unroll
          for (int n = 0; n < 4; ++n) {
            int const i = first + i0 + n;
            if (i < last && kShare == 1) {
              stmatrix_x4(dst + (i % 4) * 4096 + (((i / 4) ^ st_x) << 4), __byte_perm(v[n][0], v[n][1], sel0),
                          __byte_perm(v[n][0], v[n][1], sel1), __byte_perm(v[n][2], v[n][3], sel0),
                          __byte_perm(v[n][2], v[n][3], sel1));
            } else if (i < last) {
              uint32_t const row = (i % 4) * 4096 + (((i / 4) ^ st_x) << 4);  // this lane's 16-byte row
              stmatrix_x4(dst + row, __byte_perm(v[n][0], v[n][1], sel0), __byte_perm(v[n][0], v[n][1], sel1),
                          __byte_perm(v[n][2], v[n][3], sel0), __byte_perm(v[n][2], v[n][3], sel1));
              if constexpr (kShare > 1 && kRemote) {
                __syncwarp();  // the row's 16 bytes come from 4 lanes' stmatrix registers
                uint32_t x0, x1, x2, x3;
                asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                             : "=r"(x0), "=r"(x1), "=r"(x2), "=r"(x3)
                             : "r"(dst + row)
                             : "memory");
#pragma unroll
                for (int q = 0; q < kShare - 1; ++q) {
                  asm volatile("st.shared::cluster.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(peer_tile[q] + st_row + row),
                               "r"(x0), "r"(x1), "r"(x2), "r"(x3)
                               : "memory");
                }
              }
            }
          }
        }
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the stores, visible to wgmma
        bar_arrive(ready_bar + 8 * s);
      }
    }
    if constexpr (kShare > 1) cluster_sync();
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kConsumerRegs));
  int const cw = wg - 1;  // rows 64 cw .. 64 cw + 63 of the tile
  int const t128 = threadIdx.x % 128;
  uint32_t const out_base = base + F::kOffOut + cw * 2 * kOutChunk;
  float out[64];
  float acc[64];
  uint32_t a[16];
  uint64_t const desc_b0 = kmajor_sw128_desc(kmajor_b(0));
  // This warp's A fragments: M bytes 16 (4 cw + warp) .. of every K row of the raw box.
  uint32_t const a_off = seed_a_offset<128>(lane, 4 * cw + warp);
  uint32_t const sel_even = seed_sel(lane % 4, false);
  // The accumulator rows 2g, 2g + 1 (g = lane / 4) of the warp's 16 (store_block<.., true>): stage 0's
  // a_scale pair of them, and its b_scale.
  uint32_t const scale_pair = base + F::kOffScale + 4 * (64 * cw + 16 * warp + 2 * (lane / 4));
  uint32_t const scale_b = base + F::kOffScale + 4 * F::kBlockM;
  uint32_t it = 0;
  for (int u = blockIdx.x; u < sched.units(); u += gridDim.x) {
    int tm, tn;
    sched.tile(u, tm, tn);
    int const m0 = tm * F::kBlockM, n0 = tn * F::kBlockN;
    auto k_block = [&](auto first) {
      int const s = ring_stage<F::kStages>(it);
      uint32_t const parity = ring_parity<F::kStages>(it);
      ++it;
      bar_wait(ready_bar + 8 * s, parity);
      bar_wait(full_bar + 8 * s, parity);
      load_seed_a<128>(a, raw_a(s), a_off, sel_even);
      issue_batch_rs<128>(acc, a, desc_b0 + static_cast<uint64_t>(s * (F::kStageBytes >> 4)));
      float2 const sa2 = ld_shared_f32x2(scale_pair + s * F::kBytesScale);
      float const sbv = ld_shared_f32(scale_b + s * F::kBytesScale);
      cute::warpgroup_wait<0>();
      fence_all<128>(acc);
#pragma unroll
      for (int i = 0; i < 16; ++i) cute::warpgroup_fence_operand(a[i]);
      bar_arrive(empty_bar + 8 * s);
      promote<16, 16, decltype(first)::value>(out, acc, sa2.x * sbv, sa2.x * sbv, sa2.y * sbv, sa2.y * sbv);
    };
    k_block(std::true_type{});
    for (int kb = 1; kb < kblocks; ++kb) k_block(std::false_type{});
    store_block<128, true>(out, out_base, &map_d, d, ldd, m0 + 64 * cw, n0, M, N, 1 + cw, t128, false);
  }
  if (t128 == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  if constexpr (kShare > 1) cluster_sync();
}
#endif  // GEMM_WGMMA_DEVICE

__global__ void __launch_bounds__(seed_fused::kThreads, 1)
    seed_fused_kernel(__grid_constant__ CUtensorMap const map_a, __grid_constant__ CUtensorMap const map_b,
                      __grid_constant__ CUtensorMap const map_d, __nv_bfloat16 *d, int64_t ldd,
                      float const *__restrict__ sa, float const *__restrict__ sb, int M, int N, Schedule sched) {
#ifdef GEMM_WGMMA_DEVICE
  seed_fused_body<1>(&map_a, &map_b, &map_d, d, ldd, sa, sb, M, N, sched);
#endif
}

#ifdef GEMM_SEED_DSMEM_EXPERIMENT
// The timing-only diagnostic of seed_fused_body<kShare> (wrong results by design), launched in clusters of
// kShare CTAs: only in builds that define GEMM_SEED_DSMEM_EXPERIMENT, never in the shipped one.
template <int kShare, bool kRemote>
__global__ void __cluster_dims__(kShare, 1, 1) __launch_bounds__(seed_fused::kThreads, 1)
    seed_fused_share_kernel(__grid_constant__ CUtensorMap const map_a, __grid_constant__ CUtensorMap const map_b,
                            __grid_constant__ CUtensorMap const map_d, __nv_bfloat16 *d, int64_t ldd,
                            float const *__restrict__ sa, float const *__restrict__ sb, int M, int N, Schedule sched) {
#ifdef GEMM_WGMMA_DEVICE
  seed_fused_body<kShare, kRemote>(&map_a, &map_b, &map_d, d, ldd, sa, sb, M, N, sched);
#endif
}
#endif

// ---------------------------------------------------------------------------------------------
// host side
// ---------------------------------------------------------------------------------------------
// The schedule for g: tiles of (64 kConsumers) x BN; with g.splits > 1, the tiles past the last full
// wave of g.sm_count CTAs are each cut into up to g.splits K ranges (as many as keep one unit per CTA
// and at least one K block per range).
template <int BN, int kConsumers>
Schedule make_schedule(GemmArgs const &g) {
  constexpr int kBlockM = Layout<BN, kConsumers>::kBlockM;
  Schedule sched{(g.M + kBlockM - 1) / kBlockM, (g.N + BN - 1) / BN, g.swizzle > 1 ? g.swizzle : 8,
                 g.raster == 2 ? 1 : 0, g.K / kBlockK, 0, 1, g.overlap_store};
  int const tiles = sched.count(), rest = tiles % g.sm_count;
  sched.pieces = rest == 0 ? 1 : std::min({g.splits, g.sm_count / rest, sched.kblocks});
  sched.dp_tiles = sched.pieces > 1 ? tiles - rest : tiles;
  return sched;
}

// Scratch of a split tail: one fp32 block per piece, then one counter per split tile and warpgroup
// (zeroed by run_wgmma before each launch); none without a split tail.
template <int BN, int kConsumers>
size_t partials_bytes(Schedule const &sched) {
  return static_cast<size_t>(sched.split_tiles()) * sched.pieces * Layout<BN, kConsumers>::kBlockM * BN * sizeof(float);
}

template <int kConsumers>
size_t counter_bytes(Schedule const &sched) {
  return static_cast<size_t>(sched.split_tiles()) * kConsumers * sizeof(unsigned);
}

template <int BN, int kConsumers>
size_t workspace_wgmma(GemmArgs const &g) {
  Schedule const sched = make_schedule<BN, kConsumers>(g);
  return partials_bytes<BN, kConsumers>(sched) + counter_bytes<kConsumers>(sched);
}

// The kernel to launch: the op's, a probe's (SeedProbe), or the staged form's.
template <int BN, int kConsumers, bool kTwoAcc, bool kSeedA, int kProbe, bool kStaged>
constexpr auto wgmma_kernel() {
  if constexpr (kStaged) {
    return &wgmma_seed_staged_kernel<BN, kConsumers>;
  } else if constexpr (kProbe > kProbeShipped) {
    return &wgmma_seed_probe_kernel<BN, kConsumers, kProbe>;
  } else {
    return &wgmma_gemm_kernel<BN, kConsumers, kTwoAcc, kSeedA>;
  }
}

template <int BN, int kConsumers, bool kTwoAcc = false, bool kSeedA = false, int kProbe = kProbeNone,
          bool kStaged = false>
int run_wgmma_as(GemmArgs const &g, void *workspace, cudaStream_t stream) {
  using L = Layout<BN, kConsumers, kStaged>;
  constexpr int kBlockM = L::kBlockM;
  // bf16 output only (any row stride and alignment), K a whole number of blocks.
  if (g.kslices != 1 || g.K % kBlockK != 0 || g.ldd < g.N || g.splits < 1 ||
      (reinterpret_cast<uintptr_t>(g.d) & 1) != 0 || (kSeedA && !seed_a_fits(g.x, g.sx, g.M))) {
    return -static_cast<int>(cudaErrorInvalidValue);
  }
  // TMA stores the output where its rows are 16-byte strided and based; plain stores elsewhere, except in
  // the kernels that read a as it is (wgmma_gemm_body's plain_store).
  bool const plain_store = g.N % 8 != 0 || g.ldd % 8 != 0 || (reinterpret_cast<uintptr_t>(g.d) & 15) != 0;
  if (plain_store && kSeedA) return -static_cast<int>(cudaErrorInvalidValue);
  CUtensorMap map_x, map_w, map_d{};
  constexpr int kBoxWidth = seed_box_width<kConsumers>();
  bool const x_encoded =
      kSeedA ? encode(&map_x, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, g.x, g.K, g.M, g.M, kBlockK, kBoxWidth,
                      kBoxWidth == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B)
             : encode(&map_x, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, g.x, g.M, g.K, g.K, kBlockM, kBlockK);
  if (!x_encoded ||
      !encode(&map_w, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, g.w, g.w_rows, g.K, g.K, BN, kBlockK) ||
      (!plain_store && !encode(&map_d, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, g.d, g.M, g.N, g.ldd, 64, 64))) {
    return -static_cast<int>(cudaErrorInvalidValue);
  }
  Schedule sched = make_schedule<BN, kConsumers>(g);
  sched.plain_store = plain_store;
  float *partials = nullptr;
  unsigned *counters = nullptr;
  if (sched.split_tiles() > 0) {
    if (workspace == nullptr) return -static_cast<int>(cudaErrorInvalidValue);
    partials = static_cast<float *>(workspace);
    counters = reinterpret_cast<unsigned *>(static_cast<uint8_t *>(workspace) + partials_bytes<BN, kConsumers>(sched));
    cudaError_t const err = cudaMemsetAsync(counters, 0, counter_bytes<kConsumers>(sched), stream);
    if (err != cudaSuccess) return -static_cast<int>(err);
  }
  int const grid = std::min(sched.units(), g.sm_count);
  cudaError_t const err = launch_kernel<wgmma_kernel<BN, kConsumers, kTwoAcc, kSeedA, kProbe, kStaged>()>(
      grid, L::kThreads, L::kSmem, g.device, stream, g.pdl, map_x, map_w, map_d, static_cast<__nv_bfloat16 *>(g.d),
      g.ldd, g.sx, g.sw, g.M, g.N, sched, partials, counters);
  return -static_cast<int>(err != cudaSuccess ? err : cudaGetLastError());
}

// The configuration on either form of x (GemmArgs::seed_a), or in builds with GEMM_SEED_A_EXPERIMENT (else
// cudaErrorInvalidValue) the seed-A kernel's staged form (GemmArgs::seed_a_staged; two consumer warpgroups)
// or one of its timing-only probes (GemmArgs::seed_probe, SeedProbe).
template <int BN, int kConsumers>
int run_wgmma(GemmArgs const &g, void *workspace, cudaStream_t stream) {
  if (g.seed_a_staged) {
#ifdef GEMM_SEED_A_EXPERIMENT
    if constexpr (kConsumers == 2) {
      if (g.seed_a && g.seed_probe == kProbeNone) {
        return run_wgmma_as<BN, kConsumers, false, true, kProbeNone, true>(g, workspace, stream);
      }
    }
#endif
    return -static_cast<int>(cudaErrorInvalidValue);
  }
  if (g.seed_probe > kProbeShipped) {
#ifdef GEMM_SEED_A_EXPERIMENT
    if (!g.seed_a) return -static_cast<int>(cudaErrorInvalidValue);
    switch (g.seed_probe) {
      case kProbeNoLoads:
        return run_wgmma_as<BN, kConsumers, false, true, kProbeNoLoads>(g, workspace, stream);
      case kProbeLoadsSs:
        return run_wgmma_as<BN, kConsumers, false, true, kProbeLoadsSs>(g, workspace, stream);
      case kProbeSsOnly:
        return run_wgmma_as<BN, kConsumers, false, true, kProbeSsOnly>(g, workspace, stream);
      case kProbeStaged:
        return run_wgmma_as<BN, kConsumers, false, true, kProbeStaged>(g, workspace, stream);
      default:
        break;
    }
#endif
    return -static_cast<int>(cudaErrorInvalidValue);
  }
  return g.seed_a ? run_wgmma_as<BN, kConsumers, false, true>(g, workspace, stream)
                  : run_wgmma_as<BN, kConsumers>(g, workspace, stream);
}

}  // namespace

bool seed_a_experiment_built() {
#ifdef GEMM_SEED_A_EXPERIMENT
  return true;
#else
  return false;
#endif
}

bool seed_a_fits(void const *a, float const *a_scale, int64_t M) {
  // TMA: a's rows (M bytes) 16-byte strided and based; the scales are copied 4 bytes at a time.
  return M > 0 && M % 16 == 0 && (reinterpret_cast<uintptr_t>(a) & 15) == 0 &&
         (reinterpret_cast<uintptr_t>(a_scale) & 3) == 0;
}

// The timing-only diagnostic (seed_fused_share_kernel): g.share = 2 or 4 CTAs a cluster with the copies
// into the other CTAs, 20 or 40 the same without them (the control). As many clusters as can be resident at
// once, the grid rounded up to whole clusters (a CTA without a unit only passes the cluster barriers).
// Without GEMM_SEED_DSMEM_EXPERIMENT there is no such kernel: cudaErrorInvalidValue.
#ifdef GEMM_SEED_DSMEM_EXPERIMENT
template <int kShare, bool kRemote>
cudaError_t launch_seed_fused_share(SeedGemmArgs const &g, Schedule const &sched, CUtensorMap const &map_a,
                                    CUtensorMap const &map_d, cudaStream_t stream) {
  namespace F = seed_fused;
  auto const kernel = seed_fused_share_kernel<kShare, kRemote>;
  CUtensorMap map_b_part;  // each CTA loads only the K rows of B's box that it transposes
  if (!encode(&map_b_part, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, g.b, g.K, g.N, g.N, F::kShareRows<kShare>, F::kBlockN)) {
    return cudaErrorInvalidValue;
  }
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, F::kSmem);
  if (err != cudaSuccess) return err;
  cudaLaunchConfig_t cfg{};
  cfg.blockDim = F::kThreads;
  cfg.dynamicSmemBytes = F::kSmem;
  cfg.stream = stream;
  cfg.gridDim = dim3(kShare * g.sm_count);
  int clusters = 0;
  err = cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg);
  if (err != cudaSuccess) return err;
  int const grid = std::min((sched.units() + kShare - 1) / kShare, clusters) * kShare;
  if (grid < kShare) return cudaErrorInvalidValue;
  static std::atomic<bool> said{false};
  if (!said.exchange(true)) {
    std::fprintf(stderr, "seed_fused_share_kernel<%d, %s>: %d clusters resident at most, grid %d CTAs\n", kShare,
                 kRemote ? "remote" : "control", clusters, grid);
  }
  cfg.gridDim = dim3(grid);
  return cudaLaunchKernelEx(&cfg, kernel, map_a, map_b_part, map_d, static_cast<__nv_bfloat16 *>(g.d), g.ldd, g.sa,
                            g.sb, g.M, g.N, sched);
}
#endif

static int run_seed_fused_share(SeedGemmArgs const &g, Schedule const &sched, CUtensorMap const &map_a,
                                CUtensorMap const &map_d, cudaStream_t stream) {
  cudaError_t err = cudaErrorInvalidValue;
#ifdef GEMM_SEED_DSMEM_EXPERIMENT
  if (g.share == 2) err = launch_seed_fused_share<2, true>(g, sched, map_a, map_d, stream);
  if (g.share == 4) err = launch_seed_fused_share<4, true>(g, sched, map_a, map_d, stream);
  if (g.share == 20) err = launch_seed_fused_share<2, false>(g, sched, map_a, map_d, stream);
  if (g.share == 40) err = launch_seed_fused_share<4, false>(g, sched, map_a, map_d, stream);
#else
  (void)g, (void)sched, (void)map_a, (void)map_d, (void)stream;
#endif
  return -static_cast<int>(err != cudaSuccess ? err : cudaGetLastError());
}

bool seed_fused_fits(SeedGemmArgs const &g) {
  auto const aligned = [](void const *p, uintptr_t n) { return (reinterpret_cast<uintptr_t>(p) & (n - 1)) == 0; };
  // TMA: 16-byte row strides and base addresses; the scales are copied 4 bytes at a time.
  return g.M % 16 == 0 && g.N % 16 == 0 && g.K % kBlockK == 0 && g.M > 0 && g.N > 0 && g.K > 0 &&
         g.ldd % 8 == 0 && aligned(g.a, 16) && aligned(g.b, 16) && aligned(g.d, 16) && aligned(g.sa, 4) &&
         aligned(g.sb, 4);
}

int run_seed_fused(SeedGemmArgs const &g, cudaStream_t stream) {
  namespace F = seed_fused;
  if (!seed_fused_fits(g)) return -static_cast<int>(cudaErrorInvalidValue);
  CUtensorMap map_a, map_b, map_d;
  if (!encode(&map_a, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, g.a, g.K, g.M, g.M, kBlockK, F::kBlockM) ||
      !encode(&map_b, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, g.b, g.K, g.N, g.N, kBlockK, F::kBlockN) ||
      !encode(&map_d, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, g.d, g.M, g.N, g.ldd, 64, 64)) {
    return -static_cast<int>(cudaErrorInvalidValue);
  }
  Schedule sched{(g.M + F::kBlockM - 1) / F::kBlockM, (g.N + F::kBlockN - 1) / F::kBlockN, 8, 0, g.K / kBlockK, 0, 1,
                 false};
  sched.dp_tiles = sched.count();
  if (g.share != 1) return run_seed_fused_share(g, sched, map_a, map_d, stream);
  int const grid = std::min(sched.units(), g.sm_count);
  cudaError_t const err = launch_kernel<seed_fused_kernel>(grid, F::kThreads, F::kSmem, g.device, stream, false, map_a,
                                                           map_b, map_d, static_cast<__nv_bfloat16 *>(g.d), g.ldd,
                                                           g.sa, g.sb, g.M, g.N, sched);
  return -static_cast<int>(err != cudaSuccess ? err : cudaGetLastError());
}

size_t workspace_cfg6(GemmArgs const &g) { return workspace_wgmma<128, 2>(g); }
int run_cfg6(GemmArgs const &g, void *ws, cudaStream_t stream) { return run_wgmma<128, 2>(g, ws, stream); }
char const *const kNameCfg6 = "wgmma_128x128_persistent";

size_t workspace_cfg7(GemmArgs const &g) { return workspace_wgmma<192, 2>(g); }
int run_cfg7(GemmArgs const &g, void *ws, cudaStream_t stream) { return run_wgmma<192, 2>(g, ws, stream); }
char const *const kNameCfg7 = "wgmma_128x192_persistent";

size_t workspace_cfg8(GemmArgs const &g) { return workspace_wgmma<128, 3>(g); }
int run_cfg8(GemmArgs const &g, void *ws, cudaStream_t stream) { return run_wgmma<128, 3>(g, ws, stream); }
char const *const kNameCfg8 = "wgmma_192x128_persistent";

size_t workspace_cfg10(GemmArgs const &g) { return workspace_wgmma<144, 3>(g); }
int run_cfg10(GemmArgs const &g, void *ws, cudaStream_t stream) {  // no room for A's fragments (seed_a)
  return g.seed_a ? -static_cast<int>(cudaErrorInvalidValue) : run_wgmma_as<144, 3>(g, ws, stream);
}
char const *const kNameCfg10 = "wgmma_192x144_persistent";

size_t workspace_cfg11(GemmArgs const &g) { return workspace_wgmma<96, 2>(g); }
int run_cfg11(GemmArgs const &g, void *ws, cudaStream_t stream) {  // two accumulators: not with seed_a
  return g.seed_a ? -static_cast<int>(cudaErrorInvalidValue) : run_wgmma_as<96, 2, true>(g, ws, stream);
}
char const *const kNameCfg11 = "wgmma_128x96_two_acc_persistent";

}  // namespace gemm_cuda
