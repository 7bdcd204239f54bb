// The K-sliced configuration's second step: sum the fp32 partial products of the K slices (in slice
// order, so the result is deterministic) and round once to bf16, as the contract asks.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "gemm_cuda_kernels.h"

namespace gemm_cuda {
namespace {

constexpr int kThreads = 256;

// One thread per 4 consecutive outputs: 16-byte loads from each slice, one 8-byte store.
__global__ void kslice_reduce_kernel(float4 const *__restrict__ parts, int slices, int64_t count4,
                                     uint2 *__restrict__ out) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < count4;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    float4 acc = parts[i];
    for (int s = 1; s < slices; ++s) {
      float4 const v = parts[s * count4 + i];
      acc.x += v.x;
      acc.y += v.y;
      acc.z += v.z;
      acc.w += v.w;
    }
    __nv_bfloat162 const lo = __floats2bfloat162_rn(acc.x, acc.y);
    __nv_bfloat162 const hi = __floats2bfloat162_rn(acc.z, acc.w);
    uint2 packed;
    packed.x = *reinterpret_cast<uint32_t const *>(&lo);
    packed.y = *reinterpret_cast<uint32_t const *>(&hi);
    out[i] = packed;
  }
}

}  // namespace

cudaError_t launch_kslice_reduce(float const *parts, int slices, int64_t count, void *out_bf16,
                                 cudaStream_t stream) {
  if (count % 4 != 0 || slices < 1 || (reinterpret_cast<uintptr_t>(parts) & 15) != 0 ||
      (reinterpret_cast<uintptr_t>(out_bf16) & 7) != 0) {
    return cudaErrorInvalidValue;
  }
  int64_t const count4 = count / 4;
  if (count4 == 0) return cudaSuccess;
  int64_t const blocks = (count4 + kThreads - 1) / kThreads;
  unsigned const grid = static_cast<unsigned>(blocks < 132 * 16 ? blocks : 132 * 16);
  kslice_reduce_kernel<<<grid, kThreads, 0, stream>>>(reinterpret_cast<float4 const *>(parts), slices,
                                                      count4, static_cast<uint2 *>(out_bf16));
  return cudaGetLastError();
}

}  // namespace gemm_cuda
