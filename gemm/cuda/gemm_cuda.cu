// Hopper (sm_90a) backend of gemm: FP8 (e4m3fn) GEMM with DeepSeek-style block scaling
// (1x128 scales for A, 128x128 for B), bf16 output. This file is the torch-facing part: the op's two
// entry points, argument plumbing, scratch from torch's caching allocator, the configuration table (the
// per-shape choice among its entries, pick_tuning, is in gemm_cuda_pick.h).
//
// Natural layout (x (M,K), w (N,K), both K-contiguous) goes straight to a warp-specialized TMA + wgmma
// kernel with blockwise scale promotion in the mainloop, picked per shape: CUTLASS's sm90 collective
// (gemm_cuda_cfg*.cu), the hand-written persistent kernel (gemm_cuda_wgmma.cu: 128x128, 128x192, 192x128
// and 192x144 tiles, optionally a split tail) or, for M <= 64, the decode kernel (gemm_cuda_decode.cu). The seed layout
// (a (K,M), b (K,N): M/N-contiguous) cannot feed FP8 wgmma's shared-memory operands directly (FP8 wgmma
// reads only K-major ones), but its A operand may come from registers, filled from an M-major tile. So one
// launch (gemm_cuda_prep.cu) transposes b and b_scale into K-major scratch, and the natural path's
// configuration runs, launched as the preparation's programmatic dependent (GemmArgs::pdl), reading a and
// a_scale as they are where pick_seed_a says (GemmArgs::seed_a: N <= 1024 on the hand-written 128x128,
// 128x192 and 192x128 kernels, M % 16 == 0); elsewhere the preparation transposes a and a_scale too.
// Where pick_seed_fused says (short K, or one wave of tiles with M + N >= 6144), a fused seed kernel reads
// a and b as they are instead (kSeedFusedOnTheOpsPath). See NOTES.md.

#include <ATen/ATen.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <mutex>
#include <vector>

#include "gemm_cuda.h"
#include "gemm_cuda_kernels.h"
#include "../../torch-ext/torch_binding.h"  // the op entry points' declarations

namespace gemm_cuda {
namespace {

ConfigEntry const kConfigs[] = {
    {kNameCfg0, &workspace_cfg0, &run_cfg0},     {kNameCfg1, &workspace_cfg1, &run_cfg1},
    {kNameCfg2, &workspace_cfg2, &run_cfg2},     {kNameCfg3, &workspace_cfg3, &run_cfg3},
    {kNameCfg4, &workspace_cfg4, &run_cfg4},     {kNameCfg5, &workspace_cfg5, &run_cfg5},
    {kNameCfg6, &workspace_cfg6, &run_cfg6},     {kNameCfg7, &workspace_cfg7, &run_cfg7},
    {kNameCfg8, &workspace_cfg8, &run_cfg8},     {kNameCfg9, &workspace_cfg9, &run_cfg9},
    {kNameCfg10, &workspace_cfg10, &run_cfg10},  {kNameCfg11, &workspace_cfg11, &run_cfg11},
};
constexpr int kNumConfigs = sizeof(kConfigs) / sizeof(kConfigs[0]);
static_assert(kNumConfigs == kConfigCount, "gemm_cuda_pick.h names every configuration of kConfigs");

// The device's attributes the launchers need, read once per device. (Not ATen's getDeviceProperties: its
// header needs cuBLAS's and cuSPARSE's, which the sm_90a compile test's toolkit does not carry.)
struct DeviceInfo {
  int sms = 0;
  int capability = 0;  // major * 10 + minor
};

DeviceInfo device_info(int device) {
  static std::mutex mu;
  static std::vector<DeviceInfo> infos;
  std::lock_guard<std::mutex> lock(mu);
  if (device >= static_cast<int>(infos.size())) infos.resize(device + 1);
  DeviceInfo &info = infos[device];
  if (info.sms == 0) {
    int major = 0, minor = 0;
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    C10_CUDA_CHECK(cudaDeviceGetAttribute(&info.sms, cudaDevAttrMultiProcessorCount, device));
    info.capability = major * 10 + minor;
  }
  return info;
}

int sm_count(int device) { return device_info(device).sms; }

// The build holds sm_90a machine code only, with no PTX another GPU could compile: on any other device the
// first launch would fail with a bare CUDA error, so the call is refused first, naming the tensor.
void check_hopper(at::Tensor const &t, char const *name) {
  int const capability = device_info(t.get_device()).capability;
  TORCH_CHECK(capability == 90, name, " is on ", t.device(), ", a GPU of compute capability ", capability / 10, ".",
              capability % 10, ": this build of gemm has kernels for compute capability 9.0 (Hopper: H100, H200) only");
}

bool aligned16(void const *p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

// t itself, or a copy of it where it does not start on a 16-byte boundary (TMA bases, 16-byte loads):
// a contiguous view into a larger buffer may start anywhere; a fresh allocation is aligned.
at::Tensor aligned16_or_copy(at::Tensor const &t) { return aligned16(t.data_ptr()) ? t : t.clone(); }

void check_fp8_cuda(at::Tensor const &t, char const *name) {
  TORCH_CHECK(t.scalar_type() == at::kFloat8_e4m3fn, name,
              " must be float8_e4m3fn on CUDA (the format Hopper computes), got ", t.scalar_type());
}

void check_cutlass(int rc, int cfg, int64_t M, int64_t N, int64_t K) {
  if (rc < 0) C10_CUDA_CHECK(static_cast<cudaError_t>(-rc));
  TORCH_CHECK(rc == 0, "gemm (cuda): CUTLASS configuration ", kConfigs[cfg].name,
              " failed for M=", M, " N=", N, " K=", K, " (cutlass::Status ", rc, ")");
}

// The GEMM on K-major operands. Where out is not TMA-storable (N % 8 != 0, or a base off 16 bytes), the
// hand-written and decode kernels write it directly; CUTLASS's configurations, fp32 partials (K slices,
// summed by a second pass) and the kernels reading the seed's a as it is (TMA stores only) run with N rounded
// up to 8 into a padded scratch that is then copied to out. w's rows past N are zeros: the hand-written and
// decode kernels' TMA loads fill them (GemmArgs::w_rows); CUTLASS's configurations get w copied into a padded
// scratch first (pick_tuning keeps N % 8 != 0 off them, so only a forced configuration pays it).
// after_prep: the seed preparation is the stream's last kernel, and the GEMM may launch as its
// programmatic dependent when nothing else is queued in between.
// seed_a: x is the seed's a (K, M) and x_scale its a_scale (K/128, M), read as they are (GemmArgs::seed_a;
// tuning.cfg already chosen, one that seed_a_config allows).
void natural_impl(at::Tensor &out, at::Tensor const &x, at::Tensor const &w, at::Tensor const &x_scale,
                  at::Tensor const &w_scale, Tuning tuning, bool after_prep = false, bool seed_a = false) {
  int64_t const M = x.size(seed_a ? 1 : 0), K = x.size(seed_a ? 0 : 1), N = w.size(0);
  TORCH_CHECK(M <= INT32_MAX && N <= INT32_MAX - 8 && K <= INT32_MAX,
              "gemm (cuda): M, N and K must each fit in int32");
  TORCH_CHECK(aligned16(x.data_ptr()) && aligned16(w.data_ptr()),
              "gemm (cuda): x/a and w/b must start at 16-byte aligned addresses");
  // The seed-A experiment (Tuning::seed_probe, Tuning::seed_a = 2): a forced configuration, a build with it.
  bool const staged = (seed_a && tuning.seed_a == 2) || tuning.seed_probe == kSeedProbeStagedKernel;
  bool const experiment = tuning.seed_probe != 0 || staged;
  TORCH_CHECK(tuning.seed_probe >= 0 && tuning.seed_probe <= kSeedProbeStagedKernel,
              "gemm (cuda): Tuning::seed_probe must be 0-", kSeedProbeStagedKernel, ", got ", tuning.seed_probe);
  TORCH_CHECK(tuning.seed_probe == 0 || tuning.cfg >= 0, "gemm (cuda): Tuning::seed_probe needs a forced configuration");
  TORCH_CHECK(!experiment || seed_a_experiment_built(), "gemm (cuda): Tuning::seed_probe and Tuning::seed_a = 2 ",
              "need gemm_cuda_wgmma.cu built with -DGEMM_SEED_A_EXPERIMENT (tests/cuda/prebuild.py)");
  TORCH_CHECK(tuning.seed_probe == 0 || seed_a_fits(x.data_ptr(), x_scale.data_ptr<float>(), M),
              "gemm (cuda): Tuning::seed_probe reads x as a (K, M): M % 16 == 0 and aligned tensors needed");
  if (tuning.cfg < 0) tuning = pick_tuning(M, N, K);
  int const cfg = tuning.cfg;
  TORCH_CHECK(cfg < kNumConfigs, "gemm (cuda): no configuration ", cfg);
  TORCH_CHECK(cfg != kDecodeConfig || M <= 64, "gemm (cuda): the decode configuration takes M <= 64, got M=", M);
  TORCH_CHECK(!seed_a || seed_a_config(cfg), "gemm (cuda): configuration ", kConfigs[cfg].name,
              " does not read the seed layout's a as it is");
  TORCH_CHECK(tuning.seed_probe == 0 || (!seed_a && seed_a_config(cfg)), "gemm (cuda): Tuning::seed_probe ",
              "times the seed-A kernel of configuration 6, 7 or 8 on a natural call; got configuration ", cfg);
  // fp32 partials per K slice: always for the K-sliced configuration, for the decode one from 2 slices.
  bool const sliced = cfg == kKSliceConfig || (cfg == kDecodeConfig && tuning.kslices > 1);
  int const slices = sliced ? tuning.kslices : 1;
  TORCH_CHECK(slices >= 1 && (K / kBlock) % slices == 0, "gemm (cuda): ", slices,
              " K slices do not divide the ", K / kBlock, " K-blocks");
  int const device = x.get_device();
  cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device).stream();
  int64_t const Np = (N + 7) / 8 * 8;
  bool const any_n = !cutlass_config(cfg);  // w read through its own rows, out written at any N
  // The kernels reading the seed's a as it is store by TMA alone (their registers are spent: wgmma_gemm_body).
  bool const a_as_it_is = seed_a || tuning.seed_probe > 0;  // a probe reads x's bytes as if they were a (K, M)
  bool const direct = (any_n && !sliced && !a_as_it_is) || (Np == N && aligned16(out.data_ptr()));
  int64_t const n_cols = direct ? N : Np;  // the columns the kernel computes, and d's row stride
  at::Tensor d = direct ? out : at::empty({M, Np}, out.options());
  at::Tensor wp = w;
  bool const pad_w = Np != N && !any_n;
  if (pad_w) {
    wp = at::empty({Np, K}, w.options());
    C10_CUDA_CHECK(cudaMemcpyAsync(wp.data_ptr(), w.data_ptr(), N * K, cudaMemcpyDeviceToDevice, stream));
    C10_CUDA_CHECK(cudaMemsetAsync(static_cast<uint8_t *>(wp.data_ptr()) + N * K, 0, (Np - N) * K, stream));
  }

  // K-sliced: the GEMM writes one fp32 (M, n_cols) partial per slice, then one pass sums and rounds them.
  at::Tensor parts;
  if (sliced) parts = at::empty({slices, M, n_cols}, out.options().dtype(at::kFloat));

  GemmArgs g{};
  g.d = sliced ? parts.data_ptr() : d.data_ptr();
  g.ldd = n_cols;
  g.kslices = slices;
  g.x = x.data_ptr();
  g.w = wp.data_ptr();
  g.sx = x_scale.data_ptr<float>();
  g.sw = w_scale.data_ptr<float>();
  g.M = static_cast<int>(M);
  g.N = static_cast<int>(n_cols);
  g.w_rows = static_cast<int>(wp.size(0));
  g.K = static_cast<int>(K);
  g.device = device;
  g.sm_count = sm_count(device);
  g.raster = tuning.raster;
  g.swizzle = tuning.swizzle;
  g.splits = tuning.splits;
  g.overlap_store = tuning.overlap_store;
  g.seed_a = a_as_it_is;
  g.seed_a_staged = staged;
  g.seed_probe = tuning.seed_probe == kSeedProbeStagedKernel ? 0 : tuning.seed_probe;
  TORCH_CHECK(!staged || cfg == kSquare128Config || cfg == kWide192Config,
              "gemm (cuda): the staged form (Tuning::seed_a = 2) takes configurations 6 and 7, not ", cfg);

  size_t const ws_bytes = kConfigs[cfg].workspace(g);
  at::Tensor workspace;
  if (ws_bytes > 0) {
    workspace = at::empty({static_cast<int64_t>(ws_bytes)}, x.options().dtype(at::kByte));
  }
  // Not after w's padding copy, nor with a workspace (CUTLASS may clear it first; a split tail zeroes its
  // counters first): only kernel -> kernel.
  g.pdl = after_prep && !pad_w && ws_bytes == 0;
  int const rc = kConfigs[cfg].run(g, ws_bytes > 0 ? workspace.data_ptr() : nullptr, stream);
  check_cutlass(rc, cfg, M, N, K);
  if (sliced) {
    C10_CUDA_CHECK(launch_kslice_reduce(parts.data_ptr<float>(), slices, M * n_cols, d.data_ptr(), stream));
  }
  if (!direct) out.copy_(d.narrow(1, 0, N));
}

}  // namespace

int num_configs() { return kNumConfigs; }

char const *config_name(int cfg) {
  TORCH_CHECK(cfg >= 0 && cfg < kNumConfigs, "no configuration ", cfg);
  return kConfigs[cfg].name;
}

void natural_with_config(at::Tensor &out, at::Tensor const &x_in, at::Tensor const &w_in,
                         at::Tensor const &x_scale, at::Tensor const &w_scale, Tuning tuning) {
  check_fp8_cuda(x_in, "x");
  check_fp8_cuda(w_in, "w");
  c10::cuda::CUDAGuard guard(x_in.device());
  check_hopper(x_in, "x");
  // TMA wants 16-byte aligned bases: a contiguous view that starts elsewhere (a slice of a larger buffer)
  // is copied first, as quantize_rows does (a fresh allocation is aligned). The scales need only 4 bytes
  // (4-byte copies), and an out that TMA cannot store is handled by natural_impl.
  at::Tensor const x = aligned16_or_copy(x_in);
  at::Tensor const w = aligned16_or_copy(w_in);
  natural_impl(out, x, w, x_scale, w_scale, tuning);
}

// x and x_scale undefined: b and b_scale alone (PrepArgs::b_only).
void seed_prepare(at::Tensor &x, at::Tensor &w, at::Tensor &x_scale, at::Tensor &w_scale,
                  at::Tensor const &a, at::Tensor const &b, at::Tensor const &a_scale,
                  at::Tensor const &b_scale) {
  c10::cuda::CUDAGuard guard(a.device());
  PrepArgs p{};
  p.b_only = !x.defined();
  p.a = static_cast<uint8_t const *>(a.data_ptr());
  p.b = static_cast<uint8_t const *>(b.data_ptr());
  p.sa = a_scale.data_ptr<float>();
  p.sb = b_scale.data_ptr<float>();
  p.x = p.b_only ? nullptr : static_cast<uint8_t *>(x.data_ptr());
  p.w = static_cast<uint8_t *>(w.data_ptr());
  p.sx = p.b_only ? nullptr : x_scale.data_ptr<float>();
  p.sw = w_scale.data_ptr<float>();
  p.M = a.size(1);
  p.N = b.size(1);
  p.K = a.size(0);
  C10_CUDA_CHECK(launch_seed_prep(p, c10::cuda::getCurrentCUDAStream(a.get_device()).stream()));
}

void seed_with_config(at::Tensor &c, at::Tensor const &a_in, at::Tensor const &b_in, at::Tensor const &a_scale,
                      at::Tensor const &b_scale, Tuning tuning) {
  check_fp8_cuda(a_in, "a");
  check_fp8_cuda(b_in, "b");
  c10::cuda::CUDAGuard guard(a_in.device());
  check_hopper(a_in, "a");
  int64_t const K = a_in.size(0), M = a_in.size(1), N = b_in.size(1);
  // The 16-byte paths (the fused kernel, a read as it is, the vector transpose) take rows of 16-byte
  // multiples from aligned bases: a view starting elsewhere is copied once rather than sent down the
  // byte-wise transpose.
  at::Tensor const a = M % 16 == 0 ? aligned16_or_copy(a_in) : a_in;
  at::Tensor const b = N % 16 == 0 ? aligned16_or_copy(b_in) : b_in;
  int64_t const KB = K / kBlock, NB = (N + kBlock - 1) / kBlock;
  int const device = a.get_device();
  int const sms = sm_count(device);
  // A forced GEMM configuration (tuning.cfg >= 0) means the preparation pass, unless the fused kernel is asked for.
  bool const fused = tuning.seed_fused < 0 ? kSeedFusedOnTheOpsPath && tuning.cfg < 0 && pick_seed_fused(M, N, K, sms)
                                           : tuning.seed_fused > 0;
  if (fused && M <= INT32_MAX && N <= INT32_MAX && K <= INT32_MAX) {
    SeedGemmArgs g{};
    g.d = c.data_ptr();
    g.ldd = N;
    g.a = a.data_ptr();
    g.b = b.data_ptr();
    g.sa = a_scale.data_ptr<float>();
    g.sb = b_scale.data_ptr<float>();
    g.M = static_cast<int>(M);
    g.N = static_cast<int>(N);
    g.K = static_cast<int>(K);
    g.device = device;
    g.sm_count = sms;
    g.share = tuning.seed_fused > 1 ? tuning.seed_fused : 1;  // the diagnostic (Tuning::seed_fused)
    bool const fits = seed_fused_fits(g);
    // The diagnostic times only itself: no quiet fallback to the preparation pass under its name.
    TORCH_CHECK(g.share == 1 || fits, "the fused seed kernel's diagnostic (Tuning::seed_fused = ", tuning.seed_fused,
                ") does not take this problem");
    if (fits) {
      int const rc = run_seed_fused(g, c10::cuda::getCurrentCUDAStream(g.device).stream());
      if (rc < 0) C10_CUDA_CHECK(static_cast<cudaError_t>(-rc));
      return;
    }
  }
  at::Tensor w = at::empty({N, K}, b.options());
  at::Tensor sw = at::empty({NB, KB}, b_scale.options());
  // a read as it is where pick_seed_a says (or Tuning::seed_a forces it): the preparation then transposes b
  // alone.
  Tuning picked = tuning;
  bool const fits_int = M <= INT32_MAX && N <= INT32_MAX && K <= INT32_MAX;
  if (tuning.cfg < 0 && fits_int) {  // forced to read a so (Tuning::seed_a = 1): at any N
    picked = tuning.seed_a < 0 ? pick_seed_a(M, N, K) : seed_a_tuning(M, N, K);
  }
  bool const seed_a = tuning.seed_a != 0 && fits_int && seed_a_config(picked.cfg) &&
                      seed_a_fits(a.data_ptr(), a_scale.data_ptr<float>(), M);
  TORCH_CHECK(tuning.seed_a <= 0 || seed_a, "gemm (cuda): Tuning::seed_a = ", tuning.seed_a,
              ", but no configuration reads this a as ",
              "it is (configuration ", picked.cfg, ", M % 16 == 0 and 16-byte aligned a needed)");
  if (seed_a) {
    picked.seed_a = tuning.seed_a;  // 2: the staged form
    at::Tensor none;
    seed_prepare(none, w, none, sw, a, b, a_scale, b_scale);
    natural_impl(c, a, w, a_scale, sw, picked, /*after_prep=*/tuning.pdl, /*seed_a=*/true);
    return;
  }
  at::Tensor x = at::empty({M, K}, a.options());
  at::Tensor sx = at::empty({M, KB}, a_scale.options());
  seed_prepare(x, w, sx, sw, a, b, a_scale, b_scale);
  natural_impl(c, x, w, sx, sw, tuning, /*after_prep=*/tuning.pdl);
}

}  // namespace gemm_cuda

// The op's entry points (declared in torch-ext/torch_binding.h).
void gemm_seed(torch::Tensor &c, torch::Tensor const &a, torch::Tensor const &b,
               torch::Tensor const &a_scale, torch::Tensor const &b_scale) {
  gemm_cuda::seed_with_config(c, a, b, a_scale, b_scale, gemm_cuda::Tuning{});
}

void gemm_natural(torch::Tensor &out, torch::Tensor const &x, torch::Tensor const &w,
                  torch::Tensor const &x_scale, torch::Tensor const &w_scale) {
  gemm_cuda::natural_with_config(out, x, w, x_scale, w_scale, gemm_cuda::Tuning{});
}

// quantize_activations' kernel (declared in torch-ext/torch_binding.h, CUDA builds only). The binding
// has checked shapes, dtypes, contiguity and devices. The kernel reads x 16 bytes at a time: a view that
// starts elsewhere is copied first (a fresh allocation is aligned); here, not in Python, where
// torch.compile cannot read a view's offset without a graph break.
void quantize_rows(torch::Tensor &q, torch::Tensor &scale, torch::Tensor const &x_in, bool power_of_two) {
  gemm_cuda::quantize_rows_with(q, scale, x_in, power_of_two, 1);
}

// rounds: QuantizeRowsArgs::rounds (1 for the op; 2 and 4 in experiment builds, tests/cuda/quant_sweep.py).
void gemm_cuda::quantize_rows_with(torch::Tensor &q, torch::Tensor &scale, torch::Tensor const &x_in,
                                   bool power_of_two, int rounds) {
  TORCH_CHECK((reinterpret_cast<uintptr_t>(q.data_ptr()) & 7) == 0, "q must start on an 8-byte boundary");
  c10::cuda::CUDAGuard guard(x_in.device());
  gemm_cuda::check_hopper(x_in, "x");
  at::Tensor const x = gemm_cuda::aligned16_or_copy(x_in);
  gemm_cuda::QuantizeRowsArgs a{};
  a.x = x.data_ptr();
  switch (x.scalar_type()) {
    case at::kBFloat16: a.input = gemm_cuda::QuantizeInput::kBFloat16; break;
    case at::kHalf: a.input = gemm_cuda::QuantizeInput::kFloat16; break;
    case at::kFloat: a.input = gemm_cuda::QuantizeInput::kFloat32; break;
    default: TORCH_CHECK(false, "x must be bfloat16, float16 or float32, got ", x.scalar_type());
  }
  a.q = static_cast<uint8_t *>(q.data_ptr());
  a.scale = scale.data_ptr<float>();
  a.rows = x.size(0);
  a.blocks_per_row = x.size(1) / gemm_cuda::kBlock;
  a.inv_max = 1.0f / 448.0f;  // e4m3fn's largest finite value, as torch's GPU division by it uses it
  a.power_of_two = power_of_two;
  a.rounds = rounds;
  C10_CUDA_CHECK(gemm_cuda::launch_quantize_rows(a, c10::cuda::getCurrentCUDAStream(x.get_device()).stream()));
}
