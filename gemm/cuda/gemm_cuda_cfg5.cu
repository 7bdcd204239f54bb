// One CUTLASS GEMM configuration (see gemm_cuda_gemm.cuh): coop_128x128_c1x1_kslices_f32, the K-sliced
// configuration: fp32 partial products per K slice, summed by launch_kslice_reduce (gemm_cuda_reduce.cu).
#include "gemm_cuda_gemm.cuh"

namespace gemm_cuda {
using Cfg5 = GemmConfig<128, 128, 1, 1, Sched::Cooperative, Tiles::Persistent, float>;
}
GEMM_CUDA_DEFINE_CONFIG(5, Cfg5, "coop_128x128_c1x1_kslices_f32")
