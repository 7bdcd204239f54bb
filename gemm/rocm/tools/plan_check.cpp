// Invariants of the host plan (gemm_plan.h) over a grid of shapes, both layouts, both load paths,
// free and forced choices. Exit status 0 when all hold; prints the first violations otherwise.
// Run by tests/rocm/test_gfx942_gate.py:
//   clang++-19 -std=c++17 -fsanitize=undefined -I gemm/rocm gemm/rocm/tools/plan_check.cpp
#include <cstdio>
#include <initializer_list>

#include "gemm_plan.h"

using namespace gemm_rocm;

static int failures = 0;
#define CHECK(cond, ...)                                                   \
  do {                                                                     \
    if (!(cond)) {                                                         \
      if (failures++ < 20) {                                               \
        std::printf("FAIL %s: M=%d N=%d K=%d layout=%d aligned=%d fc=%d fs=%d: ", #cond, M, N, K, layout, \
                    (int)aligned, fc, fs);                                 \
        std::printf(__VA_ARGS__);                                          \
        std::printf("\n");                                                 \
      }                                                                    \
    }                                                                      \
  } while (0)

// The launch grid covers every tile once, leaves fewer than one row spare, and stays within HIP's limit.
static void check_grid(const Plan& p, int M, int N, int K, int layout, bool aligned, int fc, int fs) {
  const unsigned long long threads = (unsigned long long)config_info(p.config).threads();
  const long long tiles = (long long)p.tiles_m * p.tiles_n, blocks = (long long)p.grid_x * p.grid_z;
  CHECK(p.grid_x >= 1 && p.grid_z >= 1 && blocks >= tiles && blocks - tiles < p.grid_x, "grid %d x %d for %lld tiles",
        p.grid_x, p.grid_z, tiles);
  CHECK((unsigned long long)p.grid_x * threads <= kMaxWorkItemsPerDim, "grid_x %d x %llu threads", p.grid_x, threads);
  CHECK(p.grid_z == 1 || tiles * threads > (long long)kMaxWorkItemsPerDim, "grid_z %d without need", p.grid_z);
}

static void check(int M, int N, int K, int layout, bool aligned, int fc, int fs) {
  const Plan p = make_plan(M, N, K, layout, aligned, fc, fs);
  const int KB = K / kBK;
  CHECK(p.config >= 0 && p.config < kNumConfigs, "config %d", p.config);
  const ConfigInfo& ci = config_info(p.config);
  CHECK(p.splits >= 1 && p.splits <= KB, "splits %d", p.splits);
  CHECK(p.kb_per_split >= 1 && (long long)p.kb_per_split * p.splits >= KB &&
            (long long)p.kb_per_split * (p.splits - 1) < KB,
        "splits %d x %d K-blocks for %d", p.splits, p.kb_per_split, KB);
  CHECK(p.tiles_m == ceil_div(M, ci.bm) && p.tiles_n == ceil_div(N, ci.bn), "tiles %d x %d", p.tiles_m, p.tiles_n);
  const size_t ws = p.splits > 1 ? size_t(p.splits) * size_t(M) * size_t(N) * 4 : 0;
  CHECK(p.workspace_bytes == ws, "workspace %zu != %zu", p.workspace_bytes, ws);
  if (fs <= 0) CHECK(p.workspace_bytes <= kMaxWorkspaceBytes, "workspace %zu over the bound", p.workspace_bytes);
  CHECK(p.vec == aligned, "vec %d", (int)p.vec);
  CHECK(p.est_seconds > 0 && p.est_seconds < 10.0, "estimate %g s", p.est_seconds);
  if (fc >= 0) CHECK(p.config == fc, "forced config %d, got %d", fc, p.config);
  if (fs > 0) CHECK(p.splits == (fs < KB ? ceil_div(KB, ceil_div(KB, fs)) : KB), "forced splits %d, got %d", fs, p.splits);
  CHECK((long long)p.tiles_m * p.tiles_n < (1LL << 31) && p.splits <= 65535, "grid %d x %d, %d", p.tiles_m, p.tiles_n,
        p.splits);
  check_grid(p, M, N, K, layout, aligned, fc, fs);
}

int main() {
  const int ms[] = {1, 2, 3, 17, 63, 64, 65, 96, 127, 128, 129, 255, 256, 257, 511, 512, 1000, 1024, 4097, 6144, 70000};
  const int ks[] = {128, 256, 384, 512, 1536, 2048, 2304, 7168, 16384, 131072};
  long long n_checked = 0;
  for (int M : ms)
    for (int N : ms)
      for (int K : ks)
        for (int layout = 0; layout < 2; ++layout)
          for (int aligned = 0; aligned < 2; ++aligned) {
            check(M, N, K, layout, aligned != 0, -1, 0);
            ++n_checked;
            if (M <= 1024 && N <= 1024 && K <= 2304)
              for (int fc = 0; fc < kNumConfigs; ++fc)
                for (int fs : {1, 2, 3, 5, 16}) {
                  check(M, N, K, layout, aligned != 0, fc, fs);
                  ++n_checked;
                }
          }
  // A grid row of tiles past HIP's 2^32 - 1 work-items (a few rows of M, N near 2^31): the tiles go over z too.
  bool rows = false;
  for (int M : {1, 20, 64})
    for (int N : {(1 << 30) - 64, (1 << 30) - 63, 2147483520})
      for (int layout = 0; layout < 2; ++layout)
        for (int fc = -1; fc < kNumConfigs; ++fc) {
          const int K = 128, fs = fc < 0 ? 0 : 1;
          const bool aligned = true;
          const Plan p = make_plan(M, N, K, layout, aligned, fc, fs);
          check_grid(p, M, N, K, layout, aligned, fc, fs);
          rows = rows || p.grid_z > 1;
          ++n_checked;
        }
  if (!rows) {
    std::printf("FAIL no plan needed a second grid row: the limit is never exercised\n");
    ++failures;
  }
  // every configuration is the planner's own choice for some challenge-like shape
  bool chosen[kNumConfigs] = {};
  for (int M : ms)
    for (int N : ms)
      for (int K : ks) chosen[make_plan(M, N, K, kSeed, true).config] = true;
  for (int c = 0; c < kNumConfigs; ++c)
    if (!chosen[c]) {
      std::printf("FAIL config %d (%s) is never chosen by the planner\n", c, config_info(c).name);
      ++failures;
    }
  std::printf("%lld plans checked, %d failures\n", n_checked, failures);
  return failures ? 1 : 0;
}
