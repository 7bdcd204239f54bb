// Configuration 9: decode-like shapes (M <= 64: a few activation rows against a deep weight), where the
// GEMM is a stream of w through the SMs. Operands swapped so that w's rows fill wgmma's M of 64: each CTA
// computes a 64 (w rows = output columns) x MP (activation rows, M rounded up to 8, 16, 32 or 64) block
// of out^T over one K slice, as 4 x wgmma m64nMPk32 per K block (both operands K-major in shared memory,
// TMA-loaded into a 6-8 stage mbarrier ring by one producer warp; under 100 KB, so that two CTAs share an
// SM), promoted every K block into fp32 registers with w_scale (one value per K block: a 64-row tile lies
// in one 128-row block) times x_scale (one per column). The producer warp's lanes also copy each K
// block's MP x_scale values and its w_scale into the stage (4-byte cp.async on the stage's barrier), so
// that the consumers read them from shared memory, not from global memory inside the K loop (run 88, one
// K slice: 64x4608x7168 28.4 -> 22.7 us, 16x4608x7168 21.3 -> 18.3, 32x7168x2304 12.9 -> 11.7;
// 1x4608x7168 only 18.4 -> 18.0). The grid is (w row tiles, K slices): K slices give a weight stream
// enough CTAs to fill the SMs; each slice writes fp32 partials that gemm_cuda_reduce.cu sums, or bf16
// directly when there is one slice.
//
// Accumulator fragment of m64nMPk32 (PTX ISA, "Register fragments"): thread t of the warpgroup holds,
// for j < MP/8, d[4j + 2h + e] = D[16 (t/32) + (t%32)/4 + 8h][8j + 2 (t%4) + e], D = out^T.

#include <cuda_bf16.h>

#include <cstdint>

#include "gemm_cuda_kernels.h"
#include "gemm_cuda_sm90.cuh"

namespace gemm_cuda {
namespace {
using namespace sm90;

constexpr int kRows = 64;  // w rows per CTA: wgmma's M
constexpr int kThreads = 160;  // one consumer warpgroup (warps 0-3) and the producer warp (4)

template <int MP>
struct DecodeLayout {
  static constexpr int kBytesW = kRows * kBlockK;
  static constexpr int kBytesX = MP * kBlockK;  // a whole number of 1024-byte swizzle atoms (MP >= 8)
  static constexpr int kStage = kBytesW + kBytesX;
  static constexpr int kStages = MP == 64 ? 6 : 8;
  // A stage's scales: the K block's x_scale of the MP rows, then its w_scale, padded to 16 bytes; after
  // the operand tiles, which keep their 1024-byte swizzle alignment.
  static constexpr int kBytesScale = (MP + 4) * 4;
  static constexpr int kOffScale = kStages * kStage;
  static constexpr int kOffBar = kOffScale + kStages * kBytesScale;
  static constexpr int kSmem = 1024 + kOffBar + 2 * kStages * 8;  // + slack to align the base
  static_assert(2 * (kSmem + 1024) <= kSmemPerSm, "two CTAs per SM (each also reserves 1 KB)");
};

// d: bf16 out (M x ldd) when kslices == 1, else fp32 partials, slice s at d + s * M * ldd.
template <int MP>
__global__ void __launch_bounds__(kThreads, 2)
    decode_gemm_kernel(__grid_constant__ CUtensorMap const map_w, __grid_constant__ CUtensorMap const map_x,
                       float const *__restrict__ sx, float const *__restrict__ sw, void *__restrict__ d,
                       int64_t ldd, int M, int N, int K, int kslices) {
#ifdef GEMM_WGMMA_DEVICE
  using L = DecodeLayout<MP>;
  extern __shared__ uint8_t smem_raw[];
  uint32_t const base = (smem_addr(smem_raw) + 1023) & ~1023u;
  uint32_t const full_bar = base + L::kOffBar;
  uint32_t const empty_bar = full_bar + 8 * L::kStages;
  int const kblocks = K / kBlockK;
  int const per_slice = kblocks / kslices;
  int const kb0 = static_cast<int>(blockIdx.y) * per_slice;
  int const n0 = static_cast<int>(blockIdx.x) * kRows;

  // A stage is full once its TMA bytes have landed and each producer lane has counted its scale copies;
  // empty once every consumer thread has arrived after its own scale reads (as in gemm_cuda_wgmma.cu).
  init_stage_ring(full_bar, L::kStages, 128, 1 + 32);

  int const warp = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 32), 0);
  int const lane = threadIdx.x % 32;
  // n0 < N, and rounding N up to a multiple of 8 adds no 128-row block: w_scale has this tile's row.
  float const *const swp = sw + static_cast<int64_t>(n0 / 128) * kblocks;
  if (warp == 4) {  // producer warp: lane 0 issues the TMA loads, every lane copies scales
    if (lane == 0) {
      cute::prefetch_tma_descriptor(&map_w);
      cute::prefetch_tma_descriptor(&map_x);
    }
    for (int i = 0; i < per_slice; ++i) {
      int const kb = kb0 + i;
      int const s = acquire_stage<L::kStages>(full_bar, empty_bar, i, L::kStage, lane == 0);
      if (lane == 0) {
        tma_load(&map_w, full_bar + 8 * s, base + s * L::kStage, kb * kBlockK, n0);
        tma_load(&map_x, full_bar + 8 * s, base + s * L::kStage + L::kBytesW, kb * kBlockK, 0);
      }
      uint32_t const scales = base + L::kOffScale + s * L::kBytesScale;
      copy_row_scales<MP>(scales, sx, 0, M, kblocks, kb, lane);
      if (lane == 0) cp_async_4(scales + 4 * MP, swp + kb);
      cp_async_arrive_noinc(full_bar + 8 * s);
    }
    asm volatile("cp.async.wait_all;" ::: "memory");  // no thread exits with copies in flight
    return;
  }

  // Consumer warpgroup: this thread's MP/4 columns m = 8 (q / 2) + 2 (t % 4) + q % 2 take x_scale from
  // word m of the stage's scales, and all take w_scale from word MP.
  int const t = threadIdx.x;
  uint32_t const scale_x0 = base + L::kOffScale + 4 * (2 * (t % 4));
  uint32_t const scale_w0 = base + L::kOffScale + 4 * MP;
  float out[MP / 2];
  float acc[MP / 2];
#pragma unroll
  for (int i = 0; i < MP / 2; ++i) out[i] = 0.f;
  uint64_t const desc_w0 = kmajor_sw128_desc(base);
  uint64_t const desc_x0 = kmajor_sw128_desc(base + L::kBytesW);
  for (int i = 0; i < per_slice; ++i) {
    int const s = ring_stage<L::kStages>(i);
    bar_wait(full_bar + 8 * s, ring_parity<L::kStages>(i));
    issue_batch<MP>(acc, desc_w0 + static_cast<uint64_t>(s * (L::kStage >> 4)),
                    desc_x0 + static_cast<uint64_t>(s * (L::kStage >> 4)));
    uint32_t const stage_scales = s * L::kBytesScale;  // read while the batch runs
    float const ws = ld_shared_f32(scale_w0 + stage_scales);
    float scale[MP / 4];
#pragma unroll
    for (int q = 0; q < MP / 4; ++q) {
      scale[q] = ws * ld_shared_f32(scale_x0 + stage_scales + 4 * (8 * (q / 2) + q % 2));
    }
    cute::warpgroup_wait<0>();
    fence_all<MP>(acc);
    bar_arrive(empty_bar + 8 * s);  // this thread is done with the stage's operands and scales
#pragma unroll
    for (int j = 0; j < MP / 8; ++j) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          int const r = 4 * j + 2 * h + e;
          out[r] = fmaf(acc[r], scale[2 * j + e], out[r]);
        }
      }
    }
  }

  // out^T fragment -> out (M x ldd): row m, column n. Eight lanes write eight adjacent columns of one row.
#pragma unroll
  for (int j = 0; j < MP / 8; ++j) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      int const m = 8 * j + 2 * (t % 4) + e;
      if (m >= M) continue;
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        int const n = n0 + 16 * (t / 32) + (t % 32) / 4 + 8 * h;
        if (n >= N) continue;
        float const v = out[4 * j + 2 * h + e];
        if (kslices == 1) {
          static_cast<__nv_bfloat16 *>(d)[m * ldd + n] = __float2bfloat16_rn(v);
        } else {
          static_cast<float *>(d)[(static_cast<int64_t>(blockIdx.y) * M + m) * ldd + n] = v;
        }
      }
    }
  }
#endif  // GEMM_WGMMA_DEVICE
}

template <int MP>
cudaError_t launch_decode(GemmArgs const &g, CUtensorMap const &map_w, cudaStream_t stream) {
  CUtensorMap map_x;
  if (!encode(&map_x, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, g.x, g.M, g.K, g.K, MP, kBlockK)) {
    return cudaErrorInvalidValue;
  }
  dim3 const grid((g.N + kRows - 1) / kRows, g.kslices);
  return launch_kernel<decode_gemm_kernel<MP>>(grid, kThreads, DecodeLayout<MP>::kSmem, g.device, stream, g.pdl,
                                               map_w, map_x, g.sx, g.sw, g.d, g.ldd, g.M, g.N, g.K, g.kslices);
}

int run_decode(GemmArgs const &g, cudaStream_t stream) {
  int const kblocks = g.K / kBlockK;
  if (g.M < 1 || g.M > 64 || g.K % kBlockK != 0 || g.kslices < 1 || kblocks % g.kslices != 0) {
    return -static_cast<int>(cudaErrorInvalidValue);
  }
  CUtensorMap map_w;
  if (!encode(&map_w, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, g.w, g.w_rows, g.K, g.K, kRows, kBlockK)) {
    return -static_cast<int>(cudaErrorInvalidValue);
  }
  cudaError_t err;
  if (g.M <= 8) {
    err = launch_decode<8>(g, map_w, stream);
  } else if (g.M <= 16) {
    err = launch_decode<16>(g, map_w, stream);
  } else if (g.M <= 32) {
    err = launch_decode<32>(g, map_w, stream);
  } else {
    err = launch_decode<64>(g, map_w, stream);
  }
  return -static_cast<int>(err != cudaSuccess ? err : cudaGetLastError());
}

}  // namespace

size_t workspace_cfg9(GemmArgs const &) { return 0; }
int run_cfg9(GemmArgs const &g, void *, cudaStream_t stream) { return run_decode(g, stream); }
char const *const kNameCfg9 = "wgmma_decode_64xM_ksliced";

}  // namespace gemm_cuda
