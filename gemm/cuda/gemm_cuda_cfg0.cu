// One CUTLASS GEMM configuration (see gemm_cuda_gemm.cuh): coop_128x128_c1x1_persistent.
#include "gemm_cuda_gemm.cuh"

namespace gemm_cuda {
using Cfg0 = GemmConfig<128, 128, 1, 1, Sched::Cooperative, Tiles::Persistent>;
}
GEMM_CUDA_DEFINE_CONFIG(0, Cfg0, "coop_128x128_c1x1_persistent")
