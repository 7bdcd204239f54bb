// Torch-free interface between the op wrapper (gemm_cuda.cu) and the CUTLASS GEMM instantiations
// (gemm_cuda_cfg*.cu, one configuration per translation unit so that builds compile them in parallel).
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace gemm_cuda {

// D(M, N) bf16 (row stride ldd elements) = sum_kb sx[m, kb] * sw[n/128, kb] * x[m, kb-block] . w[n, kb-block]
// (the K-sliced configuration, and the decode one in more than one slice, write kslices fp32 partials of D
// instead, slice s at d + s * M * ldd)
// x (M, K) fp8 e4m3fn row-major, w (N, K) fp8 row-major, sx (M, K/128) f32, sw (ceil(N/128), K/128) f32.
struct GemmArgs {
  void *d;
  int64_t ldd;
  void const *x;
  void const *w;
  float const *sx;
  float const *sw;
  int M, N, K;
  int device;
  int sm_count;
  // Tile-scheduler knobs: raster 0 = CUTLASS heuristic, 1 = along M, 2 = along N; swizzle = max CTA
  // swizzle (1, 2, 4, 8); splits > 1 forces split-K in CUTLASS's stream-K configuration (1 = its
  // heuristic) and, in the hand-written wgmma ones (6-8, 10), cuts each tile past the last full wave of CTAs
  // into up to `splits` K pieces summed in the kernel (a split tail; scratch from their workspace).
  int raster = 0;
  int swizzle = 1;
  int splits = 1;
  // K cut into this many slices, each writing fp32 partials (K/128 divisible by it; the K-sliced and the
  // decode configurations only): more CTAs for shapes with few output tiles.
  int kslices = 1;
  // The hand-written wgmma configurations (6-8, 10): each tile's bf16 store is issued while the CTA's next
  // unit's first wgmma batch runs, instead of before that batch, so that the tensor cores do not wait for
  // the epilogue; pick_tuning turns it on where that measured faster (deep K).
  bool overlap_store = false;
  // Launch as a programmatic dependent of the stream's previous kernel (the seed preparation): the GEMM is
  // launched as that kernel's blocks exit, without waiting for the whole grid's completion and memory
  // flush first, and waits for them itself (griddepcontrol.wait) before it reads any input. Only where
  // nothing else is queued in between; configurations 3 and 4 (2-CTA clusters) ignore it. (The
  // preparation does not trigger its dependents early: runs 29-30 measured that 1-17 us slower.)
  bool pdl = false;
  // The seed layout's A as it is (configurations 6-8 only): x is a (K, M) fp8, M-contiguous, and sx its
  // a_scale (K/128, M); w and sw as above (the preparation pass transposed b alone). seed_a_fits says
  // whether the problem allows it (M % 16 == 0, aligned pointers).
  bool seed_a = false;
  // With seed_a, one of the seed-A kernel's timing-only probes (SeedProbe in gemm_cuda_wgmma.cu; 0: none):
  // wrong results by design, in builds with GEMM_SEED_A_EXPERIMENT only (cudaErrorInvalidValue in others).
  int seed_probe = 0;
  // With seed_a, the staged form (gemm_cuda_wgmma.cu, wgmma_seed_staged_kernel: A's fragments written K-major
  // into shared memory, wgmma reading them there): configurations 6 and 7, builds with GEMM_SEED_A_EXPERIMENT
  // only (cudaErrorInvalidValue in others).
  bool seed_a_staged = false;
  // w's rows: fewer than N where N is rounded up to 8 for a padded output (the decode kernel's fp32 partials,
  // the kernels reading a as it is). The hand-written and decode kernels' tensor maps of w take them and fill
  // the rows past them with zeros, so w needs no padded copy there (cutlass_config in gemm_cuda_pick.h).
  int w_rows = 0;
};
bool seed_a_fits(void const *a, float const *a_scale, int64_t M);
// Whether gemm_cuda_wgmma.cu was built with GEMM_SEED_A_EXPERIMENT (GemmArgs::seed_probe, seed_a_staged).
bool seed_a_experiment_built();

// Launches kKernel<<<grid, block, smem, stream>>>(args...), as a programmatic dependent of the stream's
// previous kernel when pdl (GemmArgs::pdl; the kernel must begin with griddepcontrol.wait). Opts in to
// more than 48 KiB of shared memory once per device (a race only sets it twice; no std::call_once: it
// needs glibc 2.34's pthread_once, outside the manylinux_2_28 ABI the Hub accepts).
template <auto kKernel, class... Args>
cudaError_t launch_kernel(dim3 grid, dim3 block, int smem, int device, cudaStream_t stream, bool pdl,
                          Args const &...args) {
  static std::atomic<bool> opted_in[64];
  if (!opted_in[device & 63].load(std::memory_order_relaxed)) {
    cudaError_t const err = cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (err != cudaSuccess) return err;
    opted_in[device & 63].store(true, std::memory_order_relaxed);
  }
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = &attr;
  cfg.numAttrs = pdl ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kKernel, args...);
}

// Every configuration provides these two functions. run returns 0 on success, otherwise a CUTLASS
// status code (>0) or -cudaError_t.
using WorkspaceFn = size_t (*)(GemmArgs const &);
using RunFn = int (*)(GemmArgs const &, void *workspace, cudaStream_t stream);

struct ConfigEntry {
  char const *name;
  WorkspaceFn workspace;
  RunFn run;
};

#define GEMM_CUDA_DECLARE_CONFIG(ID)                         \
  size_t workspace_cfg##ID(GemmArgs const &);                \
  int run_cfg##ID(GemmArgs const &, void *, cudaStream_t);   \
  extern char const *const kNameCfg##ID;

GEMM_CUDA_DECLARE_CONFIG(0)
GEMM_CUDA_DECLARE_CONFIG(1)
GEMM_CUDA_DECLARE_CONFIG(2)
GEMM_CUDA_DECLARE_CONFIG(3)
GEMM_CUDA_DECLARE_CONFIG(4)
GEMM_CUDA_DECLARE_CONFIG(5)
GEMM_CUDA_DECLARE_CONFIG(6)  // hand-written wgmma kernels (gemm_cuda_wgmma.cu)
GEMM_CUDA_DECLARE_CONFIG(7)
GEMM_CUDA_DECLARE_CONFIG(8)
GEMM_CUDA_DECLARE_CONFIG(9)  // decode-like shapes, M <= 64 (gemm_cuda_decode.cu)
GEMM_CUDA_DECLARE_CONFIG(10)  // the hand-written kernel's 192x144 tiles (gemm_cuda_wgmma.cu)
GEMM_CUDA_DECLARE_CONFIG(11)  // its 128x96 tiles with two batch accumulators

#undef GEMM_CUDA_DECLARE_CONFIG

// Seed-layout preparation (gemm_cuda_prep.cu): transposes a (K, M) -> x (M, K), b (K, N) -> w (N, K),
// a_scale (K/128, M) -> x_scale (M, K/128), b_scale (K/128, NB) -> w_scale (NB, K/128); with b_only, the
// last two alone (a, x, sa and sx unused: GemmArgs::seed_a reads a as it is). Returns the launch's
// cudaError_t.
struct PrepArgs {
  uint8_t const *a;
  uint8_t const *b;
  float const *sa;
  float const *sb;
  uint8_t *x;
  uint8_t *w;
  float *sx;
  float *sw;
  int64_t M, N, K;
  bool b_only = false;
};
cudaError_t launch_seed_prep(PrepArgs const &p, cudaStream_t stream);

// The fused seed kernel (gemm_cuda_wgmma.cu): D(M, N) bf16 = the op on the seed layout's own tensors,
// a (K, M) and b (K, N) fp8 e4m3fn, sa (K/128, M) and sb (K/128, ceil(N/128)) f32, with no preparation
// pass. seed_fused_fits says whether it takes the problem (M and N multiples of 16, aligned pointers);
// run_seed_fused returns 0 or -cudaError_t.
struct SeedGemmArgs {
  void *d;
  int64_t ldd;
  void const *a;
  void const *b;
  float const *sa;
  float const *sb;
  int M, N, K;
  int device;
  int sm_count;
  // 1: the kernel. 2 or 4: its timing-only diagnostic in clusters of that many CTAs, 20 or 40 the control
  // without copies between CTAs; in builds with GEMM_SEED_DSMEM_EXPERIMENT only (gemm_cuda_wgmma.cu,
  // seed_fused_body).
  int share = 1;
};
bool seed_fused_fits(SeedGemmArgs const &g);
int run_seed_fused(SeedGemmArgs const &g, cudaStream_t stream);

// out[i] = bf16(sum over s < slices of parts[s * count + i]), i < count; count % 4 == 0, parts 16-byte
// and out 8-byte aligned. Sums in slice order (deterministic). Returns the launch's cudaError_t.
cudaError_t launch_kslice_reduce(float const *parts, int slices, int64_t count, void *out_bf16,
                                 cudaStream_t stream);

// quantize_activations in one launch (gemm_cuda_quant.cu): x (rows, blocks_per_row * 128) row-major in
// `input`'s type, 16-byte aligned -> q (same shape) float8_e4m3fn, 8-byte aligned, and scale (rows,
// blocks_per_row) f32, one per 128-element block, such that x ~ q * scale. inv_max: 1 / 448 as a float.
enum class QuantizeInput : int { kBFloat16 = 0, kFloat16 = 1, kFloat32 = 2 };
struct QuantizeRowsArgs {
  void const *x;
  QuantizeInput input;
  uint8_t *q;
  float *scale;
  int64_t rows;
  int64_t blocks_per_row;
  float inv_max;
  bool power_of_two;
  // Blocks per half-warp, their loads issued first: 1 (what the op runs); 2 or 4 in builds with
  // GEMM_QUANT_ROUNDS_EXPERIMENT only (tests/cuda/quant_sweep.py), cudaErrorInvalidValue otherwise.
  int rounds = 1;
};
cudaError_t launch_quantize_rows(QuantizeRowsArgs const &a, cudaStream_t stream);

}  // namespace gemm_cuda
