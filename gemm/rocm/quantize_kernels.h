// quantize_activations in one launch on gfx942: each 128-element block of a row-major (M, K) bf16 / fp16 /
// fp32 tensor to float8_e4m3fnuz, with its scale. Torch-free, so that the HIP emulator (gemm/rocm/emu) runs
// this very source on the CPU (tests/rocm/test_emulator_quantize.py) and the gfx942 gate inspects it.
//
// It computes what the torch code in torch-ext/gemm/quantize.py computes on a ROCm device (the same
// arithmetic as the CUDA build's gemm/cuda/gemm_cuda_quant.cu, which an H200 checked bit for bit):
// - amax = the block's largest |value| (exact), NaN if any value is NaN (torch's amax propagates NaN);
// - scale = amax * fl(1 / 240): torch divides a tensor by a Python scalar on the GPU as a product with the
//   scalar's reciprocal; then at least the smallest normal float (torch.clamp keeps a NaN); with
//   power_of_two, exp2f(ceilf(log2f(scale))), the functions torch's kernels call;
// - each value: v / scale in fp32 (IEEE division), rounded to nearest even into e4m3fnuz by
//   V_CVT_PK_FP8_F32. |v| / scale is at most 240 (1 + a few ulps), which rounds to 240, so the
//   instruction's handling of values past the range never matters.
#pragma once

#include "gemm_plan.h"  // HIP's launch limit: max_blocks_per_dim
#include "hip_compat.h"

namespace gemm_rocm {

typedef uint32_t quant_u32x4 __attribute__((ext_vector_type(4)));  // one 16-byte load

enum QuantizeInput : int { kQuantBFloat16 = 0, kQuantFloat16 = 1, kQuantFloat32 = 2 };

struct QuantizeArgs {
  const void* x;       // (rows, blocks_per_row * 128), row-major, 16-byte aligned
  int input;           // QuantizeInput
  uint8_t* q;          // same shape, e4m3fnuz bytes, 8-byte aligned
  float* scale;        // (rows, blocks_per_row)
  int64_t blocks;      // rows * blocks_per_row
  float inv_max;       // 1 / 240 as a float
  int power_of_two;
};

constexpr int kQuantBlock = 128;                          // one scale's extent along K
constexpr int kQuantPerLane = 8;                          // values a lane loads, converts and stores
constexpr int kQuantLanes = kQuantBlock / kQuantPerLane;  // 16 lanes a block, 4 blocks a wave64
constexpr int kQuantThreads = 256;
constexpr int kQuantBlocksPerGroup = kQuantThreads / kQuantLanes;

// fp16 bits -> fp32, exact: clang's _Float16 (v_cvt_f32_f16 on gfx942; the host's conversion in the
// emulator), not HIP's half type, which HIP 5.2's headers and the emulator do not share.
__device__ __forceinline__ float quant_half_to_float(uint32_t h) {
  return static_cast<float>(__builtin_bit_cast(_Float16, static_cast<uint16_t>(h)));
}

// 8 consecutive values of x from `offset` (elements), as fp32: one 16-byte load, two for fp32.
__device__ __forceinline__ void quant_load8(const void* x, int input, int64_t offset, float (&v)[kQuantPerLane]) {
  if (input == kQuantFloat32) {
    const uint32_t* p = static_cast<const uint32_t*>(x) + offset;
    const quant_u32x4 lo = *reinterpret_cast<const quant_u32x4*>(p);
    const quant_u32x4 hi = *reinterpret_cast<const quant_u32x4*>(p + 4);
    for (int i = 0; i < 4; ++i) {
      v[i] = __builtin_bit_cast(float, static_cast<uint32_t>(lo[i]));
      v[4 + i] = __builtin_bit_cast(float, static_cast<uint32_t>(hi[i]));
    }
    return;
  }
  const quant_u32x4 raw = *reinterpret_cast<const quant_u32x4*>(static_cast<const uint16_t*>(x) + offset);
  for (int i = 0; i < 4; ++i) {
    const uint32_t word = raw[i];  // values 2i (low half) and 2i + 1
    if (input == kQuantBFloat16) {
      v[2 * i] = __builtin_bit_cast(float, word << 16);
      v[2 * i + 1] = __builtin_bit_cast(float, word & 0xffff0000u);
    } else {
      v[2 * i] = quant_half_to_float(word & 0xffffu);
      v[2 * i + 1] = quant_half_to_float(word >> 16);
    }
  }
}

// Defined here, not in a .hip file, for the emulator's driver: include this header from one translation
// unit of a build only (gemm_rocm.hip), or the kernel's symbol is defined twice.
// One workgroup's 16 blocks, from `group`.
__device__ __forceinline__ void quantize_group(const QuantizeArgs& args, int64_t group) {
  const int64_t block = group * kQuantBlocksPerGroup + threadIdx.x / kQuantLanes;
  const int lane = threadIdx.x % kQuantLanes;
  const bool active = block < args.blocks;  // the same for a block's 16 lanes
  const int64_t offset = block * kQuantBlock + lane * kQuantPerLane;
  float v[kQuantPerLane];
  // |v| as bits: for non-negative floats the integer order is the numeric one and a NaN sorts above
  // inf, so the maximum is NaN when any value is (fmaxf would drop it).
  uint32_t amax_bits = 0;
  if (active) {
    quant_load8(args.x, args.input, offset, v);
    for (int i = 0; i < kQuantPerLane; ++i) {
      const uint32_t magnitude = __builtin_bit_cast(uint32_t, v[i]) & 0x7fffffffu;
      amax_bits = magnitude > amax_bits ? magnitude : amax_bits;
    }
  }
  // Within each group of 16 lanes (one block): every lane ends with the block's maximum. All lanes of
  // the wave take part, before any of them leaves.
  for (int mask = kQuantLanes / 2; mask > 0; mask /= 2) {
    const uint32_t other = static_cast<uint32_t>(__shfl_xor(static_cast<int>(amax_bits), mask));
    amax_bits = other > amax_bits ? other : amax_bits;
  }
  if (!active) return;
  float s = __builtin_bit_cast(float, amax_bits) * args.inv_max;
  s = s < 1.17549435e-38f ? 1.17549435e-38f : s;  // clamp(min=smallest normal float); a NaN stays NaN
  if (args.power_of_two) s = exp2f(ceilf(log2f(s)));
  int word[2];
  for (int i = 0; i < 2; ++i) {
    int w = __builtin_amdgcn_cvt_pk_fp8_f32(v[4 * i] / s, v[4 * i + 1] / s, 0, false);
    word[i] = __builtin_amdgcn_cvt_pk_fp8_f32(v[4 * i + 2] / s, v[4 * i + 3] / s, w, true);
  }
  uint32_t* out = reinterpret_cast<uint32_t*>(args.q + offset);
  out[0] = static_cast<uint32_t>(word[0]);
  out[1] = static_cast<uint32_t>(word[1]);
  if (lane == 0) args.scale[block] = s;
}

// Workgroup g quantizes groups g, g + gridDim.x, ...: a grid capped at HIP's launch limit (below) still
// covers any tensor. The loop's bound is the same for the whole workgroup, so every wave either runs an
// iteration's shuffles with all its lanes or leaves.
__global__ __launch_bounds__(kQuantThreads) void quantize_rows_kernel(QuantizeArgs args) {
  const int64_t groups = (args.blocks + kQuantBlocksPerGroup - 1) / kQuantBlocksPerGroup;
  for (int64_t group = blockIdx.x; group < groups; group += gridDim.x) quantize_group(args, group);
}

// The most work-items a launch may have along x: HIP refuses a grid whose groups times threads exceeds
// 2^32 - 1 (hipErrorInvalidConfiguration), so at most 2^24 - 1 groups of 256 threads; past that (2^28 - 16
// blocks, 64 GiB of bf16) each workgroup takes several groups.
constexpr int64_t kQuantMaxGroups = max_blocks_per_dim(kQuantThreads);

// Launches the kernel through `launch(kernel, grid, block, args)` (hipLaunchKernelGGL on the GPU,
// emu::launch in the emulator) with at most `max_groups` workgroups (the emulator's tests pass fewer, to
// run the kernel's loop on small inputs); nothing when there are no blocks.
template <class Launch>
void launch_quantize_rows(const QuantizeArgs& args, Launch&& launch, int64_t max_groups = kQuantMaxGroups) {
  if (args.blocks <= 0) return;
  const int64_t groups = (args.blocks + kQuantBlocksPerGroup - 1) / kQuantBlocksPerGroup;
  const int64_t grid = groups < max_groups ? groups : max_groups;
  launch(quantize_rows_kernel, dim3(static_cast<uint32_t>(grid)), dim3(kQuantThreads), args);
}

}  // namespace gemm_rocm
