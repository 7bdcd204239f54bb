// One CUTLASS GEMM configuration (see gemm_cuda_gemm.cuh): coop_128x128_c2x1_persistent.
#include "gemm_cuda_gemm.cuh"

namespace gemm_cuda {
using Cfg4 = GemmConfig<128, 128, 2, 1, Sched::Cooperative, Tiles::Persistent>;
}
GEMM_CUDA_DEFINE_CONFIG(4, Cfg4, "coop_128x128_c2x1_persistent")
