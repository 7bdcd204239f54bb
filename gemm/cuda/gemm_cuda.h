// Hopper (sm_90a) backend of gemm: internal interface shared by gemm_cuda.cu and the tuning binding
// under tests/cuda/. The op's two entry points (gemm_seed, gemm_natural) are declared in
// torch-ext/torch_binding.h; these extra functions let a benchmark force one tile configuration.
#pragma once

#include <ATen/ATen.h>

#include "gemm_cuda_pick.h"  // Tuning, pick_tuning

namespace gemm_cuda {

// Number of compiled GEMM configurations (see kNameCfg* in gemm_cuda_cfg*.cu).
int num_configs();
// Human-readable name of configuration `cfg` ("coop_128x128_persistent", ...).
char const *config_name(int cfg);

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

// quantize_activations' kernel (the op quantize_rows) with `rounds` blocks per half-warp (QuantizeRowsArgs;
// 1 is what the op runs, 2 and 4 need GEMM_QUANT_ROUNDS_EXPERIMENT): for timing them.
void quantize_rows_with(at::Tensor &q, at::Tensor &scale, at::Tensor const &x, bool power_of_two, int rounds);

}  // namespace gemm_cuda
