// LDS bank conflicts and staging coverage of the GEMM kernel, from the kernel's own address functions
// (LdsMap and TileCfg in gemm_kernels.h), evaluated on the host for every lane of every wave.
//
// The model (32 banks of 4 bytes, 128 bytes a clock; AMD's LDS documentation and the CK-Tile notes):
// a wave's access of W bytes per lane is served in phases of 128 / W consecutive lanes (32 lanes for
// 4-byte accesses, 16 for 8-byte, 8 for 16-byte); within a phase a bank serves one dword a clock and
// lanes that touch the same dword share it. A ds_read2/ds_write2_b64 is two 8-byte accesses. The
// 16-byte natural store (ds_write2_b64 here) is also checked as one 16-byte access, in case the
// hardware serves it so. None of this was measured on an MI300X: it is the model DESIGN.md uses.
//
// Checks, for each tile configuration and layout:
//   - every staging store and MFMA operand read and the a_scale reads and writes take the fewest
//     clocks their bytes allow (no conflict);
//   - the staging stores write every data byte of a stage exactly once and no pad byte;
//   - a self-test: the first version's natural map (rows in lane order) shows its 2-way conflict,
//     so the counter can see one.
// Prints the clocks per stage and per K-block by kind, and "N failures"; exit status 1 on any.
//   clang++-19 -std=c++17 -DGEMM_HIP_EMULATOR -pthread -I gemm/rocm gemm/rocm/tools/lds_check.cpp
#include <cstdio>
#include <cstring>
#include <set>
#include <vector>

#include "gemm_kernels.h"

using namespace gemm_rocm;

static int failures = 0;
#define CHECK(cond, ...)                          \
  do {                                            \
    if (!(cond)) {                                \
      if (failures++ < 30) {                      \
        std::printf("FAIL %s: ", #cond);          \
        std::printf(__VA_ARGS__);                 \
        std::printf("\n");                        \
      }                                           \
    }                                             \
  } while (0)

constexpr int kBanks = 32;

// Clocks one wave's access takes: addr[l] is lane l's first byte, `bytes` per lane (4, 8 or 16,
// aligned to 4). Lanes with addr < 0 are inactive.
static int access_clocks(const int addr[64], int bytes) {
  const int phase = 128 / bytes;
  int clocks = 0;
  for (int p0 = 0; p0 < 64; p0 += phase) {
    std::set<int> dwords[kBanks];
    for (int l = p0; l < p0 + phase; ++l) {
      if (addr[l] < 0) continue;
      for (int d = 0; d < bytes / 4; ++d) {
        const int dw = addr[l] / 4 + d;
        dwords[dw % kBanks].insert(dw);
      }
    }
    size_t worst = 0;
    for (const auto& b : dwords) worst = b.size() > worst ? b.size() : worst;
    clocks += (int)worst;
  }
  return clocks;
}

// Fewest clocks for 64 lanes' `bytes` each with no conflict: one per phase.
static int ideal_clocks(int bytes) { return 64 / (128 / bytes); }

struct Tally {
  int clocks = 0, ideal = 0, instructions = 0;
  void add(const int addr[64], int bytes) {
    clocks += access_clocks(addr, bytes);
    ideal += ideal_clocks(bytes);
    ++instructions;
  }
};

// What one stage of configuration Cfg costs in LDS clocks, by kind (all waves of the workgroup).
struct StageReport {
  Tally store_b64, store_b128, reads, sa_reads, sa_writes;
};

static const char* layout_name(int layout) { return layout == kSeed ? "seed" : "natural"; }

template <class Cfg>
static StageReport check_config(const char* name, int layout) {
  using Map = LdsMap<Cfg>;
  using St = Stager<Cfg, kSeed, true>;  // seed_unit only
  constexpr int BM = Cfg::BM, BN = Cfg::BN, MT = Cfg::MT;
  StageReport r;
  // Bytes of one stage buffer written, to check coverage: data bytes once, pad bytes never.
  std::vector<int> written((BM + BN) * kLdsStride, 0);
  int addr[64];

  for (int wave = 0; wave < Cfg::WAVES; ++wave) {
    // Staging stores.
    if (layout == kNatural) {
      for (int j = 0; j < Cfg::NAT_CHUNKS; ++j) {
        int half0[64], half1[64];
        for (int l = 0; l < 64; ++l) {
          const int row = Map::nat_first_row(wave, j) + Map::nat_lane_row(l);
          addr[l] = row * kLdsStride + Map::nat_col(l);
          half0[l] = addr[l];
          half1[l] = addr[l] + 8;
          for (int b = 0; b < 16; ++b) ++written[addr[l] + b];
        }
        r.store_b64.add(half0, 8);
        r.store_b64.add(half1, 8);
        r.store_b128.add(addr, 16);
      }
    } else {
      for (int j = 0; j < Cfg::SEED_UNITS_PER_WAVE; ++j) {
        const int unit = wave + j * Cfg::WAVES;
        if (unit >= Cfg::SEED_UNITS) break;
        const auto u = St::seed_unit(unit);
        for (int i = 0; i < 4; ++i) {
          for (int l = 0; l < 64; ++l) {
            addr[l] = (Map::seed_row(u.isA, u.mu, l) + i) * kLdsStride + Map::seed_col(u.ku, l);
            for (int b = 0; b < 8; ++b) ++written[addr[l] + b];
          }
          r.store_b64.add(addr, 8);
        }
      }
    }
    // MFMA operand reads of the stage (one 8-byte read per fragment and K-step).
    for (int ks = 0; ks < kStageK / Cfg::KI; ++ks) {
      for (int i = 0; i < Cfg::FM; ++i) {
        for (int l = 0; l < 64; ++l) addr[l] = Map::operand_base(Cfg::wave_m0(wave) + i * MT, ks) + Map::operand_lane(l);
        r.reads.add(addr, 8);
      }
      for (int j = 0; j < Cfg::FN; ++j) {
        for (int l = 0; l < 64; ++l)
          addr[l] = Map::operand_base(BM + Cfg::wave_n0(wave) + j * MT, ks) + Map::operand_lane(l);
        r.reads.add(addr, 8);
      }
    }
    // a_scale (once per K-block): one 4-byte read a fragment row, the lane's output row; then every
    // thread writes its own slot.
    for (int i = 0; i < Cfg::FM; ++i) {
      for (int l = 0; l < 64; ++l) {
        const int row = Map::sa_row(Cfg::wave_m0(wave) + i * MT, l);
        CHECK(row >= 0 && row < BM, "%s: a_scale row %d outside the tile", name, row);
        addr[l] = row * 4;
      }
      r.sa_reads.add(addr, 4);
    }
    for (int l = 0; l < 64; ++l) addr[l] = (wave * 64 + l) * 4;
    r.sa_writes.add(addr, 4);
  }

  // Coverage: rows [0, BM + BN), data bytes [0, 64) once each, the pad never.
  for (int row = 0; row < BM + BN; ++row)
    for (int b = 0; b < kLdsStride; ++b) {
      const int want = b < kStageK ? 1 : 0;
      const int got = written[row * kLdsStride + b];
      CHECK(got == want, "%s %s: stage row %d byte %d written %d times", name, layout_name(layout), row, b, got);
    }

  // No conflicts in any kind the kernel issues (the 16-byte view of the natural store included).
  auto check_tally = [&](const Tally& t, const char* kind) {
    CHECK(t.clocks == t.ideal, "%s %s: %s take %d clocks, %d without conflicts", name, layout_name(layout), kind,
          t.clocks, t.ideal);
  };
  check_tally(r.store_b64, "staging stores (8-byte accesses)");
  if (layout == kNatural) check_tally(r.store_b128, "staging stores (as 16-byte accesses)");
  check_tally(r.reads, "operand reads");
  check_tally(r.sa_reads, "a_scale reads");
  check_tally(r.sa_writes, "a_scale writes");

  // Per K-block: two stages of stores and reads, one of the a_scale traffic; against the MFMA
  // clocks of the workgroup on one CU (4 SIMDs; 16 clocks a 16x16x32, 32 a 32x32x16).
  const int mfma_clocks = Cfg::WAVES * 2 * (kStageK / Cfg::KI) * Cfg::FM * Cfg::FN * (MT == 16 ? 16 : 32) / 4;
  const int lds_clocks = 2 * (r.store_b64.clocks + r.reads.clocks) + r.sa_reads.clocks + r.sa_writes.clocks;
  std::printf("%-9s %-7s | %4d %5d | %4d %5d | %4d %5d | %4d %4d | %5d of %5d MFMA clocks\n", name,
              layout_name(layout), r.store_b64.instructions, r.store_b64.clocks, r.reads.instructions,
              r.reads.clocks, r.sa_reads.instructions, r.sa_reads.clocks, r.sa_writes.instructions,
              r.sa_writes.clocks, lds_clocks, mfma_clocks);
  return r;
}

// The first version's natural map (rows x .. x + 3 for 16 consecutive lanes): the counter must see
// its 2-way conflict, or it could not see the one it checks for.
template <class Cfg>
static void self_test() {
  int half0[64], b128[64];
  for (int l = 0; l < 64; ++l) {
    half0[l] = (l >> 2) * kLdsStride + (l & 3) * 16;
    b128[l] = half0[l];
  }
  CHECK(access_clocks(half0, 8) == 2 * ideal_clocks(8), "self-test: rows in lane order take %d clocks, want %d",
        access_clocks(half0, 8), 2 * ideal_clocks(8));
  CHECK(access_clocks(b128, 16) == 2 * ideal_clocks(16), "self-test (16-byte): %d clocks, want %d",
        access_clocks(b128, 16), 2 * ideal_clocks(16));
  // Broadcast: 64 lanes on one dword take one clock per phase.
  int same[64];
  for (int l = 0; l < 64; ++l) same[l] = 64;
  CHECK(access_clocks(same, 4) == 2, "self-test: broadcast takes %d clocks", access_clocks(same, 4));
  // 64 lanes 128 bytes apart: one bank, 32 distinct dwords per phase of 4-byte accesses.
  int strided[64];
  for (int l = 0; l < 64; ++l) strided[l] = 128 * l;
  CHECK(access_clocks(strided, 4) == 64, "self-test: one-bank stride takes %d clocks", access_clocks(strided, 4));
}

int main() {
  self_test<Cfg0>();
  std::printf("LDS clocks per stage (all waves): instructions and clocks; last column per K-block\n");
  std::printf("config    layout  | stores     | operand rd | a_scale rd | a_sc wr   | per K-block\n");
  for (int layout : {kSeed, kNatural}) {
    check_config<Cfg0>("t256x128", layout);
    check_config<Cfg1>("t128x128", layout);
    check_config<Cfg2>("t64x64", layout);
  }
  std::printf("%d failures\n", failures);
  return failures == 0 ? 0 : 1;
}
