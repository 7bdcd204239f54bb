// PTX wrappers and tensor-map encoding shared by the hand-written sm_90a kernels (gemm_cuda_wgmma.cu,
// gemm_cuda_decode.cu): mbarriers and the stage ring built on them, TMA loads and stores, 4-byte cp.async
// tracked by an mbarrier, shared-memory loads, wgmma shared-memory descriptors, one K block's wgmma batch
// (A from shared memory or from registers).
#pragma once

#include <cuda.h>  // CUtensorMap and its enums (types only: the encoder is fetched from the driver at run time)
#include <cuda_runtime.h>
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled

#include <cute/arch/copy_sm90_desc.hpp>  // prefetch_tma_descriptor
#include <cute/arch/mma_sm90.hpp>  // ss_op_selector (and the wgmma ops it picks)

#include <cstdint>
#include <utility>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define GEMM_WGMMA_DEVICE 1
#endif

namespace gemm_cuda {
namespace sm90 {

constexpr int kBlockK = 128;  // one scale block of K = one 128-byte swizzle row of FP8
constexpr int kSmemPerBlock = 232448;  // sm_90 opt-in dynamic shared memory per block (227 KiB)
constexpr int kSmemPerSm = 233472;  // shared memory per SM (228 KiB), shared by its resident CTAs

// wgmma m64nNk32 with FP8 (e4m3) operands, both K-major in shared memory, fp32 accumulators: cute's own
// selector for a 64 x N x 32 tile.
template <int N>
using GmmaOp = decltype(cute::SM90::GMMA::ss_op_selector<cute::float_e4m3_t, cute::float_e4m3_t, float,
                                                         cute::Shape<cute::_64, cute::Int<N>, cute::_32>>());

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

// Whether the barrier's phase with this parity has completed, without waiting.
__device__ __forceinline__ bool bar_test(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n"
      "selp.u32 %0, 1, 0, p;\n"
      "}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}

// A 4-byte asynchronous copy from global to shared memory (cached in L1: neighbouring K blocks share lines).
__device__ __forceinline__ void cp_async_4(uint32_t dst, void const *src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(dst), "l"(src) : "memory");
}

// A warp's share of a stage's row scales: x_scale of K block kb for rows row0 .. row0 + kRows - 1 of
// the (M, kblocks) tensor sx, to 4 * r bytes past `dst`, lane l copying rows l, l + 32, ... (rows past M are
// clamped: their outputs are not stored). The caller counts the copies on the stage's barrier.
template <int kRows>
__device__ __forceinline__ void copy_row_scales(uint32_t dst, float const *sx, int row0, int M, int kblocks,
                                                int kb, int lane) {
#pragma unroll
  for (int i = 0; i < (kRows + 31) / 32; ++i) {
    int const r = 32 * i + lane;
    if (kRows % 32 == 0 || r < kRows) {
      cp_async_4(dst + 4 * r, sx + static_cast<int64_t>(min(row0 + r, M - 1)) * kblocks + kb);
    }
  }
}

// One arrival on `bar` once every cp.async this thread issued so far has landed; counted against the
// barrier's initial arrival count (.noinc), so each such thread adds one to that count.
__device__ __forceinline__ void cp_async_arrive_noinc(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}

__device__ __forceinline__ float ld_shared_f32(uint32_t addr) {
  float v;
  asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(addr) : "memory");
  return v;
}

__device__ __forceinline__ float2 ld_shared_f32x2(uint32_t addr) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(addr) : "memory");
  return v;
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

// named_sync that also returns whether `pred` held in any of the warpgroup's 128 threads.
__device__ __forceinline__ bool named_sync_or(int id, bool pred) {
  uint32_t any;
  asm volatile(
      "{\n"
      ".reg .pred p, q;\n"
      "setp.ne.u32 p, %1, 0;\n"
      "bar.red.or.pred q, %2, 128, p;\n"
      "selp.u32 %0, 1, 0, q;\n"
      "}\n"
      : "=r"(any)
      : "r"(static_cast<uint32_t>(pred)), "r"(id)
      : "memory");
  return any != 0;
}

// The stage ring's mbarriers, by thread 0: `stages` full barriers at full_bar (each completes on its
// stage's TMA bytes and `producer_arrivals` arrivals: the one that arms it for those bytes, plus one per
// producer thread that copies more into the stage with cp.async) followed by as many empty ones (each
// completes on `consumer_arrivals` arrivals);
// then the whole block syncs and, when launched as a programmatic dependent (GemmArgs::pdl), waits for
// the previous kernel (a no-op otherwise): the set-up overlapped it, nothing global is read before.
__device__ __forceinline__ void init_stage_ring(uint32_t full_bar, int stages, uint32_t consumer_arrivals,
                                                uint32_t producer_arrivals = 1) {
  if (threadIdx.x == 0) {
    for (int s = 0; s < stages; ++s) {
      bar_init(full_bar + 8 * s, producer_arrivals);
      bar_init(full_bar + 8 * (stages + s), consumer_arrivals);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  asm volatile("griddepcontrol.wait;" ::: "memory");
}

// Position `it` (0, 1, 2, ...) of a ring of kStages stages: its stage, and the parity of the phase of that
// stage's barriers that it waits for.
template <int kStages>
__device__ __forceinline__ int ring_stage(uint32_t it) {
  return static_cast<int>(it % kStages);
}
template <int kStages>
__device__ __forceinline__ uint32_t ring_parity(uint32_t it) {
  return (it / kStages) & 1;
}

// Producer side of ring position `it`: waits until the consumers have released its stage (a fresh empty
// barrier passes parity 1), then, in the thread that issues the TMA loads (`arm`), arms the stage's full
// barrier for their `bytes`. Returns the stage.
template <int kStages>
__device__ __forceinline__ int acquire_stage(uint32_t full_bar, uint32_t empty_bar, uint32_t it, uint32_t bytes,
                                             bool arm = true) {
  int const s = ring_stage<kStages>(it);
  bar_wait(empty_bar + 8 * s, ring_parity<kStages>(it) ^ 1);
  if (arm) bar_expect_tx(full_bar + 8 * s, bytes);
  return s;
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
    mma<GmmaOp<N>>(da + 2 * k, db + 2 * k, acc, k > 0, std::make_integer_sequence<int, N / 2>{});
  }
  cute::warpgroup_commit_batch();
}

// The same with A from registers (4 per 32-deep step: the fragments of the seed kernels in gemm_cuda_wgmma.cu)
// and B K-major in shared memory: cute's selector.
template <int N>
using GmmaRsOp = decltype(cute::SM90::GMMA::rs_op_selector<cute::float_e4m3_t, cute::float_e4m3_t, float,
                                                           cute::Shape<cute::_64, cute::Int<N>, cute::_32>>());

template <int N, int... I>
__device__ __forceinline__ void mma_rs(uint32_t const *a, uint64_t db, float *d, bool accumulate,
                                       std::integer_sequence<int, I...>) {
  GmmaRsOp<N>::fma(a[0], a[1], a[2], a[3], db, d[I]...,
                   accumulate ? cute::SM90::GMMA::ScaleOut::One : cute::SM90::GMMA::ScaleOut::Zero);
}

// One K block's batch with A from registers (16 per thread: 4 per 32-deep step) and B K-major in shared
// memory.
template <int N>
__device__ __forceinline__ void issue_batch_rs(float *acc, uint32_t *a, uint64_t db) {
  fence_all<N>(acc);
#pragma unroll
  for (int i = 0; i < 16; ++i) cute::warpgroup_fence_operand(a[i]);
  cute::warpgroup_arrive();
#pragma unroll
  for (int k = 0; k < kBlockK / 32; ++k) {
    mma_rs<N>(a + 4 * k, db + 2 * k, acc, k > 0, std::make_integer_sequence<int, N / 2>{});
  }
  cute::warpgroup_commit_batch();
}
#endif  // GEMM_WGMMA_DEVICE

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
// box_rows x box_cols with 128-byte swizzle (box_cols * element size must be 128 bytes), or with another
// swizzle whose span is box_cols * element size (64 bytes: CU_TENSOR_MAP_SWIZZLE_64B).
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

}  // namespace sm90
}  // namespace gemm_cuda
