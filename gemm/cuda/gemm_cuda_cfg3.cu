// One CUTLASS GEMM configuration (see gemm_cuda_gemm.cuh): coop_128x128_c1x2_persistent.
#include "gemm_cuda_gemm.cuh"

namespace gemm_cuda {
using Cfg3 = GemmConfig<128, 128, 1, 2, Sched::Cooperative, Tiles::Persistent>;
}
GEMM_CUDA_DEFINE_CONFIG(3, Cfg3, "coop_128x128_c1x2_persistent")
