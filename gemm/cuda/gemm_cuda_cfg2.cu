// One CUTLASS GEMM configuration (see gemm_cuda_gemm.cuh): pingpong_64x128_c1x1_persistent.
#include "gemm_cuda_gemm.cuh"

namespace gemm_cuda {
using Cfg2 = GemmConfig<64, 128, 1, 1, Sched::Pingpong, Tiles::Persistent>;
}
GEMM_CUDA_DEFINE_CONFIG(2, Cfg2, "pingpong_64x128_c1x1_persistent")
