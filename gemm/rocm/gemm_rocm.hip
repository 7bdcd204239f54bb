// gemm/rocm/gemm_rocm.hip: the torch-facing launcher of the gfx942 backend.
//
// Implements the two backend entry points of torch-ext/torch_binding.h. Inputs reaching them are
// validated by the Python layer and the binding (shapes, dtypes, contiguity, device, K % 128 == 0).
// Kernels, planning and the launch sequence live in the torch-free gemm_kernels.h, shared with
// the CPU emulator tests and with the gfx942 gate.
//
// GEMM_ROCM_KERNELS_ONLY: the gfx942 gate (scripts/gfx942_gate.py) compiles this very translation
// unit device-only with Debian's clang-19, where no torch headers exist: the torch part is left
// out and the same dispatch (run_gemm) is instantiated with a launcher that only records kernels.
#include "gemm_kernels.h"
#include "quantize_kernels.h"

#ifndef GEMM_ROCM_KERNELS_ONLY

#include <torch/all.h>

#include <c10/core/DeviceGuard.h>
#include <c10/hip/HIPStream.h>  // ROCm torch wheels ship it (hipified c10/cuda)

#include <mutex>
#include <string>
#include <unordered_map>

namespace {

// The code object holds gfx942 machine code only: on another arch the HIP runtime may refuse the
// launch or, worse (gfx950: OCP e4m3fn instead of e4m3fnuz), compute silently wrong numbers.
// Checked once per device (hipDeviceProp_t::gcnArchName, e.g. "gfx942:sramecc+:xnack-").
void check_device_arch(int device) {
  static std::mutex mu;
  static std::unordered_map<int, std::string> arch_of;  // device -> gcnArchName
  std::string arch;
  {
    const std::lock_guard<std::mutex> lock(mu);
    auto it = arch_of.find(device);
    if (it == arch_of.end()) {
      hipDeviceProp_t prop;
      const hipError_t err = hipGetDeviceProperties(&prop, device);
      TORCH_CHECK(err == hipSuccess, "gemm (rocm): hipGetDeviceProperties(", device,
                  ") failed: ", hipGetErrorString(err));
      it = arch_of.emplace(device, std::string(prop.gcnArchName)).first;
    }
    arch = it->second;
  }
  TORCH_CHECK(arch.rfind("gfx942", 0) == 0,
              "gemm (rocm): this kernel is built for gfx942 (MI300X) only, but device ", device,
              " is ", arch.empty() ? std::string("(unknown arch)") : arch);
}

struct StreamLaunch {
  hipStream_t stream;
  template <class Kernel, class KArgs>
  void operator()(Kernel kernel, dim3 grid, dim3 block, const KArgs& args) const {
    hipLaunchKernelGGL(kernel, grid, block, 0, stream, args);
    const hipError_t err = hipGetLastError();
    TORCH_CHECK(err == hipSuccess, "gemm (rocm): kernel launch failed: ", hipGetErrorString(err),
                " (grid ", grid.x, "x", grid.y, ", block ", block.x, ")");
  }
};

void run(int layout, torch::Tensor& out, const torch::Tensor& a, const torch::Tensor& b,
         const torch::Tensor& a_scale, const torch::Tensor& b_scale, int M, int N, int K) {
  TORCH_CHECK(out.is_cuda(), "gemm (rocm): output must be on a ROCm device, got ", out.device());
  TORCH_CHECK(out.scalar_type() == at::kBFloat16, "gemm (rocm): output must be bfloat16, got ",
              out.scalar_type());
  TORCH_CHECK(a.scalar_type() == at::kFloat8_e4m3fnuz && b.scalar_type() == a.scalar_type(),
              "gemm (rocm): a/x and b/w must be float8_e4m3fnuz on gfx942, got ", a.scalar_type(),
              " and ", b.scalar_type());
  TORCH_CHECK(a_scale.scalar_type() == at::kFloat && b_scale.scalar_type() == at::kFloat,
              "gemm (rocm): scales must be float32");
  TORCH_CHECK(K % gemm_rocm::kBK == 0 && M >= 1 && N >= 1 && K >= gemm_rocm::kBK,
              "gemm (rocm): need M, N >= 1 and K a positive multiple of 128, got M=", M, " N=", N,
              " K=", K);
  if (out.numel() == 0) return;

  const c10::DeviceGuard guard(out.device());
  check_device_arch(out.get_device());
  gemm_rocm::Problem pr;
  pr.layout = layout;
  pr.a = a.data_ptr();
  pr.b = b.data_ptr();
  pr.sa = a_scale.data_ptr<float>();
  pr.sb = b_scale.data_ptr<float>();
  pr.c = out.data_ptr();
  pr.M = M;
  pr.N = N;
  pr.K = K;
  const gemm_rocm::Plan plan = gemm_rocm::plan_problem(pr);

  // Split-K partials come from torch's caching allocator (bounded by kMaxWorkspaceBytes) and
  // stay alive until the reduce is enqueued; the allocator's stream semantics cover the reuse.
  torch::Tensor workspace;
  float* ws = nullptr;
  if (plan.splits > 1) {
    workspace = torch::empty({(int64_t)(plan.workspace_bytes / sizeof(float))},
                             out.options().dtype(at::kFloat));
    ws = workspace.data_ptr<float>();
  }
  gemm_rocm::run_gemm(pr, plan, ws, StreamLaunch{c10::hip::getCurrentHIPStream().stream()});
}

}  // namespace

// The binding refuses sizes past 2^31 - 128 before any backend runs; checked again here because a silent
// narrowing would compute a different product (K = 2^32 + 128 would read as 128).
static int narrow(int64_t v, char const* dim) {
  TORCH_CHECK(v >= 0 && v <= (int64_t{1} << 31) - 128, "gemm (rocm): ", dim, " must be at most 2^31 - 128, got ", v);
  return static_cast<int>(v);
}

// seed layout: a (K,M), b (K,N), a_scale (K/128,M), b_scale (K/128,ceil(N/128)), c (M,N)
void gemm_seed(torch::Tensor& c, torch::Tensor const& a, torch::Tensor const& b,
               torch::Tensor const& a_scale, torch::Tensor const& b_scale) {
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2, "gemm (rocm): a and b must be 2-D");
  run(gemm_rocm::kSeed, c, a, b, a_scale, b_scale, narrow(a.size(1), "M"), narrow(b.size(1), "N"),
      narrow(a.size(0), "K"));
}

// natural layout: x (M,K), w (N,K), x_scale (M,K/128), w_scale (ceil(N/128),K/128), out (M,N)
void gemm_natural(torch::Tensor& out, torch::Tensor const& x, torch::Tensor const& w,
                  torch::Tensor const& x_scale, torch::Tensor const& w_scale) {
  TORCH_CHECK(x.dim() == 2 && w.dim() == 2, "gemm (rocm): x and w must be 2-D");
  run(gemm_rocm::kNatural, out, x, w, x_scale, w_scale, narrow(x.size(0), "M"), narrow(w.size(0), "N"),
      narrow(x.size(1), "K"));
}

// quantize_activations' kernel: x (M, K) bf16 / fp16 / fp32 -> q (M, K) e4m3fnuz, scale (M, K/128).
// The binding has checked shapes, dtypes, contiguity and devices. The kernel reads x 16 bytes at a time: a
// view that starts elsewhere is copied first (a fresh allocation is aligned); here rather than in Python,
// where torch.compile cannot read a view's offset without a graph break.
void quantize_rows(torch::Tensor& q, torch::Tensor& scale, torch::Tensor const& x_in, bool power_of_two) {
  TORCH_CHECK((reinterpret_cast<uintptr_t>(q.data_ptr()) & 7) == 0, "q must start on an 8-byte boundary");
  const c10::DeviceGuard guard(x_in.device());
  check_device_arch(x_in.get_device());
  const torch::Tensor x = (reinterpret_cast<uintptr_t>(x_in.data_ptr()) & 15) == 0 ? x_in : x_in.clone();
  gemm_rocm::QuantizeArgs args{};
  args.x = x.data_ptr();
  switch (x.scalar_type()) {
    case at::kBFloat16: args.input = gemm_rocm::kQuantBFloat16; break;
    case at::kHalf: args.input = gemm_rocm::kQuantFloat16; break;
    case at::kFloat: args.input = gemm_rocm::kQuantFloat32; break;
    default: TORCH_CHECK(false, "x must be bfloat16, float16 or float32, got ", x.scalar_type());
  }
  args.q = static_cast<uint8_t*>(q.data_ptr());
  args.scale = scale.data_ptr<float>();
  args.blocks = x.size(0) * (x.size(1) / gemm_rocm::kQuantBlock);
  args.inv_max = 1.0f / 240.0f;  // e4m3fnuz's largest finite value, as torch's GPU division by it uses it
  args.power_of_two = power_of_two ? 1 : 0;
  gemm_rocm::launch_quantize_rows(args, StreamLaunch{c10::hip::getCurrentHIPStream().stream()});
}

#else  // GEMM_ROCM_KERNELS_ONLY

// Instantiate exactly what the torch entry points launch: run_gemm over every configuration,
// layout and load path, with a launcher that only takes the kernels' addresses.
namespace {
struct NullLaunch {
  template <class Kernel, class KArgs>
  void operator()(Kernel kernel, dim3, dim3, const KArgs&) const {
    (void)kernel;
  }
};
}  // namespace

void gemm_rocm_instantiate_all() {
  gemm_rocm::Problem pr{};
  for (int layout = 0; layout < 2; ++layout)
    for (int c = 0; c < gemm_rocm::kNumConfigs; ++c)
      for (int vec = 0; vec < 2; ++vec) {
        pr.layout = layout;
        gemm_rocm::Plan plan = gemm_rocm::make_plan(256, 256, 1024, layout, vec != 0, c, 2);
        gemm_rocm::run_gemm(pr, plan, nullptr, NullLaunch{});
      }
  gemm_rocm::launch_quantize_rows(gemm_rocm::QuantizeArgs{}, NullLaunch{});
}

#endif  // GEMM_ROCM_KERNELS_ONLY
