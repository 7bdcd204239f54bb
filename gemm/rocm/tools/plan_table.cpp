// Prints the planner's choice and cost-model estimate for the 18 challenge benchmark shapes and the
// 11 challenge test shapes (the numbers in gemm/rocm/DESIGN.md). Host C++ only, no HIP:
//   clang++-19 -std=c++17 -I gemm/rocm gemm/rocm/tools/plan_table.cpp -o /tmp/plan_table && /tmp/plan_table
#include <cmath>
#include <cstdio>

#include "gemm_plan.h"

using namespace gemm_rocm;

int main() {
  const int ms[2] = {1024, 6144};
  const int nk[9][2] = {{1536, 7168}, {3072, 1536}, {576, 7168},  {7168, 256}, {7168, 2048},
                        {4608, 7168}, {7168, 2304}, {512, 7168}, {4096, 512}};
  double log_seed = 0, log_nat = 0;
  std::printf("| M | N | K | SoL us | seed: config x splits (blocks) | seed est us | natural: config x splits |"
              " natural est us | workspace MiB |\n|---|---|---|---|---|---|---|---|---|\n");
  for (int m : ms)
    for (auto& s : nk) {
      const int n = s[0], k = s[1];
      const Plan ps = make_plan(m, n, k, kSeed, true), pn = make_plan(m, n, k, kNatural, true);
      const double sol = std::fmax(2.0 * m * n * k / 2614.9e12, (double(m) * k + double(n) * k + 2.0 * m * n) / 5.3e12);
      std::printf("| %d | %d | %d | %.2f | %s x%d (%d) | %.1f | %s x%d | %.1f | %.1f |\n", m, n, k, sol * 1e6,
                  config_info(ps.config).name, ps.splits, ps.tiles_m * ps.tiles_n * ps.splits, ps.est_seconds * 1e6,
                  config_info(pn.config).name, pn.splits, pn.est_seconds * 1e6,
                  double(ps.workspace_bytes > pn.workspace_bytes ? ps.workspace_bytes : pn.workspace_bytes) / (1 << 20));
      log_seed += std::log(ps.est_seconds * 1e6);
      log_nat += std::log(pn.est_seconds * 1e6);
    }
  std::printf("\ngeometric mean of the estimates: seed %.1f us, natural %.1f us\n\n", std::exp(log_seed / 18),
              std::exp(log_nat / 18));
  const int tests[11][3] = {{64, 64, 128},    {64, 1536, 7168}, {64, 3072, 1536}, {64, 576, 7168},
                            {96, 7168, 256},  {96, 7168, 2048}, {96, 4608, 7168}, {128, 7168, 2304},
                            {128, 512, 7168}, {512, 4096, 512}, {512, 1536, 7168}};
  std::printf("| M | N | K | config x splits | est us |\n|---|---|---|---|---|\n");
  for (auto& t : tests) {
    const Plan p = make_plan(t[0], t[1], t[2], kSeed, true);
    std::printf("| %d | %d | %d | %s x%d | %.1f |\n", t[0], t[1], t[2], config_info(p.config).name, p.splits,
                p.est_seconds * 1e6);
  }
  return 0;
}
