// Runs the gfx942 quantize_activations kernel (gemm/rocm/quantize_kernels.h, unmodified) on the CPU
// through the HIP emulator. Driven by tests/rocm/test_emulator_quantize.py.
//
//   emu_quantize bf16|fp16|fp32 ROWS BLOCKS_PER_ROW POWER_OF_TWO DIR [MAX_GROUPS]
//     DIR/x.bin: ROWS x BLOCKS_PER_ROW*128 values of the input type, row-major.
//     Writes DIR/q.bin (e4m3fnuz bytes) and DIR/scale.bin (f32, ROWS x BLOCKS_PER_ROW). The outputs start
//     poisoned (0x5A bytes, NaN scales), so an element the kernel never writes shows. Every buffer holds
//     exactly its bytes, so ASan reports any access past them.
//     MAX_GROUPS caps the grid (HIP's limit when not given), so that small inputs run the kernel's loop
//     over groups. Prints {"launches": ..., "grid": ..., "lane_shuffles": ...}: each group processed costs
//     its 256 lanes one shuffle per step of the block maximum's reduction, whichever workgroup takes it.
#define GEMM_HIP_EMULATOR 1
#include "../../quantize_kernels.h"
#include "driver_io.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace {

// Heap memory of exactly `bytes` bytes (malloc's blocks are 16-byte aligned on this host, as the kernel's
// vector accesses need; checked).
unsigned char *alloc(size_t bytes) {
  auto *p = static_cast<unsigned char *>(std::malloc(bytes));
  if (p == nullptr || (reinterpret_cast<uintptr_t>(p) & 15) != 0) {
    std::fprintf(stderr, "allocation of %zu bytes failed or is not 16-byte aligned\n", bytes);
    std::exit(2);
  }
  return p;
}

}  // namespace

int main(int argc, char **argv) {
  if (argc != 6 && argc != 7) {
    std::fprintf(stderr, "usage: emu_quantize bf16|fp16|fp32 ROWS BLOCKS_PER_ROW POWER_OF_TWO DIR [MAX_GROUPS]\n");
    return 2;
  }
  const std::string type = argv[1], dir = argv[5];
  const long rows = std::atol(argv[2]), blocks_per_row = std::atol(argv[3]);
  const int power_of_two = std::atoi(argv[4]);
  const long long max_groups = argc == 7 ? std::atoll(argv[6]) : gemm_rocm::kQuantMaxGroups;
  int input;
  size_t elem;
  if (type == "bf16") {
    input = gemm_rocm::kQuantBFloat16, elem = 2;
  } else if (type == "fp16") {
    input = gemm_rocm::kQuantFloat16, elem = 2;
  } else if (type == "fp32") {
    input = gemm_rocm::kQuantFloat32, elem = 4;
  } else {
    std::fprintf(stderr, "bad input type %s\n", type.c_str());
    return 2;
  }
  if (rows < 1 || blocks_per_row < 1 || max_groups < 1) {
    std::fprintf(stderr, "bad shape\n");
    return 2;
  }
  const size_t blocks = size_t(rows) * size_t(blocks_per_row), values = blocks * 128;
  unsigned char *x = alloc(values * elem), *q = alloc(values);
  float *scale = reinterpret_cast<float *>(alloc(blocks * 4));
  const std::vector<unsigned char> input_bytes = driver_io::read_file(dir + "/x.bin", values * elem);
  std::memcpy(x, input_bytes.data(), values * elem);
  std::memset(q, 0x5A, values);
  for (size_t i = 0; i < blocks; ++i) scale[i] = std::numeric_limits<float>::quiet_NaN();

  gemm_rocm::QuantizeArgs args{};
  args.x = x;
  args.input = input;
  args.q = q;
  args.scale = scale;
  args.blocks = int64_t(blocks);
  args.inv_max = 1.0f / 240.0f;
  args.power_of_two = power_of_two;
  int launches = 0;
  unsigned grid_x = 0;
  gemm_rocm::launch_quantize_rows(
      args,
      [&](auto kernel, dim3 grid, dim3 block, const auto &a) {
        ++launches;
        grid_x = grid.x;
        emu::launch(kernel, grid, block, a);
      },
      max_groups);
  driver_io::write_file(dir + "/q.bin", q, values);
  driver_io::write_file(dir + "/scale.bin", scale, blocks * 4);
  std::printf("{\"launches\": %d, \"grid\": %u, \"lane_shuffles\": %llu}\n", launches, grid_x,
              static_cast<unsigned long long>(emu::detail::lane_shuffles().load()));
  std::free(x);
  std::free(q);
  std::free(scale);
  return 0;
}
