// Runs the real gfx942 GEMM (gemm/rocm/gemm_kernels.h, unmodified) on the CPU through the HIP
// emulator, with the kernels' own host-side dispatch (gemm_rocm::run_gemm) and a forced plan.
// Driven by tests/rocm/test_emulator_kernel.py.
//
//   emu_gemm LAYOUT CONFIG SPLITS PATH M N K DIR [ROW]
//     LAYOUT: seed | natural       CONFIG: row of the configuration table (-1: the planner's choice)
//     SPLITS: split-K factor asked of the planner (0: the planner's choice)
//     PATH:   vec | bytes | bytes-misaligned (operand bases moved 1 byte off alignment, c 2 bytes:
//             bf16-aligned, not 8-byte aligned, so the epilogue stores one element at a time)
//     DIR/a.bin b.bin: fp8 bytes (seed: a (K,M), b (K,N); natural: x (M,K), w (N,K))
//     DIR/sa.bin sb.bin: f32 scales of the layout;  DIR/c.bin: (M,N) bf16 bits, poisoned by the
//     test; overwritten with the kernel's output. Prints the plan as one JSON line.
//     ROW: at most this many blocks a grid row (gemm_plan.h set_grid), so that the tiles go over z as they
//     do on the GPU past HIP's 2^32 - 1 work-items a dimension (0 or absent: that limit alone).
#define GEMM_HIP_EMULATOR 1
#include "../../gemm_kernels.h"
#include "driver_io.h"

#include <fstream>
#include <string>

namespace {

// A heap buffer holding `bytes` at `offset` past a 256-byte aligned address, with exactly the bytes
// the kernel may touch (ASan sees any overrun).
struct Buffer {
  unsigned char *raw = nullptr;
  unsigned char *ptr = nullptr;
  Buffer(size_t bytes, size_t offset) {
    raw = static_cast<unsigned char *>(std::aligned_alloc(256, ((bytes + offset + 255) / 256) * 256));
    ptr = raw + offset;
  }
  ~Buffer() { std::free(raw); }
  Buffer(const Buffer &) = delete;
  Buffer &operator=(const Buffer &) = delete;
};

}  // namespace

int main(int argc, char **argv) {
  if (argc != 9 && argc != 10) {
    std::fprintf(stderr, "usage: emu_gemm seed|natural CONFIG SPLITS vec|bytes|bytes-misaligned M N K DIR [ROW]\n");
    return 2;
  }
  const std::string layout_s = argv[1], path = argv[4], dir = argv[8];
  const int config = std::atoi(argv[2]), splits = std::atoi(argv[3]);
  const int M = std::atoi(argv[5]), N = std::atoi(argv[6]), K = std::atoi(argv[7]);
  const int row = argc == 10 ? std::atoi(argv[9]) : 0;
  if ((layout_s != "seed" && layout_s != "natural") || (path != "vec" && path != "bytes" && path != "bytes-misaligned") ||
      M < 1 || N < 1 || K < 128 || K % 128 != 0 || config >= gemm_rocm::kNumConfigs || row < 0) {
    std::fprintf(stderr, "bad arguments\n");
    return 2;
  }
  const int layout = layout_s == "seed" ? gemm_rocm::kSeed : gemm_rocm::kNatural;
  const size_t KB = size_t(K) / 128, NB = (size_t(N) + 127) / 128;
  const size_t off = path == "bytes-misaligned" ? 1 : 0;

  Buffer a(size_t(M) * K, off), b(size_t(N) * K, off);
  Buffer sa(KB * M * 4, 0), sb(KB * NB * 4, 0), c(size_t(M) * N * 2, 2 * off);
  auto load = [&](const char *name, Buffer &buf, size_t bytes) {
    auto v = driver_io::read_file(dir + "/" + name, bytes);
    std::memcpy(buf.ptr, v.data(), bytes);
  };
  load("a.bin", a, size_t(M) * K);
  load("b.bin", b, size_t(N) * K);
  load("sa.bin", sa, KB * M * 4);
  load("sb.bin", sb, KB * NB * 4);
  load("c.bin", c, size_t(M) * N * 2);

  gemm_rocm::Problem pr;
  pr.layout = layout;
  pr.a = a.ptr;
  pr.b = b.ptr;
  pr.sa = reinterpret_cast<const float *>(sa.ptr);
  pr.sb = reinterpret_cast<const float *>(sb.ptr);
  pr.c = c.ptr;
  pr.M = M;
  pr.N = N;
  pr.K = K;
  // vec: the planner reads the alignment from the real pointers (as the torch op does);
  // bytes*: aligned=false asks for the byte-load path (gemm/rocm/EMU_NEEDS.md).
  gemm_rocm::Plan plan = path == "vec" ? gemm_rocm::plan_problem(pr, config, splits)
                                       : gemm_rocm::make_plan(M, N, K, layout, false, config, splits);
  if (row > 0) gemm_rocm::set_grid(plan, row);
  if (path == "bytes-misaligned" && gemm_rocm::plan_problem(pr, config, splits).vec) {
    std::fprintf(stderr, "misaligned operands but the planner chose the vector path\n");
    return 3;
  }
  if (path == "vec" && !plan.vec) {
    std::fprintf(stderr, "vec path asked but the planner found the problem unaligned\n");
    return 3;
  }

  // Workspace poisoned with NaN: a split partial that is never written shows up in the output.
  std::vector<float> ws(plan.workspace_bytes / sizeof(float), std::numeric_limits<float>::quiet_NaN());
  int launches = 0;
  gemm_rocm::run_gemm(pr, plan, ws.empty() ? nullptr : ws.data(),
                      [&](auto kernel, dim3 grid, dim3 block, const auto &args) {
                        ++launches;
                        emu::launch(kernel, grid, block, args);
                      });

  driver_io::write_file(dir + "/c.bin", c.ptr, size_t(M) * N * 2);
  std::printf("{\"config\": %d, \"name\": \"%s\", \"splits\": %d, \"kb_per_split\": %d, \"tiles_m\": %d, "
              "\"tiles_n\": %d, \"grid_x\": %d, \"grid_z\": %d, \"vec\": %s, \"workspace_bytes\": %zu, "
              "\"launches\": %d}\n",
              plan.config, gemm_rocm::config_info(plan.config).name, plan.splits, plan.kb_per_split, plan.tiles_m,
              plan.tiles_n, plan.grid_x, plan.grid_z, plan.vec ? "true" : "false", plan.workspace_bytes, launches);
  return 0;
}
