// The seed layout without a full transpose (configurations kSeedFused + 0..3, see gemm_cuda.cu).
//
// FP8 wgmma reads shared-memory operands only K-major, and the seed layout's a (K, M) and b (K, N) are
// both M/N-major. But wgmma's A operand may come from registers instead, and registers can be filled
// from an M/N-major tile: ldmatrix.trans over 16-bit pairs, then byte permutes. So one operand (the
// larger) is streamed straight from its seed tensor (TMA, 128-byte swizzle, P-major tiles) into
// registers, and only the other is transposed into a K-major scratch by a separate pass (the Q operand,
// read by TMA as in gemm_cuda_wgmma.cu):
//   kSwap = false: P = a (rows m), Q = w = b transposed;  D (m, n) = C;
//   kSwap = true:  P = b (rows n), Q = x = a transposed;  D (n, m) = C transposed, written back
//                  transposed by the epilogue.
// Scales are read straight from the seed's a_scale (K/128, M) and b_scale (K/128, NB): the per-row
// a_scale of the swapped problem is per column of D, staged per stage in shared memory by TMA.
//
// Row order. ldmatrix.trans hands lane l the 16-bit pair of P rows (2 (l/4), 2 (l/4) + 1), so lane l
// holds physical rows 2g, 2g + 1 (g = l/4) where the wgmma fragment wants rows g, g + 8: the tile's P rows
// are permuted (fragment row g <-> physical row 2g, row g + 8 <-> 2g + 1, per 16-row warp slice). The
// products are unchanged; the scales and the epilogue use the physical rows.
//
// K order. Lane l needs the 4 bytes of K 4 (l%4) .. +3 of its rows in one register; a transposed 8x8
// matrix gives it K rows 2 (l%4), 2 (l%4) + 1 of the matrix. The matrix rows are any 8 K rows (each lane
// names the address of one), so two matrices X, Y give lane l rows {4c, 4c+1} and {4c+2, 4c+3} (c = l%4),
// chosen so that each matrix's 8 rows fall in 8 different 16-byte bank groups of the swizzled tile; one
// byte permute per register then assembles the fragment.

#include <cuda_bf16.h>

#include <cstdint>

#include "gemm_cuda_kernels.h"
#include "gemm_cuda_wgmma.cuh"

namespace gemm_cuda {
namespace {

using namespace wgmma;  // NOLINT(build/namespaces): this file's own building blocks

template <int BN, bool kSwap>
struct SeedLayout {
  static_assert(BN == 128 || BN == 192, "Q tile: 128 or 192");
  static constexpr int kBytesP = kBlockM * kBlockK;  // per stage: 128 K rows x 128 P bytes
  static constexpr int kBytesQ = BN * kBlockK;       // BN Q rows x 128 K bytes
  static constexpr int kBytesS = kSwap ? BN * 4 : 0;  // per-column scales (swapped only)
  static constexpr int kBytesOut = 2 * (BN / 64) * kChunk;
  static constexpr int kStages = (kSmemLimit - 1024 - 256 - kBytesOut) / (kBytesP + kBytesQ + kBytesS);
  static constexpr int kOffQ = kStages * kBytesP;
  static constexpr int kOffOut = kOffQ + kStages * kBytesQ;  // 1024-aligned (TMA store boxes)
  static constexpr int kOffS = kOffOut + kBytesOut;
  static constexpr int kOffBar = kOffS + kStages * kBytesS;
  static constexpr int kSmem = 1024 + kOffBar + 2 * kStages * 8;
  static_assert(kSmem <= kSmemLimit, "shared memory");
  static_assert(kStages >= 3, "pipeline depth");
};

struct SeedParams {
  float const *sp;  // P's scales: a_scale (K/128, P) (kSwap false) or b_scale (K/128, NB) (true)
  float const *sq;  // Q's scales when per column block: b_scale (K/128, NB) (kSwap false only)
  int P, Q, K, NB;  // P / Q rows (M / N or N / M), K, b_scale columns
};

#ifdef GEMM_WGMMA_DEVICE
// out += acc * sp * cs[col]: per-column scales cs (shared memory, BN floats) and one row scale.
template <int NJ>
__device__ __forceinline__ void promote_colscale(float *out, float const *acc, float sp, uint32_t cs, int c) {
#pragma unroll
  for (int j = 0; j < NJ; ++j) {
    float s0, s1;
    asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(s0), "=f"(s1) : "r"(cs + 4 * (8 * j + 2 * c)));
    s0 *= sp;
    s1 *= sp;
    out[4 * j + 0] = fmaf(acc[4 * j + 0], s0, out[4 * j + 0]);
    out[4 * j + 1] = fmaf(acc[4 * j + 1], s1, out[4 * j + 1]);
    out[4 * j + 2] = fmaf(acc[4 * j + 2], s0, out[4 * j + 2]);
    out[4 * j + 3] = fmaf(acc[4 * j + 3], s1, out[4 * j + 3]);
  }
}
#endif  // GEMM_WGMMA_DEVICE

template <int BN, bool kSwap, bool kPrefetch>
__global__ void __launch_bounds__(kThreads, 1)
    wgmma_seed_kernel(__grid_constant__ CUtensorMap const map_p, __grid_constant__ CUtensorMap const map_q,
                      __grid_constant__ CUtensorMap const map_d, __grid_constant__ CUtensorMap const map_s,
                      SeedParams const q, Schedule sched) {
#ifdef GEMM_WGMMA_DEVICE
  using L = SeedLayout<BN, kSwap>;
  extern __shared__ uint8_t smem_raw[];
  uint8_t *smem = reinterpret_cast<uint8_t *>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint32_t const base = smem_addr(smem);
  uint32_t const full_bar = base + L::kOffBar;
  uint32_t const empty_bar = full_bar + 8 * L::kStages;
  int const kblocks = q.K / kBlockK;
  int const tiles = sched.count();

  if (threadIdx.x == 0) {
    for (int s = 0; s < L::kStages; ++s) {
      bar_init(full_bar + 8 * s, 1);
      bar_init(empty_bar + 8 * s, 8);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();

  int const wg = threadIdx.x / 128;
  if (wg == 0) {  // producer
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (threadIdx.x == 0) {
      uint32_t it = 0;
      for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        int tp, tq;
        sched.tile(t, tp, tq);
        for (int kb = 0; kb < kblocks; ++kb, ++it) {
          int const s = it % L::kStages;
          bar_wait(empty_bar + 8 * s, ((it / L::kStages) & 1) ^ 1);
          bar_expect_tx(full_bar + 8 * s, L::kBytesP + L::kBytesQ + L::kBytesS);
          // P tile: 128 K rows x 128 P bytes of the seed tensor (its columns are P).
          tma_load(&map_p, full_bar + 8 * s, base + s * L::kBytesP, tp * kBlockM, kb * kBlockK);
          tma_load(&map_q, full_bar + 8 * s, base + L::kOffQ + s * L::kBytesQ, kb * kBlockK, tq * BN);
          if constexpr (kSwap) {  // a_scale[kb, q0 .. q0 + BN) (zero past M)
            tma_load(&map_s, full_bar + 8 * s, base + L::kOffS + s * L::kBytesS, tq * BN, kb);
          }
        }
      }
    }
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
  int const cw = wg - 1;
  int const t128 = threadIdx.x % 128;
  int const warp = t128 / 32, lane = t128 % 32;
  int const g = lane / 4, c = lane % 4;
  // ldmatrix row address of this lane within a stage's P tile, for the k32 step at K byte 0: matrix
  // lane / 8 (0: X, 1: Y of K bytes 0..15; 2: X, 3: Y of 16..31), its row lane % 8. X gives lane l the
  // K rows {4c, 4c+1} for c < 2 and {4c+2, 4c+3} for c >= 2, Y the other two, so that each matrix's
  // rows are 8 distinct K rows mod 8 (the 128-byte swizzle spreads them over all bank groups).
  int const mrow = lane % 8, mat = lane / 8;
  int const pair = mrow / 2, odd = mrow % 2;  // the lane (c = pair) that receives this row
  int const lo = (pair < 2) == ((mat % 2) == 0) ? 0 : 2;  // X: bytes {0,1} of the 4 for c < 2
  int const krow = 16 * (mat / 2) + 4 * pair + lo + odd;
  uint32_t const p_lane = krow * 128 + ((((4 * cw + warp) ^ (krow % 8))) << 4);
  // Byte permutes: X = (k0, p_even), (k0, p_odd), (k1, p_even), (k1, p_odd), Y likewise for k2, k3; for
  // c >= 2 X holds k2, k3 and Y k0, k1.
  uint32_t const sel_even = c < 2 ? 0x6420u : 0x2064u;
  uint32_t const sel_odd = c < 2 ? 0x7531u : 0x3175u;
  uint32_t const out_base = base + L::kOffOut + cw * (BN / 64) * kChunk;
  float out[BN / 2];
  float acc[BN / 2];
  // This warpgroup's A fragments of one K block from stage s: 4 transposed ldmatrix + 16 byte permutes.
  auto load_fragments = [&](int s, uint32_t *f) {
    uint32_t const p_addr = base + s * L::kBytesP + p_lane;
#pragma unroll
    for (int k = 0; k < kBlockK / 32; ++k) {
      uint32_t x0, y0, x1, y1;
      ldmatrix_x4_trans(p_addr + k * 32 * 128, x0, y0, x1, y1);
      f[4 * k + 0] = __byte_perm(x0, y0, sel_even);  // row g (physical 2g), K 4c .. 4c+3
      f[4 * k + 1] = __byte_perm(x0, y0, sel_odd);   // row g + 8 (physical 2g + 1)
      f[4 * k + 2] = __byte_perm(x1, y1, sel_even);  // the same, K 16 + 4c ..
      f[4 * k + 3] = __byte_perm(x1, y1, sel_odd);
    }
  };
  // The fragments of the next K block (of this tile or the next) are loaded while this one's batch
  // runs, so that the tensor cores do not wait for ldmatrix between batches.
  uint32_t frag[16], next[16];
  bool have_next = false;
  uint32_t it = 0;
  for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
    int tp, tq;
    sched.tile(t, tp, tq);
    int const p0 = tp * kBlockM, q0 = tq * BN;
    int const prow = p0 + 64 * cw + 16 * warp + 2 * g;  // physical P rows prow (h = 0), prow + 1 (h = 1)
    // Scale pointers at kb = 0 (rows past P / blocks past N clamped: their outputs are clipped).
    float const *sp0, *sp1, *sq0, *sq1;
    if constexpr (kSwap) {
      sp0 = sp1 = q.sp + min(p0 / 128, q.NB - 1);  // the tile's 128 P rows = one b_scale block
      sq0 = sq1 = nullptr;
    } else {
      sp0 = q.sp + min(prow, q.P - 1);
      sp1 = q.sp + min(prow + 1, q.P - 1);
      sq0 = q.sq + min(q0 / 128, q.NB - 1);
      sq1 = q.sq + min(q0 / 128 + 1, q.NB - 1);
    }
    int const sp_step = kSwap ? q.NB : q.P;
    bool const split_at_64 = (q0 % 128) != 0;
#pragma unroll
    for (int i = 0; i < BN / 2; ++i) out[i] = 0.f;

    for (int kb = 0; kb < kblocks; ++kb, ++it) {
      int const s = it % L::kStages;
      float const a0 = __ldg(sp0 + static_cast<int64_t>(kb) * sp_step);
      float a1 = a0, b0 = 0.f, b1 = 0.f;
      if constexpr (!kSwap) {
        a1 = __ldg(sp1 + static_cast<int64_t>(kb) * sp_step);
        b0 = __ldg(sq0 + static_cast<int64_t>(kb) * q.NB);
        b1 = __ldg(sq1 + static_cast<int64_t>(kb) * q.NB);
      }
      if (have_next) {
#pragma unroll
        for (int i = 0; i < 16; ++i) frag[i] = next[i];
      } else {
        bar_wait(full_bar + 8 * s, (it / L::kStages) & 1);
        load_fragments(s, frag);
      }
      issue_batch_rs<BN>(acc, frag, kmajor_sw128_desc(base + L::kOffQ + s * L::kBytesQ));
      have_next = kPrefetch && (kb + 1 < kblocks || t + static_cast<int>(gridDim.x) < tiles);
      if (have_next) {
        uint32_t const it1 = it + 1;
        bar_wait(full_bar + 8 * (it1 % L::kStages), (it1 / L::kStages) & 1);
        load_fragments(it1 % L::kStages, next);
      }
      cute::warpgroup_wait<0>();
      fence_all<BN>(acc);
#pragma unroll
      for (int i = 0; i < 16; ++i) cute::warpgroup_fence_operand(frag[i]);
      if constexpr (kSwap) {
        promote_colscale<BN / 8>(out, acc, a0, base + L::kOffS + s * L::kBytesS, c);
        if (lane == 0) bar_arrive(empty_bar + 8 * s);  // after the scales were read
      } else {
        if (lane == 0) bar_arrive(empty_bar + 8 * s);
        promote_cols<BN / 8>(split_at_64, out, acc, a0, a1, b0, b1);
      }
    }

    // Epilogue: bf16 into 64 x 64 boxes of 128-byte-swizzled shared memory, then TMA stores.
    if (t128 == 0) asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
    named_sync(1 + cw);
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
      uint32_t const box = out_base + (j / 8) * kChunk;
      if constexpr (kSwap) {
        // D (n, m) -> C (m, n): column 8j + 2c + e of D is a row of the box; rows h = 0, 1 (physical
        // n = 16 warp + 2g + h) are two adjacent columns of C: one bf16 pair.
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          int const rr = (8 * j + 2 * c + e) % 64;
          __nv_bfloat162 const v = __floats2bfloat162_rn(out[4 * j + e], out[4 * j + 2 + e]);
          uint32_t const addr = box + rr * 128 + (((2 * warp + g / 4) ^ (rr % 8)) << 4) + 4 * (g % 4);
          asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(*reinterpret_cast<uint32_t const *>(&v)));
        }
      } else {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          int const rr = 16 * warp + 2 * g + h;
          __nv_bfloat162 const v = __floats2bfloat162_rn(out[4 * j + 2 * h], out[4 * j + 2 * h + 1]);
          uint32_t const addr = box + rr * 128 + (((j % 8) ^ (rr % 8)) << 4) + 4 * c;
          asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(*reinterpret_cast<uint32_t const *>(&v)));
        }
      }
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    named_sync(1 + cw);
    if (t128 == 0 && p0 + 64 * cw < q.P) {
#pragma unroll
      for (int b = 0; b < BN / 64; ++b) {
        if (q0 + 64 * b >= q.Q) continue;
        if constexpr (kSwap) {
          tma_store(&map_d, out_base + b * kChunk, p0 + 64 * cw, q0 + 64 * b);  // (column n, row m)
        } else {
          tma_store(&map_d, out_base + b * kChunk, q0 + 64 * b, p0 + 64 * cw);
        }
      }
      asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    }
  }
  if (t128 == 0) asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
#endif  // GEMM_WGMMA_DEVICE
}

template <int BN, bool kSwap, bool kPrefetch>
cudaError_t run_seed(SeedFusedArgs const &g, cudaStream_t stream) {
  using L = SeedLayout<BN, kSwap>;
  int const P = kSwap ? g.N : g.M, Q = kSwap ? g.M : g.N;
  void const *p_seed = kSwap ? g.b : g.a;
  CUtensorMap map_p, map_q, map_d, map_s;
  if (!encode(&map_p, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, p_seed, g.K, P, P, kBlockK, kBlockM) ||
      !encode(&map_q, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, g.q, Q, g.K, g.K, BN, kBlockK) ||
      !encode(&map_d, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, g.c, g.M, g.N, g.N, 64, 64)) {
    return cudaErrorInvalidValue;
  }
  map_s = map_d;  // unused unless swapped
  if (kSwap && !encode(&map_s, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 4, g.sa, g.K / kBlockK, g.M, g.M, 1, BN,
                       CU_TENSOR_MAP_SWIZZLE_NONE)) {
    return cudaErrorInvalidValue;
  }
  auto kernel = wgmma_seed_kernel<BN, kSwap, kPrefetch>;
  cudaError_t const err = opt_in_smem<wgmma_seed_kernel<BN, kSwap, kPrefetch>>(L::kSmem, g.device);
  if (err != cudaSuccess) return err;
  int const nb = (g.N + 127) / 128;
  SeedParams const q{kSwap ? g.sb : g.sa, g.sb, P, Q, g.K, nb};
  Schedule const sched{(P + kBlockM - 1) / kBlockM, (Q + BN - 1) / BN, 8, 0};
  int const grid = sched.count() < g.sm_count ? sched.count() : g.sm_count;
  kernel<<<grid, kThreads, L::kSmem, stream>>>(map_p, map_q, map_d, map_s, q, sched);
  return cudaGetLastError();
}

}  // namespace

bool seed_fused_supported(SeedFusedArgs const &g, bool swap) {
  auto aligned = [](void const *p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; };
  int64_t const P = swap ? g.N : g.M;
  // TMA: 16-byte aligned bases and row strides (P bytes of the seed operand, N bf16 of c, M floats of
  // a_scale when swapped).
  return g.K % kBlockK == 0 && P % 16 == 0 && g.N % 8 == 0 && aligned(swap ? g.b : g.a) && aligned(g.q) &&
         aligned(g.c) && (!swap || (g.M % 4 == 0 && aligned(g.sa)));
}

cudaError_t launch_seed_fused(SeedFusedArgs const &g, int variant, cudaStream_t stream) {
  switch (variant) {
    case 0: return run_seed<128, false, true>(g, stream);
    case 1: return run_seed<192, false, true>(g, stream);
    case 2: return run_seed<128, true, true>(g, stream);
    case 3: return run_seed<192, true, true>(g, stream);
    case 4: return run_seed<128, false, false>(g, stream);
    case 5: return run_seed<192, false, false>(g, stream);
    case 6: return run_seed<128, true, false>(g, stream);
    case 7: return run_seed<192, true, false>(g, stream);
    default: return cudaErrorInvalidValue;
  }
}

char const *seed_fused_name(int variant) {
  switch (variant) {
    case 0: return "seed_regA_128x128";
    case 1: return "seed_regA_128x192";
    case 2: return "seed_regB_128x128";
    case 3: return "seed_regB_128x192";
    case 4: return "seed_regA_128x128_noprefetch";
    case 5: return "seed_regA_128x192_noprefetch";
    case 6: return "seed_regB_128x128_noprefetch";
    case 7: return "seed_regB_128x192_noprefetch";
    default: return "?";
  }
}

}  // namespace gemm_cuda
