// Hopper (sm_90a) backend of gemm: internal interface shared by gemm_cuda.cu and the tuning binding
// under tests/cuda/. The op's two entry points (gemm_seed, gemm_natural) are declared in
// torch-ext/torch_binding.h; these extra functions let a benchmark force one tile configuration.
#pragma once

#include <ATen/ATen.h>

namespace gemm_cuda {

// Number of compiled GEMM configurations (see kConfigNames in gemm_cuda.cu).
// A choice of compiled configuration plus the tile scheduler's runtime knobs (see GemmArgs in
// gemm_cuda_kernels.h). cfg < 0 means: let pick_tuning decide everything.
struct Tuning {
  int cfg = -1;
  int raster = 0;
  int swizzle = 1;
  int splits = 1;
  int kslices = 1;  // K slices of the K-sliced and the decode configurations (ignored by the others)
  // The hand-written configurations (6-8, 10) store a tile beside the next one's first batch (GemmArgs).
  bool overlap_store = false;
  // Seed layout: the GEMM launches as a programmatic dependent of the preparation (GemmArgs::pdl); false
  // only to measure what that saves (tests/cuda/config_sweep.py variant `spicknopdl`).
  bool pdl = true;
};

// Number of compiled GEMM configurations (see kNameCfg* in gemm_cuda_cfg*.cu).
int num_configs();
// Human-readable name of configuration `cfg` ("coop_128x128_persistent", ...).
char const *config_name(int cfg);
// What the shape heuristic picks for an (M, N, K) problem.
Tuning pick_tuning(int64_t M, int64_t N, int64_t K);

// Natural layout with a forced tuning (tuning.cfg < 0: the heuristic's choice).
void natural_with_config(at::Tensor &out, at::Tensor const &x, at::Tensor const &w,
                         at::Tensor const &x_scale, at::Tensor const &w_scale, Tuning tuning);
// Seed layout with a forced tuning (tuning.cfg < 0: the heuristic's choice).
void seed_with_config(at::Tensor &c, at::Tensor const &a, at::Tensor const &b,
                      at::Tensor const &a_scale, at::Tensor const &b_scale, Tuning tuning);
// The seed layout's preparation step alone (transposes into K-major scratch), for timing it.
void seed_prepare(at::Tensor &x, at::Tensor &w, at::Tensor &x_scale, at::Tensor &w_scale,
                  at::Tensor const &a, at::Tensor const &b, at::Tensor const &a_scale,
                  at::Tensor const &b_scale);

}  // namespace gemm_cuda
