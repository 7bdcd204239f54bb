// The C++ entry points of the op. Every backend (gemm/cpu, gemm/cuda, gemm/rocm) implements both;
// a variant compiles exactly one backend. Arguments arrive validated (see check_arguments in
// torch_binding.cpp), so backends only do the arithmetic.
#pragma once

#include <torch/library.h>
#include <torch/types.h>

// Seed layout: a (K, M), b (K, N), a_scale (K/128, M), b_scale (K/128, ceil(N/128)), c (M, N) bf16.
void gemm_seed(torch::Tensor &c, torch::Tensor const &a, torch::Tensor const &b,
               torch::Tensor const &a_scale, torch::Tensor const &b_scale);

// Natural layout: x (M, K), w (N, K), x_scale (M, K/128), w_scale (ceil(N/128), K/128), out (M, N) bf16.
void gemm_natural(torch::Tensor &out, torch::Tensor const &x, torch::Tensor const &w,
                  torch::Tensor const &x_scale, torch::Tensor const &w_scale);

#if defined(CUDA_KERNEL) || defined(ROCM_KERNEL)
// quantize_activations' kernel (GPU builds; on CPU it is the torch code in gemm/quantize.py): x (M, K)
// bf16 / fp16 / fp32 -> q (M, K) FP8 (e4m3fn on CUDA, e4m3fnuz on ROCm) and scale (M, K/128) f32, x ~ q *
// scale per block.
void quantize_rows(torch::Tensor &q, torch::Tensor &scale, torch::Tensor const &x, bool power_of_two);
#endif
