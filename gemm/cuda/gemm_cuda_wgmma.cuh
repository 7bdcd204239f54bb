// Building blocks shared by the hand-written sm_90a kernels (gemm_cuda_wgmma.cu: natural layout;
// gemm_cuda_wgmma_seed.cu: seed layout): PTX wrappers for mbarriers, TMA and wgmma, the persistent tile
// schedule, and the host-side tensor-map encoder. Everything here is internal to those two files.
#pragma once

#include <cuda.h>  // CUtensorMap and its enums (types only: the encoder is fetched from the driver at run time)
#include <cuda_runtime.h>
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled

#include <cute/arch/mma_sm90_gmma.hpp>

#include <atomic>
#include <cstdint>
#include <utility>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define GEMM_WGMMA_DEVICE 1
#endif

namespace gemm_cuda {
namespace wgmma {

constexpr int kBlockM = 128;  // two consumer warpgroups of 64 rows
constexpr int kBlockK = 128;  // one scale block of K = one 128-byte swizzle row of FP8
constexpr int kThreads = 384;
constexpr int kSmemLimit = 232448;  // sm_90 opt-in dynamic shared memory per block (227 KiB)
constexpr int kChunk = 64 * 128;    // one 64-row x 64-column bf16 output box (128-byte rows)

template <int BN>
struct Mma;
template <>
struct Mma<128> {
  using SS = cute::SM90::GMMA::MMA_64x128x32_F32E4M3E4M3_SS_TN<>;
  using RS = cute::SM90::GMMA::MMA_64x128x32_F32E4M3E4M3_RS_TN<>;
};
template <>
struct Mma<192> {
  using SS = cute::SM90::GMMA::MMA_64x192x32_F32E4M3E4M3_SS_TN<>;
  using RS = cute::SM90::GMMA::MMA_64x192x32_F32E4M3E4M3_RS_TN<>;
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
    mma<typename Mma<N>::SS>(da + 2 * k, db + 2 * k, acc, k > 0, std::make_integer_sequence<int, N / 2>{});
  }
  cute::warpgroup_commit_batch();
}


template <class Op, int... I>
__device__ __forceinline__ void mma_rs(uint32_t const *a, uint64_t db, float *d, bool accumulate,
                                       std::integer_sequence<int, I...>) {
  Op::fma(a[0], a[1], a[2], a[3], db, d[I]...,
          accumulate ? cute::SM90::GMMA::ScaleOut::One : cute::SM90::GMMA::ScaleOut::Zero);
}

// The same batch with A from registers: a[4k .. 4k+3] is the m64k32 FP8 fragment of the k-th 32 bytes
// of K (PTX ISA: register i of thread t holds row 16 (t/32) + (t%32)/4 + 8 (i%2), bytes of K
// 4 (t%4) + 16 (i/2) .. +3). The caller keeps `a` alive (warpgroup_fence_operand) until the batch is
// waited for: the tensor cores read it asynchronously.
template <int N>
__device__ __forceinline__ void issue_batch_rs(float *acc, uint32_t *a, uint64_t db) {
#pragma unroll
  for (int i = 0; i < 16; ++i) cute::warpgroup_fence_operand(a[i]);
  fence_all<N>(acc);
  cute::warpgroup_arrive();
#pragma unroll
  for (int k = 0; k < kBlockK / 32; ++k) {
    mma_rs<typename Mma<N>::RS>(a + 4 * k, db + 2 * k, acc, k > 0, std::make_integer_sequence<int, N / 2>{});
  }
  cute::warpgroup_commit_batch();
}

// Four 8x8 matrices of 16-bit elements, transposed: lane l gives the row address of row l % 8 of
// matrix l / 8; register i of lane l gets matrix i's elements (row 2 (l%4), column l/4) in its low
// half and (row 2 (l%4) + 1, column l/4) in its high half.
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t addr, uint32_t &d0, uint32_t &d1, uint32_t &d2,
                                                  uint32_t &d3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(d0), "=r"(d1), "=r"(d2), "=r"(d3)
               : "r"(addr)
               : "memory");
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

// ---------------------------------------------------------------------------------------------
// host side
// ---------------------------------------------------------------------------------------------
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
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
// box_rows x box_cols, 128-byte swizzled by default (then box_cols * element size must be 128 bytes).
inline bool encode(CUtensorMap *map, CUtensorMapDataType type, int elem_bytes, void const *ptr, uint64_t rows,
                   uint64_t cols, uint64_t ld, uint32_t box_rows, uint32_t box_cols,
                   CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_128B) {
  auto fn = tensor_map_encoder();
  if (fn == nullptr) return false;
  cuuint64_t dims[2] = {cols, rows};
  cuuint64_t strides[1] = {ld * elem_bytes};
  cuuint32_t box[2] = {box_cols, box_rows};
  cuuint32_t elem_strides[2] = {1, 1};
  return fn(map, type, 2, const_cast<void *>(ptr), dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
            swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// Opts kKernel in to `smem` bytes of dynamic shared memory, once per device and kernel (a race only
// sets it twice; the flag is per kernel: a template argument, since kernels share one pointer type).
// No std::call_once: it needs glibc 2.34's pthread_once, outside the manylinux_2_28 ABI the Hub accepts.
template <auto kKernel>
cudaError_t opt_in_smem(int smem, int device) {
  static std::atomic<bool> opted_in[64];
  if (opted_in[device & 63].load(std::memory_order_relaxed)) return cudaSuccess;
  cudaError_t const err = cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
  if (err == cudaSuccess) opted_in[device & 63].store(true, std::memory_order_relaxed);
  return err;
}

}  // namespace wgmma
}  // namespace gemm_cuda
