// A pybind11 binding of the CUDA backend for development runs on a GPU machine without the build stage
// (torch.utils.cpp_extension.load; see tests/cuda/device_check.py). Exposes the two op entry points plus
// the configuration-forcing helpers the benchmark uses to tune pick_config.
#include <torch/extension.h>

#include "gemm_cuda.h"
#include "torch_binding.h"

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("gemm_seed", [](at::Tensor c, at::Tensor a, at::Tensor b, at::Tensor sa, at::Tensor sb) {
    gemm_seed(c, a, b, sa, sb);
  });
  m.def("gemm_natural", [](at::Tensor out, at::Tensor x, at::Tensor w, at::Tensor sx, at::Tensor sw) {
    gemm_natural(out, x, w, sx, sw);
  });
  // cfg < 0: the heuristic's whole choice; otherwise that configuration with these scheduler knobs.
  m.def("natural_cfg", [](at::Tensor out, at::Tensor x, at::Tensor w, at::Tensor sx, at::Tensor sw,
                          int cfg, int raster, int swizzle, int splits, int kslices, bool overlap_store,
                          int seed_probe) {
    gemm_cuda::Tuning t{cfg, raster, swizzle, splits, kslices, overlap_store};
    t.seed_probe = seed_probe;  // timing only: the seed-A kernel on x's bytes (Tuning::seed_probe)
    gemm_cuda::natural_with_config(out, x, w, sx, sw, t);
  }, py::arg("out"), py::arg("x"), py::arg("w"), py::arg("sx"), py::arg("sw"), py::arg("cfg"),
        py::arg("raster") = 0, py::arg("swizzle") = 1, py::arg("splits") = 1, py::arg("kslices") = 1,
        py::arg("overlap_store") = false, py::arg("seed_probe") = 0);
  m.def("seed_cfg", [](at::Tensor c, at::Tensor a, at::Tensor b, at::Tensor sa, at::Tensor sb, int cfg, bool pdl,
                       int splits, int fused, int seed_a, bool overlap_store) {
    gemm_cuda::Tuning t{cfg, 0, 1, splits, 1, overlap_store};
    t.pdl = pdl;
    t.seed_fused = fused;
    t.seed_a = seed_a;
    gemm_cuda::seed_with_config(c, a, b, sa, sb, t);
  }, py::arg("c"), py::arg("a"), py::arg("b"), py::arg("sa"), py::arg("sb"), py::arg("cfg"), py::arg("pdl") = true,
        py::arg("splits") = 1, py::arg("fused") = -1, py::arg("seed_a") = -1, py::arg("overlap_store") = false);
  m.def("seed_prepare", [](at::Tensor x, at::Tensor w, at::Tensor sx, at::Tensor sw, at::Tensor a,
                           at::Tensor b, at::Tensor sa, at::Tensor sb) {
    gemm_cuda::seed_prepare(x, w, sx, sw, a, b, sa, sb);
  });
  m.def("quantize_rows", [](at::Tensor q, at::Tensor scale, at::Tensor x, bool power_of_two, int rounds) {
    // The op's binding checks these (torch-ext/torch_binding.cpp); this one is called directly.
    TORCH_CHECK(x.dim() == 2 && x.is_contiguous() && x.size(1) % 128 == 0, "x: contiguous (M, K), K % 128 == 0");
    TORCH_CHECK(q.sizes() == x.sizes() && q.element_size() == 1 && q.is_contiguous(), "q: contiguous (M, K) bytes");
    TORCH_CHECK(scale.dim() == 2 && scale.size(0) == x.size(0) && scale.size(1) == x.size(1) / 128 &&
                    scale.scalar_type() == at::kFloat && scale.is_contiguous(),
                "scale: contiguous (M, K / 128) float32");
    gemm_cuda::quantize_rows_with(q, scale, x, power_of_two, rounds);
  }, py::arg("q"), py::arg("scale"), py::arg("x"), py::arg("power_of_two") = false, py::arg("rounds") = 1);
  m.def("num_configs", &gemm_cuda::num_configs);
  m.def("config_name", [](int cfg) { return std::string(gemm_cuda::config_name(cfg)); });
  m.def("pick_tuning", [](int64_t m, int64_t n, int64_t k) {
    auto t = gemm_cuda::pick_tuning(m, n, k);
    return std::vector<int>{t.cfg, t.raster, t.swizzle, t.splits, t.kslices, t.overlap_store};
  });
}
