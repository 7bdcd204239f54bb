// quantize_activations in one launch (gemm_cuda_kernels.h, QuantizeRowsArgs): each 128-element block of a
// row-major (M, K) bf16 / fp16 / fp32 tensor to float8_e4m3fn, with its scale. Bit for bit what the torch
// code in torch-ext/gemm/quantize.py computes on a CUDA device, which the GPU tests hold it to:
// - amax = the block's largest |value| (exact), NaN if any value is NaN (torch's amax propagates NaN);
// - scale = amax * fl(1 / 448): torch divides by a Python scalar on the GPU as a product with its
//   reciprocal (div_true_kernel_cuda), not as a quotient; then at least the smallest normal float
//   (torch.clamp keeps a NaN); with power_of_two, exp2f(ceilf(log2f(scale))), the functions torch calls;
// - each value: v / scale in fp32 (IEEE division), rounded to nearest even into e4m3fn. |v| / scale is at
//   most 448 (1 + a few ulps), which rounds to 448, so the saturating hardware conversion never saturates
//   where torch's conversion would differ.
// The plain-torch form reads x twice and launches ~4 kernels (run 125: 320 us for 6144 x 7168 bf16, about
// 0.4 TB/s); this one reads x once and writes the FP8 values and scales once.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cfloat>
#include <cstdint>
#include <type_traits>

#include "gemm_cuda_kernels.h"

namespace gemm_cuda {
namespace {

constexpr int kBlockElems = 128;                          // one scale's extent along K
constexpr int kPerThread = 8;                             // elements a thread loads, converts and stores
constexpr int kLanesPerBlock = kBlockElems / kPerThread;  // 16: half a warp per block
constexpr int kThreads = 256;
constexpr int kBlocksPerCta = kThreads / kLanesPerBlock;

// A pair of 16-bit values as fp32 (exact).
__device__ __forceinline__ float2 to_float2(__nv_bfloat162 pair) { return __bfloat1622float2(pair); }
__device__ __forceinline__ float2 to_float2(__half2 pair) { return __half22float2(pair); }

// 8 consecutive elements as fp32 (exact for every input type): one 16-byte load, two for fp32.
template <typename T>  // __nv_bfloat16 or __half
__device__ __forceinline__ void load8(T const *p, float (&v)[kPerThread]) {
  using Pair = std::conditional_t<std::is_same_v<T, __half>, __half2, __nv_bfloat162>;
  uint4 const raw = *reinterpret_cast<uint4 const *>(p);
  uint32_t const words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float2 const f = to_float2(*reinterpret_cast<Pair const *>(&words[i]));
    v[2 * i] = f.x;
    v[2 * i + 1] = f.y;
  }
}

__device__ __forceinline__ void load8(float const *p, float (&v)[kPerThread]) {
  float4 const lo = reinterpret_cast<float4 const *>(p)[0];
  float4 const hi = reinterpret_cast<float4 const *>(p)[1];
  v[0] = lo.x, v[1] = lo.y, v[2] = lo.z, v[3] = lo.w;
  v[4] = hi.x, v[5] = hi.y, v[6] = hi.z, v[7] = hi.w;
}

// |v| as bits: for non-negative floats the integer order is the numeric one, and NaNs sort above inf, so the
// maximum is NaN when any value is (fmaxf would drop it).
__device__ __forceinline__ uint32_t abs_max_bits(float const (&v)[kPerThread]) {
  uint32_t amax_bits = 0;
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) amax_bits = max(amax_bits, __float_as_uint(v[i]) & 0x7fffffffu);
  return amax_bits;
}

// Within each half-warp (a block's 16 lanes): every lane ends with the block's maximum. Every lane of the
// warp must take part.
__device__ __forceinline__ uint32_t half_warp_max(uint32_t amax_bits) {
#pragma unroll
  for (int mask = kLanesPerBlock / 2; mask > 0; mask /= 2) {
    amax_bits = max(amax_bits, __shfl_xor_sync(0xffffffffu, amax_bits, mask));
  }
  return amax_bits;
}

// A lane's 8 values of one block, given the block's maximum: their FP8 bytes at q, and (lane 0) the scale.
__device__ __forceinline__ void quantize8(float const (&v)[kPerThread], uint32_t amax_bits, float inv_max,
                                          bool power_of_two, uint8_t *q, float *scale, int lane) {
  float s = __uint_as_float(amax_bits) * inv_max;
  s = s < FLT_MIN ? FLT_MIN : s;  // clamp(min=tiny); a NaN stays NaN
  if (power_of_two) s = exp2f(ceilf(log2f(s)));
  uint32_t packed[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    __nv_fp8x2_storage_t const lo =
        __nv_cvt_float2_to_fp8x2(make_float2(v[4 * i] / s, v[4 * i + 1] / s), __NV_SATFINITE, __NV_E4M3);
    __nv_fp8x2_storage_t const hi =
        __nv_cvt_float2_to_fp8x2(make_float2(v[4 * i + 2] / s, v[4 * i + 3] / s), __NV_SATFINITE, __NV_E4M3);
    packed[i] = static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
  }
  *reinterpret_cast<uint2 *>(q) = make_uint2(packed[0], packed[1]);
  if (lane == 0) *scale = s;
}

template <typename T>
__global__ void __launch_bounds__(kThreads) quantize_rows_kernel(T const *__restrict__ x, uint8_t *__restrict__ q,
                                                                  float *__restrict__ scale, int64_t blocks,
                                                                  float inv_max, bool power_of_two) {
  int64_t const block = static_cast<int64_t>(blockIdx.x) * kBlocksPerCta + threadIdx.x / kLanesPerBlock;
  int const lane = threadIdx.x % kLanesPerBlock;
  bool const active = block < blocks;  // the same for the 16 lanes of a block
  int64_t const offset = block * kBlockElems + lane * kPerThread;
  float v[kPerThread];
  uint32_t amax_bits = 0;
  if (active) {
    load8(x + offset, v);
    amax_bits = abs_max_bits(v);
  }
  amax_bits = half_warp_max(amax_bits);
  if (!active) return;
  quantize8(v, amax_bits, inv_max, power_of_two, q + offset, scale + block, lane);
}

// launch(x) with a.x as a pointer to its input type.
template <class Launch>
cudaError_t with_input(QuantizeRowsArgs const &a, Launch launch) {
  switch (a.input) {
    case QuantizeInput::kBFloat16: return launch(static_cast<__nv_bfloat16 const *>(a.x));
    case QuantizeInput::kFloat16: return launch(static_cast<__half const *>(a.x));
    case QuantizeInput::kFloat32: return launch(static_cast<float const *>(a.x));
  }
  return cudaErrorInvalidValue;
}

#ifdef GEMM_QUANT_ROUNDS_EXPERIMENT
// The same with kRounds blocks per half-warp (QuantizeRowsArgs::rounds): the CTA's half-warps take
// kBlocksPerCta consecutive blocks in each round (coalesced), and each lane issues all its rounds' loads
// before it uses any, so that more bytes are in flight per SM (the shipped kernel reaches 3.2 TB/s of ~4.2 at
// 6144 x 7168 bf16, run 128). Experiment builds only (tests/cuda/quant_sweep.py).
template <typename T, int kRounds>
__global__ void __launch_bounds__(kThreads)
    quantize_rows_rounds_kernel(T const *__restrict__ x, uint8_t *__restrict__ q, float *__restrict__ scale,
                                int64_t blocks, float inv_max, bool power_of_two) {
  int64_t const first = static_cast<int64_t>(blockIdx.x) * kBlocksPerCta * kRounds + threadIdx.x / kLanesPerBlock;
  int const lane = threadIdx.x % kLanesPerBlock;
  float v[kRounds][kPerThread];
#pragma unroll
  for (int r = 0; r < kRounds; ++r) {
    int64_t const block = first + r * kBlocksPerCta;
    if (block < blocks) load8(x + block * kBlockElems + lane * kPerThread, v[r]);
  }
#pragma unroll
  for (int r = 0; r < kRounds; ++r) {
    int64_t const block = first + r * kBlocksPerCta;
    bool const active = block < blocks;
    uint32_t const amax_bits = half_warp_max(active ? abs_max_bits(v[r]) : 0u);
    // Not a return: a half-warp past the end would leave its partner's later shuffles short of lanes.
    if (active) {
      quantize8(v[r], amax_bits, inv_max, power_of_two, q + block * kBlockElems + lane * kPerThread, scale + block,
                lane);
    }
  }
}

template <int kRounds>
cudaError_t launch_rounds(QuantizeRowsArgs const &a, int64_t blocks, cudaStream_t stream) {
  int64_t const ctas = (blocks + kBlocksPerCta * kRounds - 1) / (kBlocksPerCta * kRounds);
  if (ctas > INT32_MAX) return cudaErrorInvalidValue;
  dim3 const grid(static_cast<unsigned>(ctas));
  return with_input(a, [&](auto const *x) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(x)>>;
    quantize_rows_rounds_kernel<T, kRounds>
        <<<grid, kThreads, 0, stream>>>(x, a.q, a.scale, blocks, a.inv_max, a.power_of_two);
    return cudaGetLastError();
  });
}
#endif

}  // namespace

cudaError_t launch_quantize_rows(QuantizeRowsArgs const &a, cudaStream_t stream) {
  int64_t const blocks = a.rows * a.blocks_per_row;
  if (blocks == 0) return cudaSuccess;
  if (a.rounds != 1) {
#ifdef GEMM_QUANT_ROUNDS_EXPERIMENT
    if (a.rounds == 2) return launch_rounds<2>(a, blocks, stream);
    if (a.rounds == 4) return launch_rounds<4>(a, blocks, stream);
#endif
    return cudaErrorInvalidValue;
  }
  int64_t const ctas = (blocks + kBlocksPerCta - 1) / kBlocksPerCta;
  if (ctas > INT32_MAX) return cudaErrorInvalidValue;
  dim3 const grid(static_cast<unsigned>(ctas));
  return with_input(a, [&](auto const *x) {
    quantize_rows_kernel<<<grid, kThreads, 0, stream>>>(x, a.q, a.scale, blocks, a.inv_max, a.power_of_two);
    return cudaGetLastError();
  });
}

}  // namespace gemm_cuda
