// Op schemas and per-backend registration. The Python wrappers in gemm/__init__.py validate every
// argument with friendly messages first; the checks here keep direct torch.ops calls from reaching a
// kernel with memory it must not touch.
#include "torch_binding.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include "registration.h"

namespace {

constexpr int64_t kBlock = 128;
// The largest M, N or K: the GPU kernels index in 32 bits, and N rounded up to whole scale blocks must still
// fit. One limit for every backend, so that a call valid on one build is valid on all.
constexpr int64_t kMaxDim = (int64_t{1} << 31) - kBlock;

void check_fp8(torch::Tensor const &t, char const *name) {
  TORCH_CHECK(t.scalar_type() == at::kFloat8_e4m3fn || t.scalar_type() == at::kFloat8_e4m3fnuz,
              name, " must be float8_e4m3fn or float8_e4m3fnuz, got ", t.scalar_type());
}

void check_2d(torch::Tensor const &t, char const *name, int64_t rows, int64_t cols,
              at::ScalarType dtype, torch::Tensor const &ref) {
  TORCH_CHECK(t.dim() == 2 && t.size(0) == rows && t.size(1) == cols, name, " must have shape (",
              rows, ", ", cols, "), got ", t.sizes());
  TORCH_CHECK(t.scalar_type() == dtype, name, " must be ", dtype, ", got ", t.scalar_type());
  TORCH_CHECK(t.is_contiguous(), name, " must be row-major contiguous");
  TORCH_CHECK(t.device() == ref.device(), name, " must be on ", ref.device(), ", got ", t.device());
}

// Whether two contiguous tensors' bytes intersect (an empty one spans none). Compared by address, not by
// storage: views of one foreign buffer have different storages, and slices of one storage may be disjoint.
bool overlap(torch::Tensor const &x, torch::Tensor const &y) {
  auto const *x0 = static_cast<char const *>(x.data_ptr());
  auto const *y0 = static_cast<char const *>(y.data_ptr());
  return x.nbytes() > 0 && y.nbytes() > 0 && x0 < y0 + y.nbytes() && y0 < x0 + x.nbytes();
}

// seed: K is the leading dim of the fp8 operands (gemm's a, b); else the natural layout's x, w.
void check_arguments(torch::Tensor const &out, torch::Tensor const &a, torch::Tensor const &b,
                     torch::Tensor const &a_scale, torch::Tensor const &b_scale, bool seed) {
  char const *a_name = seed ? "a" : "x";
  char const *b_name = seed ? "b" : "w";
  check_fp8(a, a_name);
  check_fp8(b, b_name);
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), a_name, " and ", b_name, " must share one dtype");
  TORCH_CHECK(a.dim() == 2, a_name, " must be 2-D, got ", a.dim(), "-D");
  TORCH_CHECK(b.dim() == 2, b_name, " must be 2-D, got ", b.dim(), "-D");
  int64_t const K = seed ? a.size(0) : a.size(1);
  int64_t const M = seed ? a.size(1) : a.size(0);
  int64_t const N = seed ? b.size(1) : b.size(0);
  TORCH_CHECK(K > 0 && K % kBlock == 0, "K (", seed ? "a.shape[0]" : "x.shape[1]",
              ") must be a positive multiple of 128, got ", K);
  TORCH_CHECK(M <= kMaxDim && N <= kMaxDim && K <= kMaxDim, "M, N and K must each be at most 2^31 - 128, got M=", M,
              ", N=", N, ", K=", K);
  int64_t const kb = K / kBlock, nb = (N + kBlock - 1) / kBlock;
  if (seed) {
    check_2d(a, "a", K, M, a.scalar_type(), a);
    check_2d(b, "b", K, N, a.scalar_type(), a);
    check_2d(a_scale, "a_scale", kb, M, at::kFloat, a);
    check_2d(b_scale, "b_scale", kb, nb, at::kFloat, a);
  } else {
    check_2d(a, "x", M, K, a.scalar_type(), a);
    check_2d(b, "w", N, K, a.scalar_type(), a);
    check_2d(a_scale, "x_scale", M, kb, at::kFloat, a);
    check_2d(b_scale, "w_scale", nb, kb, at::kFloat, a);
  }
  char const *out_name = seed ? "c" : "out";
  check_2d(out, out_name, M, N, at::kBFloat16, a);
  for (auto const *input : {&a, &b, &a_scale, &b_scale}) {
    TORCH_CHECK(!overlap(out, *input), out_name, " must not share memory with an input");
  }
}

// Schema order (inputs first, then the output), unlike the backends' entry points.
void gemm_checked(torch::Tensor const &a, torch::Tensor const &b, torch::Tensor const &a_scale,
                  torch::Tensor const &b_scale, torch::Tensor &c) {
  check_arguments(c, a, b, a_scale, b_scale, /*seed=*/true);
  if (c.numel() == 0) return;  // M or N is 0: an empty result, no kernel (the backends assume M, N > 0)
  gemm_seed(c, a, b, a_scale, b_scale);
}

void gemm_natural_checked(torch::Tensor const &x, torch::Tensor const &w, torch::Tensor const &x_scale,
                          torch::Tensor const &w_scale, torch::Tensor &out) {
  check_arguments(out, x, w, x_scale, w_scale, /*seed=*/false);
  if (out.numel() == 0) return;  // as gemm_checked
  gemm_natural(out, x, w, x_scale, w_scale);
}

#if defined(CUDA_KERNEL) || defined(ROCM_KERNEL)
#if defined(ROCM_KERNEL)
constexpr at::ScalarType kQuantizedType = at::kFloat8_e4m3fnuz;  // what gfx942 computes in
#else
constexpr at::ScalarType kQuantizedType = at::kFloat8_e4m3fn;
#endif

void quantize_rows_checked(torch::Tensor const &x, bool power_of_two, torch::Tensor &q, torch::Tensor &scale) {
  TORCH_CHECK(x.dim() == 2, "x must be 2-D (M, K), got ", x.dim(), "-D");
  TORCH_CHECK(x.scalar_type() == at::kBFloat16 || x.scalar_type() == at::kHalf || x.scalar_type() == at::kFloat,
              "x must be bfloat16, float16 or float32, got ", x.scalar_type());
  TORCH_CHECK(x.is_contiguous(), "x must be row-major contiguous");
  TORCH_CHECK(x.is_cuda(), "x must be on a GPU (a torch cuda device), got ", x.device());
  int64_t const M = x.size(0), K = x.size(1);
  TORCH_CHECK(K > 0 && K % kBlock == 0, "x.shape[1] (K) must be a positive multiple of 128, got ", K);
  check_2d(q, "q", M, K, kQuantizedType, x);
  check_2d(scale, "scale", M, K / kBlock, at::kFloat, x);
  TORCH_CHECK(!overlap(q, x) && !overlap(scale, x) && !overlap(q, scale), "q, scale and x must not share memory");
  quantize_rows(q, scale, x, power_of_two);
}
#endif

}  // namespace

TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops) {
  // C[m, n] = sum_kb a_scale[kb, m] * b_scale[kb, n / 128] * sum_{k in kb} a[k, m] * b[k, n], stored as bf16.
  ops.def("gemm(Tensor a, Tensor b, Tensor a_scale, Tensor b_scale, Tensor(c!) c) -> ()");
  // The same product with K-contiguous operands: out = (x * x_scale) @ (w * w_scale).T
  ops.def("gemm_natural(Tensor x, Tensor w, Tensor x_scale, Tensor w_scale, Tensor(out!) out) -> ()");
  // quantize_activations' kernel: x (M, K) -> q (M, K) FP8 and scale (M, K/128), one scale per 128 elements
  // of a row. Declared by every build so that the Python package registers one fake for it; implemented by
  // the GPU builds (gemm/quantize.py runs the same arithmetic in torch on CPU).
  ops.def("quantize_rows(Tensor x, bool power_of_two, Tensor(q!) q, Tensor(scale!) scale) -> ()");
#if defined(CPU_KERNEL)
  ops.impl("gemm", torch::kCPU, &gemm_checked);
  ops.impl("gemm_natural", torch::kCPU, &gemm_natural_checked);
#elif defined(CUDA_KERNEL) || defined(ROCM_KERNEL)
  // ROCm builds of torch dispatch HIP tensors under the CUDA key too.
  ops.impl("gemm", torch::kCUDA, &gemm_checked);
  ops.impl("gemm_natural", torch::kCUDA, &gemm_natural_checked);
  ops.impl("quantize_rows", torch::kCUDA, &quantize_rows_checked);
#else
#error "define one of CPU_KERNEL, CUDA_KERNEL, ROCM_KERNEL"
#endif
}

REGISTER_EXTENSION(TORCH_EXTENSION_NAME)
