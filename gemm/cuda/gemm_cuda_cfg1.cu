// One CUTLASS GEMM configuration (see gemm_cuda_gemm.cuh): coop_128x128_c1x1_streamk.
#include "gemm_cuda_gemm.cuh"

namespace gemm_cuda {
using Cfg1 = GemmConfig<128, 128, 1, 1, Sched::Cooperative, Tiles::StreamK>;
}
GEMM_CUDA_DEFINE_CONFIG(1, Cfg1, "coop_128x128_c1x1_streamk")
