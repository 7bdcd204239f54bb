// CUTLASS sm90 blockwise-scaled FP8 GEMM, one configuration per instantiation. Included only by the
// gemm_cuda_cfg*.cu translation units (torch-free). The CUTLASS/CuTe headers come from the
// nvidia-cutlass PyPI package at build time (include dirs: cutlass_library/source/include and
// cutlass_library/source/tools/util/include).
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "cute/tensor.hpp"
#include "cutlass/cutlass.h"
#include "cutlass/detail/blockwise_scale_layout.hpp"
#include "cutlass/epilogue/collective/collective_builder.hpp"
#include "cutlass/epilogue/dispatch_policy.hpp"
#include "cutlass/gemm/collective/collective_builder.hpp"
#include "cutlass/gemm/device/gemm_universal_adapter.h"
#include "cutlass/gemm/dispatch_policy.hpp"
#include "cutlass/gemm/kernel/gemm_universal.hpp"
#include "cutlass/gemm/kernel/tile_scheduler_params.h"
#include "cutlass/numeric_types.h"
#include "cutlass/util/packed_stride.hpp"

#include "gemm_cuda_kernels.h"

namespace gemm_cuda {

enum class Sched { Cooperative, Pingpong };
enum class Tiles { Persistent, StreamK };

// OutT: bf16 for the op's output; float for the K-sliced configuration, whose per-slice partial products
// are summed and rounded by launch_kslice_reduce.
template <int TM, int TN, int CM, int CN, Sched S, Tiles T, class OutT = cutlass::bfloat16_t>
struct GemmConfig {
  using ElementA = cutlass::float_e4m3_t;
  using ElementB = cutlass::float_e4m3_t;
  using ElementD = OutT;
  using ElementAcc = float;
  using ElementCompute = float;
  using LayoutA = cutlass::layout::RowMajor;     // x (M, K): K-contiguous
  using LayoutB = cutlass::layout::ColumnMajor;  // w (N, K): K-contiguous
  using LayoutD = cutlass::layout::RowMajor;     // out (M, N)
  static constexpr int kAlignAB = 16;            // elements (16 bytes)
  static constexpr int kAlignD = 16 / sizeof(OutT);  // elements (16 bytes)

  using TileShape = cute::Shape<cute::Int<TM>, cute::Int<TN>, cute::_128>;
  using ClusterShape = cute::Shape<cute::Int<CM>, cute::Int<CN>, cute::_1>;

  // 1x128 scales for A (x_scale (M, K/128): K-major), 128x128 for B (w_scale (N/128, K/128): K-major).
  using ScaleConfig = cutlass::detail::Sm90BlockwiseScaleConfig<1, 128, 128, cute::GMMA::Major::K,
                                                                cute::GMMA::Major::K>;
  using LayoutSFA = decltype(ScaleConfig::deduce_layoutSFA());
  using LayoutSFB = decltype(ScaleConfig::deduce_layoutSFB());

  using KernelSchedule =
      std::conditional_t<S == Sched::Cooperative,
                         cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8Blockwise,
                         cutlass::gemm::KernelTmaWarpSpecializedPingpongFP8Blockwise>;
  using EpilogueSchedule =
      std::conditional_t<S == Sched::Cooperative, cutlass::epilogue::TmaWarpSpecializedCooperative,
                         cutlass::epilogue::TmaWarpSpecialized>;
  using TileScheduler = std::conditional_t<T == Tiles::StreamK, cutlass::gemm::StreamKScheduler,
                                           cutlass::gemm::PersistentScheduler>;

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, ElementAcc, ElementCompute,
      void, LayoutD, kAlignD,  // no C source
      ElementD, LayoutD, kAlignD, EpilogueSchedule>::CollectiveOp;

  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementA,
      cute::tuple<LayoutA, LayoutSFA>, kAlignAB, ElementB, cute::tuple<LayoutB, LayoutSFB>,
      kAlignAB, ElementAcc, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      KernelSchedule>::CollectiveOp;

  using GemmKernel =
      cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, CollectiveMainloop,
                                           CollectiveEpilogue, TileScheduler>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;
};

template <class Cfg>
typename Cfg::Gemm::Arguments make_arguments(GemmArgs const &g) {
  using GemmKernel = typename Cfg::GemmKernel;
  using StrideA = typename GemmKernel::StrideA;
  using StrideB = typename GemmKernel::StrideB;
  using StrideC = typename GemmKernel::StrideC;
  using StrideD = typename GemmKernel::StrideD;
  StrideA stride_a = cutlass::make_cute_packed_stride(StrideA{}, cute::make_shape(g.M, g.K, 1));
  StrideB stride_b = cutlass::make_cute_packed_stride(StrideB{}, cute::make_shape(g.N, g.K, 1));
  StrideC stride_c = cutlass::make_cute_packed_stride(StrideC{}, cute::make_shape(g.M, g.N, 1));
  StrideD stride_d = cutlass::make_cute_packed_stride(StrideD{}, cute::make_shape(g.M, g.N, 1));
  cute::get<0>(stride_d) = g.ldd;  // row stride of D (a padded scratch when N % 8 != 0)
  auto layout_sfa = Cfg::ScaleConfig::tile_atom_to_shape_SFA(cute::make_shape(g.M, g.N, g.K, 1));
  auto layout_sfb = Cfg::ScaleConfig::tile_atom_to_shape_SFB(cute::make_shape(g.M, g.N, g.K, 1));
  int const S = g.kslices;
  int const Ks = g.K / S;
  if (S > 1) {
    // K cut into S slices run as a batch of S GEMMs over the same tensors: batch s reads columns
    // [s*Ks, (s+1)*Ks) of x and w (batch stride Ks, row stride still K) and K-blocks [s*Ks/128, ...)
    // of both scale tensors, and writes its fp32 partial product to slice s of D (batch stride M*ldd).
    using namespace cute;
    cute::get<2>(stride_a) = Ks;
    cute::get<2>(stride_b) = Ks;
    cute::get<2>(stride_d) = static_cast<int64_t>(g.M) * g.ldd;
    auto sfa = Cfg::ScaleConfig::tile_atom_to_shape_SFA(make_shape(g.M, g.N, Ks, S));
    auto sfb = Cfg::ScaleConfig::tile_atom_to_shape_SFB(make_shape(g.M, g.N, Ks, S));
    layout_sfa = make_layout(shape(sfa), make_stride(make_stride(_0{}, g.K / 128), make_stride(_0{}, _1{}), Ks / 128));
    layout_sfb = make_layout(shape(sfb), make_stride(make_stride(_0{}, g.K / 128), make_stride(_0{}, _1{}), Ks / 128));
  }

  cutlass::KernelHardwareInfo hw;
  hw.device_id = g.device;
  hw.sm_count = g.sm_count;

  typename Cfg::Gemm::Arguments args{
      cutlass::gemm::GemmUniversalMode::kGemm,
      {g.M, g.N, Ks, S},
      {static_cast<typename Cfg::ElementA const *>(g.x), stride_a,
       static_cast<typename Cfg::ElementB const *>(g.w), stride_b, g.sx, layout_sfa, g.sw, layout_sfb},
      {{}, nullptr, stride_c, static_cast<typename Cfg::ElementD *>(g.d), stride_d},
      hw};
  args.epilogue.thread.alpha = 1.0f;
  args.epilogue.thread.beta = 0.0f;
  using Raster = cutlass::gemm::kernel::detail::RasterOrderOptions;
  args.scheduler.raster_order = g.raster == 1 ? Raster::AlongM : g.raster == 2 ? Raster::AlongN : Raster::Heuristic;
  args.scheduler.max_swizzle_size = g.swizzle;
  if constexpr (std::is_same_v<typename Cfg::TileScheduler, cutlass::gemm::StreamKScheduler>) {
    if (g.splits > 1) {
      args.scheduler.splits = g.splits;
      args.scheduler.decomposition_mode = cutlass::gemm::kernel::detail::DecompositionMode::SplitK;
    }
  }
  return args;
}

template <class Cfg>
size_t workspace_size(GemmArgs const &g) {
  return Cfg::Gemm::get_workspace_size(make_arguments<Cfg>(g));
}

// CUTLASS's kernel (what cutlass::device_kernel runs) behind griddepcontrol.wait in every thread: when
// launched as a programmatic dependent (GemmArgs::pdl) nothing reads an input before the previous grid
// has finished; otherwise the wait returns at once. Not CUTLASS's own hooks (CUTLASS_ENABLE_GDC_FOR_SM90):
// in 4.2 the warp that loads the blockwise scales (MainloopAux in
// sm90_gemm_tma_warpspecialized_cooperative.hpp) reads them without waiting, so run 27 read unwritten
// scales on 3 of the 19 seed-layout shapes (and its stream-K scheduler does not compile with them).
template <class Kernel>
__global__ void __launch_bounds__(Kernel::MaxThreadsPerBlock, Kernel::MinBlocksPerMultiprocessor)
    kernel_after_previous_grid(CUTLASS_GRID_CONSTANT typename Kernel::Params const params) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  extern __shared__ char smem[];
  Kernel op;
  op(params, smem);
}

template <class Cfg>
int run(GemmArgs const &g, void *workspace, cudaStream_t stream) {
  auto args = make_arguments<Cfg>(g);
  typename Cfg::Gemm gemm;
  cutlass::Status st = gemm.can_implement(args);
  if (st != cutlass::Status::kSuccess) return static_cast<int>(st);
  st = gemm.initialize(args, workspace, stream);
  if (st != cutlass::Status::kSuccess) return static_cast<int>(st);
  if constexpr (cute::size(typename Cfg::ClusterShape{}) == 1) {
    // The launch GemmUniversalAdapter::run makes for 1x1 clusters (grid, block, shared memory).
    using Kernel = typename Cfg::GemmKernel;
    cudaError_t const err = launch_kernel<kernel_after_previous_grid<Kernel>>(
        Cfg::Gemm::get_grid_shape(gemm.params()), Kernel::get_block_shape(), Kernel::SharedStorageSize, g.device,
        stream, g.pdl, gemm.params());
    if (err != cudaSuccess) return -static_cast<int>(err);
  } else {
    // Configurations 3 and 4 (2-CTA clusters; pick_tuning never takes them): CUTLASS's own launch, never
    // a dependent one (runs 27-31 measured the dependent launch on the 1x1 ones only).
    st = gemm.run(stream);
    if (st != cutlass::Status::kSuccess) return static_cast<int>(st);
  }
  cudaError_t const err = cudaGetLastError();
  return err == cudaSuccess ? 0 : -static_cast<int>(err);
}

}  // namespace gemm_cuda

// Defines workspace_cfg<ID>, run_cfg<ID> and kNameCfg<ID> for one configuration type.
#define GEMM_CUDA_DEFINE_CONFIG(ID, CFG, NAME)                                                   \
  namespace gemm_cuda {                                                                          \
  size_t workspace_cfg##ID(GemmArgs const &g) { return workspace_size<CFG>(g); }                 \
  int run_cfg##ID(GemmArgs const &g, void *ws, cudaStream_t s) { return run<CFG>(g, ws, s); }    \
  char const *const kNameCfg##ID = NAME;                                                         \
  }
