// A hand-written sm_90a FP8 block-scaled GEMM (configurations 6 and 7, see gemm_cuda_kernels.h), for the
// tile shapes CUTLASS 4.2's blockwise collective cannot build: 128 x 192 output tiles (its builder wants
// the N tile to equal the 128-wide B-scale block) beside a plain 128 x 128 one to compare against.
//
// Structure (one CTA per SM, persistent, 3 warpgroups):
//   warpgroup 0    producer: one thread streams 128 x 128 (x) and BN x 128 (w) FP8 tiles of each K block
//                  into a ring of shared-memory stages with TMA (128-byte swizzle), mbarrier-tracked;
//   warpgroups 1-2 consumers: 64 rows each; per K block 4 wgmma m64nBNk32 into a fresh fp32
//                  accumulator, then the promotion `out += acc * x_scale[row] * w_scale[col block]` in
//                  fp32 registers (the contract's per-block scaling, the same arithmetic as CUTLASS's
//                  and cuBLASLt's blockwise kernels), then the stage goes back to the producer;
//                  epilogue: bf16 into 128-byte-swizzled shared memory, TMA store (clipped at M, N).
// A 192-wide N tile straddles two 128-wide w_scale blocks; which columns take which scale depends only on
// n0 % 128 (0 or 64 for BN = 192), so the promotion is compiled for both splits and picked per tile.
//
// The fragment layout of a wgmma m64nNk32 fp32 accumulator (PTX ISA, "Register fragments"): thread t of
// the warpgroup holds, for j < N/8, d[4j + 2h + e] = D[16 (t/32) + (t%32)/4 + 8h][8j + 2 (t%4) + e].

#include <cuda.h>  // CUtensorMap and its enums (types only: the encoder is fetched from the driver at run time)
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled

#include <cute/arch/mma_sm90_gmma.hpp>

#include <cstdint>
#include <atomic>
#include <utility>

#include "gemm_cuda_kernels.h"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define GEMM_WGMMA_DEVICE 1
#endif

namespace gemm_cuda {
namespace {

constexpr int kBlockM = 128;  // two consumer warpgroups of 64 rows
constexpr int kBlockK = 128;  // one scale block of K = one 128-byte swizzle row of FP8
constexpr int kThreads = 384;
constexpr int kSmemLimit = 232448;  // sm_90 opt-in dynamic shared memory per block (227 KiB)

template <int BN>
struct Layout {
  static_assert(BN == 128 || BN == 192, "N tile: 128 or 192 (the promotion handles at most two w_scale blocks)");
  static constexpr int kBytesA = kBlockM * kBlockK;  // per stage
  static constexpr int kBytesB = BN * kBlockK;
  static constexpr int kChunk = 64 * 128;  // one 64-row x 64-column bf16 output box (128-byte rows)
  static constexpr int kBytesOut = 2 * (BN / 64) * kChunk;  // both warpgroups
  static constexpr int kStages = (kSmemLimit - 1024 - 256 - kBytesOut) / (kBytesA + kBytesB);
  static constexpr int kOffB = kStages * kBytesA;
  static constexpr int kOffOut = kOffB + kStages * kBytesB;
  static constexpr int kOffBar = kOffOut + kBytesOut;
  static constexpr int kSmem = 1024 + kOffBar + 2 * kStages * 8;  // + slack to align the base to 1024
  static_assert(kSmem <= kSmemLimit, "shared memory");
  static_assert(kStages >= 3, "pipeline depth");
};

template <int BN>
struct Mma;
template <>
struct Mma<128> {
  using Op = cute::SM90::GMMA::MMA_64x128x32_F32E4M3E4M3_SS_TN<>;
};
template <>
struct Mma<192> {
  using Op = cute::SM90::GMMA::MMA_64x192x32_F32E4M3E4M3_SS_TN<>;
};


// ---------------------------------------------------------------------------------------------
// PTX wrappers (sm_90a)
// ---------------------------------------------------------------------------------------------
#ifdef GEMM_WGMMA_DEVICE
__device__ __forceinline__ uint32_t smem_addr(void const *p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void bar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count));
}

__device__ __forceinline__ void bar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ void bar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

__device__ __forceinline__ void bar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT_%=;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

__device__ __forceinline__ void tma_load(void const *map, uint32_t bar, uint32_t dst, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];"
      ::"r"(dst), "l"(map), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
}

// The same box multicast into the shared memory of every CTA of the cluster in `mask` (same offset in
// each), each completing its bytes on the mbarrier at the same offset in that CTA.
__device__ __forceinline__ void tma_load_multicast(void const *map, uint32_t bar, uint32_t dst, int c0, int c1,
                                                   uint16_t mask) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
      " [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(dst),
      "l"(map), "r"(bar), "r"(c0), "r"(c1), "h"(mask)
      : "memory");
}

// Arrive on the mbarrier at the same shared-memory offset in CTA `rank` of the cluster. Default (CTA-scope
// release) semantics: the stage's reads by wgmma are complete (wait_group) before this arrive, so nothing
// needs ordering at cluster scope; run 22's `.release.cluster` arrives made every K block ~2x slower.
__device__ __forceinline__ void bar_arrive_cluster(uint32_t bar, uint32_t rank) {
  asm volatile(
      "{\n"
      ".reg .b32 remote;\n"
      "mapa.shared::cluster.u32 remote, %0, %1;\n"
      "mbarrier.arrive.shared::cluster.b64 _, [remote];\n"
      "}\n" ::"r"(bar),
      "r"(rank)
      : "memory");
}

// Every thread of every CTA in the cluster (not warp-aligned: the producer warpgroup arrives diverged).
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
}

__device__ __forceinline__ void tma_store(void const *map, uint32_t src, int c0, int c1) {
  asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];"
               ::"l"(map), "r"(src), "r"(c0), "r"(c1)
               : "memory");
}

__device__ __forceinline__ void named_sync(int id) {
  asm volatile("bar.sync %0, 128;" ::"r"(id) : "memory");
}

// Shared-memory matrix descriptor of a K-major tile stored with 128-byte swizzle (rows of 128 bytes,
// 8-row / 1024-byte swizzle atoms): start address, stride between 8-row groups 1024 B, swizzle mode 1.
__device__ __forceinline__ uint64_t kmajor_sw128_desc(uint32_t addr) {
  return static_cast<uint64_t>((addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>(1) << 16) |
         (static_cast<uint64_t>(1024 >> 4) << 32) | (static_cast<uint64_t>(1) << 62);
}

template <class Op, int... I>
__device__ __forceinline__ void mma(uint64_t da, uint64_t db, float *d, bool accumulate,
                                    std::integer_sequence<int, I...>) {
  Op::fma(da, db, d[I]..., accumulate ? cute::SM90::GMMA::ScaleOut::One : cute::SM90::GMMA::ScaleOut::Zero);
}

// Compiler-level fence on every accumulator register: keeps reads and writes of `acc` on their side of
// the asynchronous wgmma that owns them.
template <int N>
__device__ __forceinline__ void fence_all(float *acc) {
#pragma unroll
  for (int i = 0; i < N / 2; ++i) cute::warpgroup_fence_operand(acc[i]);
}

// One K block's wgmma batch into `acc` (N/2 registers): 4 x m64nNk32, 32 bytes of K each (+2 in the
// descriptors' address field), committed as one group.
template <int N>
__device__ __forceinline__ void issue_batch(float *acc, uint64_t da, uint64_t db) {
  fence_all<N>(acc);
  cute::warpgroup_arrive();
#pragma unroll
  for (int k = 0; k < kBlockK / 32; ++k) {
    mma<typename Mma<N>::Op>(da + 2 * k, db + 2 * k, acc, k > 0, std::make_integer_sequence<int, N / 2>{});
  }
  cute::warpgroup_commit_batch();
}

// out += acc * scale: the scale of row h (0: row r, 1: row r + 8) and of the column's w_scale block
// (8-column groups j < JB of the tile are in its first block).
template <int NJ, int JB>
__device__ __forceinline__ void promote(float *out, float const *acc, float s00, float s01, float s10, float s11) {
#pragma unroll
  for (int j = 0; j < NJ; ++j) {
    float const r0 = j < JB ? s00 : s01;
    float const r1 = j < JB ? s10 : s11;
    out[4 * j + 0] = fmaf(acc[4 * j + 0], r0, out[4 * j + 0]);
    out[4 * j + 1] = fmaf(acc[4 * j + 1], r0, out[4 * j + 1]);
    out[4 * j + 2] = fmaf(acc[4 * j + 2], r1, out[4 * j + 2]);
    out[4 * j + 3] = fmaf(acc[4 * j + 3], r1, out[4 * j + 3]);
  }
}

// The same, the tile's first w_scale block ending after 64 columns (split_at_64) or after 128.
template <int NJ>
__device__ __forceinline__ void promote_cols(bool split_at_64, float *out, float const *acc, float a0, float a1,
                                             float b0, float b1) {
  if (split_at_64) {
    promote<NJ, 8>(out, acc, a0 * b0, a0 * b1, a1 * b0, a1 * b1);
  } else {
    promote<NJ, 16>(out, acc, a0 * b0, a0 * b1, a1 * b0, a1 * b1);
  }
}
#endif  // GEMM_WGMMA_DEVICE

// The persistent schedule: tile t -> (tile_m, tile_n), in groups of `group` tiles along M (or along N
// when along_n) so that the CTAs in flight share operand tiles in L2.
struct Schedule {
  int tiles_m, tiles_n, group, along_n;
  __host__ __device__ int count() const { return tiles_m * tiles_n; }
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

// Kernel variants: BN (N tile: 128 or 192); kCluster 1, or 2: CTA pairs along M share the w tile, each
// CTA loading half of it by TMA multicast into both CTAs' shared memory (half the L2 reads of w, as
// cuBLASLt's 2x1 clusters do); kPromote, how the promotions keep off the tensor cores' critical path:
//   kSerial      each warpgroup waits for its batch, then promotes it (the two warpgroups run in step, so
//                the tensor cores can idle while both promote);
//   kTwoAcc      BN = 128 only (out + two 64-register accumulators fit in 232 registers): batch kb runs
//                while batch kb - 1 is promoted;
//   kStaggered   serial, but warpgroup 1 starts one K block after warpgroup 0, so that one warpgroup's
//                promotion overlaps the other's batch.
// The schedule's units are single tiles, or with kCluster = 2 pairs of M tiles (tiles_m = pairs).
enum Promote { kSerial = 0, kTwoAcc = 1, kStaggered = 2 };

template <int BN, int kCluster, int kPromote>
__global__ void __launch_bounds__(kThreads, 1)
    wgmma_gemm_kernel(__grid_constant__ CUtensorMap const map_x, __grid_constant__ CUtensorMap const map_w,
                      __grid_constant__ CUtensorMap const map_d, float const *__restrict__ sx,
                      float const *__restrict__ sw, int M, int N, int K, Schedule sched) {
#ifdef GEMM_WGMMA_DEVICE
  static_assert(kCluster == 1 || kCluster == 2, "clusters of 1 or 2 CTAs");
  static_assert(kPromote != kTwoAcc || BN == 128, "two batch accumulators fit the registers at BN = 128 only");
  using L = Layout<BN>;
  extern __shared__ uint8_t smem_raw[];
  uint8_t *smem = reinterpret_cast<uint8_t *>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint32_t const base = smem_addr(smem);
  uint32_t const full_bar = base + L::kOffBar;  // kStages barriers: the stage's TMA bytes arrived
  uint32_t const empty_bar = full_bar + 8 * L::kStages;  // kStages barriers: every consumer is done
  int const kblocks = K / kBlockK;
  int const units = sched.count();
  int const tiles_m = (M + kBlockM - 1) / kBlockM;
  uint32_t rank = 0;  // within the cluster
  if constexpr (kCluster > 1) asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  int const first_unit = blockIdx.x / kCluster, unit_step = gridDim.x / kCluster;

  if (threadIdx.x == 0) {
    for (int s = 0; s < L::kStages; ++s) {
      bar_init(full_bar + 8 * s, 1);
      bar_init(empty_bar + 8 * s, 8 * kCluster);  // lane 0 of each consumer warp of every CTA it feeds
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  if constexpr (kCluster > 1) {
    cluster_sync();  // the peer's barriers are initialised before anything signals them
  } else {
    __syncthreads();
  }

  int const wg = threadIdx.x / 128;
  if (wg == 0) {  // producer
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (threadIdx.x == 0) {
      asm volatile("prefetch.tensormap [%0];" ::"l"(&map_x) : "memory");
      asm volatile("prefetch.tensormap [%0];" ::"l"(&map_w) : "memory");
      uint32_t it = 0;
      for (int u = first_unit; u < units; u += unit_step) {
        int um, tn;
        sched.tile(u, um, tn);
        // The second tile of a pair past M re-reads the last tile (never stored): each CTA of a cluster
        // runs the same number of K blocks, and its half of w is still needed by its peer.
        int const tm = min(um * kCluster + static_cast<int>(rank), tiles_m - 1);
        for (int kb = 0; kb < kblocks; ++kb, ++it) {
          int const s = it % L::kStages;
          bar_wait(empty_bar + 8 * s, ((it / L::kStages) & 1) ^ 1);  // a fresh barrier passes parity 1
          bar_expect_tx(full_bar + 8 * s, L::kBytesA + L::kBytesB);  // with kCluster 2: both halves of w
          tma_load(&map_x, full_bar + 8 * s, base + s * L::kBytesA, kb * kBlockK, tm * kBlockM);
          if constexpr (kCluster == 1) {
            tma_load(&map_w, full_bar + 8 * s, base + L::kOffB + s * L::kBytesB, kb * kBlockK, tn * BN);
          } else {
            constexpr int kHalf = BN / 2;  // rows of w per CTA; a multiple of the 8-row swizzle atom
            int const row = min(tn * BN + static_cast<int>(rank) * kHalf, N - 1);  // rows >= N: unused columns
            tma_load_multicast(&map_w, full_bar + 8 * s, base + L::kOffB + s * L::kBytesB + rank * kHalf * kBlockK,
                               kb * kBlockK, row, 0x3);
          }
        }
      }
    }
  } else {
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    int const cw = wg - 1;  // consumer warpgroup: rows 64 cw .. 64 cw + 63 of the tile
    int const t128 = threadIdx.x % 128;
    int const warp = t128 / 32, lane = t128 % 32;
    int const nblocks = (N + 127) / 128;  // w_scale rows
    uint32_t const out_base = base + L::kOffOut + cw * (BN / 64) * L::kChunk;
    // The stage's operands are consumed: tell every producer that writes into it.
    auto release = [&](int s) {
      if (lane != 0) return;
      if constexpr (kCluster == 1) {
        bar_arrive(empty_bar + 8 * s);
      } else {
#pragma unroll
        for (uint32_t r = 0; r < kCluster; ++r) bar_arrive_cluster(empty_bar + 8 * s, r);
      }
    };
    float out[BN / 2];
    float acc[BN / 2];
    uint32_t it = 0;
    for (int u = first_unit; u < units; u += unit_step) {
      int um, tn;
      sched.tile(u, um, tn);
      int const m0 = (um * kCluster + static_cast<int>(rank)) * kBlockM, n0 = tn * BN;
      int const row = m0 + 64 * cw + 16 * warp + lane / 4;  // and row + 8
      // Scale rows past M / blocks past N are clamped (their outputs are clipped by the TMA store).
      float const *sx0 = sx + static_cast<int64_t>(min(row, M - 1)) * kblocks;
      float const *sx1 = sx + static_cast<int64_t>(min(row + 8, M - 1)) * kblocks;
      float const *sw0 = sw + static_cast<int64_t>(min(n0 / 128, nblocks - 1)) * kblocks;
      float const *sw1 = sw + static_cast<int64_t>(min(n0 / 128 + 1, nblocks - 1)) * kblocks;
      bool const split_at_64 = (n0 % 128) != 0;  // BN = 192 only: columns 0..63 in the first block
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) out[i] = 0.f;

      if constexpr (kPromote != kTwoAcc) {
        for (int kb = 0; kb < kblocks; ++kb, ++it) {
          int const s = it % L::kStages;
          // the scales first: their loads are in flight while the batch runs
          float const a0 = __ldg(sx0 + kb), a1 = __ldg(sx1 + kb);
          float const b0 = __ldg(sw0 + kb), b1 = __ldg(sw1 + kb);
          bar_wait(full_bar + 8 * s, (it / L::kStages) & 1);
          // Staggered: warpgroup 1's very first batch waits until warpgroup 0's first one is done (named
          // barrier 3, both consumer warpgroups); from then on the two stay about a batch apart.
          if (kPromote == kStaggered && it == 0 && cw == 1) asm volatile("bar.sync 3, 256;" ::: "memory");
          issue_batch<BN>(acc, kmajor_sw128_desc(base + s * L::kBytesA + cw * 64 * kBlockK),
                          kmajor_sw128_desc(base + L::kOffB + s * L::kBytesB));
          cute::warpgroup_wait<0>();
          if (kPromote == kStaggered && it == 0 && cw == 0) asm volatile("bar.arrive 3, 256;" ::: "memory");
          fence_all<BN>(acc);
          release(s);
          promote_cols<BN / 8>(split_at_64, out, acc, a0, a1, b0, b1);
        }
      } else {
        // Batch kb goes into acc (kb even) or acc2 (kb odd), and block kb - 1 is promoted while it runs.
        // The loop is unrolled by two so that each array is named statically: ptxas then sees that the
        // registers read after `wait<1>` belong to a retired batch (else it serializes every wgmma).
        float acc2[BN / 2];
        // Each batch's scales (x rows r and r + 8, the w block) travel with it to its promotion.
        auto issue = [&](float *cur, int kb) {
          int const s = it % L::kStages;
          float3 const scales = make_float3(__ldg(sx0 + kb), __ldg(sx1 + kb), __ldg(sw0 + kb));
          bar_wait(full_bar + 8 * s, (it / L::kStages) & 1);
          issue_batch<BN>(cur, kmajor_sw128_desc(base + s * L::kBytesA + cw * 64 * kBlockK),
                          kmajor_sw128_desc(base + L::kOffB + s * L::kBytesB));
          ++it;
          return scales;
        };
        auto retire = [&](float *done, float3 sc, uint32_t done_it) {  // `done`'s batch has completed
          fence_all<BN>(done);
          release(done_it % L::kStages);
          float const s0 = sc.x * sc.z, s1 = sc.y * sc.z;
          promote<BN / 8, BN / 8>(out, done, s0, s0, s1, s1);
        };
        float3 sc = issue(acc, 0);
        int kb = 1;
        for (; kb + 1 < kblocks; kb += 2) {
          float3 const sc2 = issue(acc2, kb);
          cute::warpgroup_wait<1>();
          retire(acc, sc, it - 2);
          sc = issue(acc, kb + 1);
          cute::warpgroup_wait<1>();
          retire(acc2, sc2, it - 2);
        }
        if (kb < kblocks) {  // an even number of K blocks: the last one goes into acc2
          float3 const sc2 = issue(acc2, kb);
          cute::warpgroup_wait<1>();
          retire(acc, sc, it - 2);
          cute::warpgroup_wait<0>();
          retire(acc2, sc2, it - 1);
        } else {
          cute::warpgroup_wait<0>();
          retire(acc, sc, it - 1);
        }
      }

      // Epilogue: this warpgroup's 64 x BN bf16 block, 64 columns per 128-byte-swizzled box.
      if (t128 == 0) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");  // last tile's store read
      named_sync(1 + cw);
      int const r = 16 * warp + lane / 4;  // row within the warpgroup's block (and r + 8)
#pragma unroll
      for (int j = 0; j < BN / 8; ++j) {
        uint32_t const chunk = out_base + (j / 8) * L::kChunk;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          int const rr = r + 8 * h;
          __nv_bfloat162 const v = __floats2bfloat162_rn(out[4 * j + 2 * h], out[4 * j + 2 * h + 1]);
          uint32_t const addr = chunk + rr * 128 + (((j % 8) ^ (rr % 8)) << 4) + 4 * (lane % 4);
          asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(*reinterpret_cast<uint32_t const *>(&v)));
        }
      }
      asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // make the writes visible to TMA
      named_sync(1 + cw);
      if (t128 == 0 && m0 + 64 * cw < M) {
#pragma unroll
        for (int c = 0; c < BN / 64; ++c) {
          if (n0 + 64 * c < N) tma_store(&map_d, out_base + c * L::kChunk, n0 + 64 * c, m0 + 64 * cw);
        }
        asm volatile("cp.async.bulk.commit_group;" ::: "memory");
      }
    }
    if (t128 == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
  }
  // No CTA leaves while its peer may still arrive on its barriers or multicast into its shared memory.
  if constexpr (kCluster > 1) cluster_sync();
#endif  // GEMM_WGMMA_DEVICE
}

// ---------------------------------------------------------------------------------------------
// host side
// ---------------------------------------------------------------------------------------------
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void *p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      p = nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

// A 2-D row-major tensor (rows x cols elements, row stride ld elements) read or written in boxes of
// box_rows x box_cols with 128-byte swizzle (box_cols * element size must be 128 bytes).
bool encode(CUtensorMap *map, CUtensorMapDataType type, int elem_bytes, void const *ptr, uint64_t rows,
            uint64_t cols, uint64_t ld, uint32_t box_rows, uint32_t box_cols) {
  auto fn = tensor_map_encoder();
  if (fn == nullptr) return false;
  cuuint64_t dims[2] = {cols, rows};
  cuuint64_t strides[1] = {ld * elem_bytes};
  cuuint32_t box[2] = {box_cols, box_rows};
  cuuint32_t elem_strides[2] = {1, 1};
  return fn(map, type, 2, const_cast<void *>(ptr), dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
            CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// How many 2-CTA clusters of this kernel fit on the device at once (its persistent grid), once per device.
template <auto kKernel>
int max_clusters(GemmArgs const &g, int smem) {
  static std::atomic<int> known[64];
  int n = known[g.device & 63].load(std::memory_order_relaxed);
  if (n > 0) return n;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(2 * (g.sm_count / 2));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = 2;
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  if (cudaOccupancyMaxActiveClusters(&n, kKernel, &cfg) != cudaSuccess || n <= 0) {
    (void)cudaGetLastError();  // not sticky; fall back to one cluster per SM pair
    n = g.sm_count / 2;
  }
  known[g.device & 63].store(n, std::memory_order_relaxed);
  return n;
}

template <int BN, int kCluster, int kPromote>
int run_wgmma(GemmArgs const &g, void *, cudaStream_t stream) {
  using L = Layout<BN>;
  // bf16 output only, K a whole number of blocks, TMA's 16-byte row strides and base addresses.
  if (g.kslices != 1 || g.K % kBlockK != 0 || g.N % 8 != 0 || g.ldd % 8 != 0 ||
      (reinterpret_cast<uintptr_t>(g.d) & 15) != 0) {
    return -static_cast<int>(cudaErrorInvalidValue);
  }
  CUtensorMap map_x, map_w, map_d;
  if (!encode(&map_x, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, g.x, g.M, g.K, g.K, kBlockM, kBlockK) ||
      !encode(&map_w, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, g.w, g.N, g.K, g.K, BN / kCluster, kBlockK) ||
      !encode(&map_d, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, g.d, g.M, g.N, g.ldd, 64, 64)) {
    return -static_cast<int>(cudaErrorInvalidValue);
  }
  // Opt in to more than 48 KiB of shared memory, once per device and kernel (a race only sets it twice).
  // No std::call_once: it needs glibc 2.34's pthread_once, outside the manylinux_2_28 ABI the Hub accepts.
  constexpr auto kernel = wgmma_gemm_kernel<BN, kCluster, kPromote>;
  static std::atomic<bool> opted_in[64];
  if (!opted_in[g.device & 63].load(std::memory_order_relaxed)) {
    cudaError_t const err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, L::kSmem);
    if (err != cudaSuccess) return -static_cast<int>(err);
    opted_in[g.device & 63].store(true, std::memory_order_relaxed);
  }
  int const tiles_m = (g.M + kBlockM - 1) / kBlockM;
  Schedule sched{(tiles_m + kCluster - 1) / kCluster, (g.N + BN - 1) / BN, g.swizzle > 1 ? g.swizzle : 8,
                 g.raster == 2 ? 1 : 0};
  if constexpr (kCluster == 1) {
    int const grid = sched.count() < g.sm_count ? sched.count() : g.sm_count;
    kernel<<<grid, kThreads, L::kSmem, stream>>>(map_x, map_w, map_d, g.sx, g.sw, g.M, g.N, g.K, sched);
  } else {
    int const clusters = max_clusters<kernel>(g, L::kSmem);
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(2 * (sched.count() < clusters ? sched.count() : clusters));
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = L::kSmem;
    cfg.stream = stream;
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = 2;
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = 1;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    cudaError_t const err =
        cudaLaunchKernelEx(&cfg, kernel, map_x, map_w, map_d, g.sx, g.sw, g.M, g.N, g.K, sched);
    if (err != cudaSuccess) return -static_cast<int>(err);
  }
  return -static_cast<int>(cudaGetLastError());
}

}  // namespace

size_t workspace_cfg6(GemmArgs const &) { return 0; }
int run_cfg6(GemmArgs const &g, void *ws, cudaStream_t stream) { return run_wgmma<128, 1, kSerial>(g, ws, stream); }
char const *const kNameCfg6 = "wgmma_128x128_persistent";

size_t workspace_cfg7(GemmArgs const &) { return 0; }
int run_cfg7(GemmArgs const &g, void *ws, cudaStream_t stream) { return run_wgmma<192, 1, kSerial>(g, ws, stream); }
char const *const kNameCfg7 = "wgmma_128x192_persistent";

size_t workspace_cfg8(GemmArgs const &) { return 0; }
int run_cfg8(GemmArgs const &g, void *ws, cudaStream_t stream) { return run_wgmma<192, 2, kSerial>(g, ws, stream); }
char const *const kNameCfg8 = "wgmma_128x192_persistent_cluster2x1";

size_t workspace_cfg9(GemmArgs const &) { return 0; }
int run_cfg9(GemmArgs const &g, void *ws, cudaStream_t stream) { return run_wgmma<128, 2, kSerial>(g, ws, stream); }
char const *const kNameCfg9 = "wgmma_128x128_persistent_cluster2x1";

size_t workspace_cfg10(GemmArgs const &) { return 0; }
int run_cfg10(GemmArgs const &g, void *ws, cudaStream_t stream) { return run_wgmma<128, 1, kTwoAcc>(g, ws, stream); }
char const *const kNameCfg10 = "wgmma_128x128_persistent_2acc";

size_t workspace_cfg11(GemmArgs const &) { return 0; }
int run_cfg11(GemmArgs const &g, void *ws, cudaStream_t stream) { return run_wgmma<128, 2, kTwoAcc>(g, ws, stream); }
char const *const kNameCfg11 = "wgmma_128x128_persistent_cluster2x1_2acc";

size_t workspace_cfg12(GemmArgs const &) { return 0; }
int run_cfg12(GemmArgs const &g, void *ws, cudaStream_t stream) { return run_wgmma<192, 1, kStaggered>(g, ws, stream); }
char const *const kNameCfg12 = "wgmma_128x192_persistent_staggered";

size_t workspace_cfg13(GemmArgs const &) { return 0; }
int run_cfg13(GemmArgs const &g, void *ws, cudaStream_t stream) { return run_wgmma<128, 1, kStaggered>(g, ws, stream); }
char const *const kNameCfg13 = "wgmma_128x128_persistent_staggered";

}  // namespace gemm_cuda
