// LDS bank conflicts and staging coverage of the GEMM kernel, from the kernel's own address functions
// (LdsMap and TileCfg in gemm_kernels.h), evaluated on the host for every lane of every wave.
//
// The model (32 banks of 4 bytes, 128 bytes a clock; AMD's LDS documentation and the CK-Tile notes):
// a wave's access of W bytes per lane is served in phases of 128 / W consecutive lanes (32 lanes for
// 4-byte accesses, 16 for 8-byte, 8 for 16-byte); within a phase a bank serves one dword a clock and
// lanes that touch the same dword share it. A ds_read2_b64 / ds_write2_b64 (what the compiler makes
// of the kernel's 8-byte pairs) is two 8-byte accesses. None of this was measured on an MI300X: it is
// the model DESIGN.md uses. The other reading, that the hardware serves such a pair as one 16-byte
// access in phases of 8 lanes, is printed beside it (the "as 16 B" column), not checked: under it the
// operand reads and the seed stores conflict 2-way and the natural store does not.
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
#include <initializer_list>
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

// Clocks one wave's access takes when each lane touches `bytes` at each of its addresses (`parts`
// arrays of 64 lane addresses, 4-byte aligned), served `phase` consecutive lanes at a time: per phase,
// the most distinct dwords any one bank must serve.
static int phase_clocks(std::initializer_list<const int*> parts, int bytes, int phase) {
  int clocks = 0;
  for (int p0 = 0; p0 < 64; p0 += phase) {
    std::set<int> dwords[kBanks];
    for (int l = p0; l < p0 + phase; ++l)
      for (const int* addr : parts)
        for (int d = 0; d < bytes / 4; ++d) dwords[(addr[l] / 4 + d) % kBanks].insert(addr[l] / 4 + d);
    size_t worst = 0;
    for (const auto& b : dwords) worst = b.size() > worst ? b.size() : worst;
    clocks += (int)worst;
  }
  return clocks;
}

// One access of `bytes` (4, 8 or 16) a lane: phases of 128 / bytes lanes.
static int access_clocks(const int addr[64], int bytes) { return phase_clocks({addr}, bytes, 128 / bytes); }

// Fewest clocks for 64 lanes' `bytes` each with no conflict: one per phase.
static int ideal_clocks(int bytes) { return 64 / (128 / bytes); }

// The other reading of a ds_*2_b64 pair: one access of 16 bytes a lane (both halves), 8-lane phases.
static int pair_as_16b_clocks(const int lo[64], const int hi[64]) { return phase_clocks({lo, hi}, 8, 8); }

struct Tally {
  int clocks = 0, ideal = 0, instructions = 0;
  int as_16b = 0;  // the pairs' clocks under the other reading (informational)
  void add(const int addr[64], int bytes) {
    clocks += access_clocks(addr, bytes);
    ideal += ideal_clocks(bytes);
    ++instructions;
  }
  // Two 8-byte accesses the compiler pairs into one ds_*2_b64.
  void add_pair(const int lo[64], const int hi[64]) {
    add(lo, 8);
    add(hi, 8);
    as_16b += pair_as_16b_clocks(lo, hi);
  }
};

// What one stage of configuration Cfg costs in LDS clocks, by kind (all waves of the workgroup).
struct StageReport {
  Tally stores, reads, sa_reads, sa_writes;
};

static const char* layout_name(int layout) { return layout == kSeed ? "seed" : "natural"; }

template <class Cfg>
static void check_config(const char* name, int layout) {
  using Map = LdsMap<Cfg>;
  using St = Stager<Cfg, kSeed, true>;  // seed_unit only
  constexpr int BM = Cfg::BM, BN = Cfg::BN, MT = Cfg::MT;
  StageReport r;
  // Bytes of one stage buffer written, to check coverage: data bytes once, pad bytes never.
  std::vector<int> written((BM + BN) * kLdsStride, 0);
  int addr[64];

  for (int wave = 0; wave < Cfg::WAVES; ++wave) {
    // Staging stores: the natural 16-byte store is a pair of 8-byte halves; the seed unit's 4 rows
    // are two pairs (rows 0 and 1, 2 and 3), as the compiler pairs them.
    int lo[64], hi[64];
    if (layout == kNatural) {
      for (int j = 0; j < Cfg::NAT_CHUNKS; ++j) {
        for (int l = 0; l < 64; ++l) {
          lo[l] = Map::nat_store_off(wave, j, l);
          hi[l] = lo[l] + 8;
          for (int b = 0; b < 16; ++b) ++written[lo[l] + b];
        }
        r.stores.add_pair(lo, hi);
      }
    } else {
      for (int j = 0; j < Cfg::SEED_UNITS_PER_WAVE; ++j) {
        const int unit = wave + j * Cfg::WAVES;
        if (unit >= Cfg::SEED_UNITS) break;
        const auto u = St::seed_unit(unit);
        for (int i = 0; i < 4; i += 2) {
          for (int l = 0; l < 64; ++l) {
            lo[l] = Map::seed_store_off(u.isA, u.mu, u.ku, i, l);
            hi[l] = Map::seed_store_off(u.isA, u.mu, u.ku, i + 1, l);
            for (int b = 0; b < 8; ++b) ++written[lo[l] + b], ++written[hi[l] + b];
          }
          r.stores.add_pair(lo, hi);
        }
      }
    }
    // MFMA operand reads of the stage: one 8-byte read per fragment and K-step, K-steps paired.
    for (int ks = 0; ks < kStageK / Cfg::KI; ks += 2) {
      for (int f = 0; f < Cfg::FM + Cfg::FN; ++f) {
        const int row0 = f < Cfg::FM ? Cfg::wave_m0(wave) + f * MT : BM + Cfg::wave_n0(wave) + (f - Cfg::FM) * MT;
        for (int l = 0; l < 64; ++l) {
          lo[l] = Map::operand_base(row0, ks) + Map::operand_lane(l);
          hi[l] = Map::operand_base(row0, ks + 1) + Map::operand_lane(l);
        }
        r.reads.add_pair(lo, hi);
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
    for (int l = 0; l < 64; ++l) addr[l] = Map::sa_slot(wave * 64 + l) * 4;
    r.sa_writes.add(addr, 4);
  }

  // Coverage: rows [0, BM + BN), data bytes [0, 64) once each, the pad never.
  for (int row = 0; row < BM + BN; ++row)
    for (int b = 0; b < kLdsStride; ++b) {
      const int want = b < kStageK ? 1 : 0;
      const int got = written[row * kLdsStride + b];
      CHECK(got == want, "%s %s: stage row %d byte %d written %d times", name, layout_name(layout), row, b, got);
    }

  // No conflicts in any kind the kernel issues (under the model; the 16-byte reading is only printed).
  auto check_tally = [&](const Tally& t, const char* kind) {
    CHECK(t.clocks == t.ideal, "%s %s: %s take %d clocks, %d without conflicts", name, layout_name(layout), kind,
          t.clocks, t.ideal);
  };
  check_tally(r.stores, "staging stores");
  check_tally(r.reads, "operand reads");
  check_tally(r.sa_reads, "a_scale reads");
  check_tally(r.sa_writes, "a_scale writes");

  // Per K-block: two stages of stores and reads, one of the a_scale traffic; against the MFMA
  // clocks of the workgroup on one CU (4 SIMDs; 16 clocks a 16x16x32, 32 a 32x32x16).
  const int mfma_clocks = Cfg::WAVES * 2 * (kStageK / Cfg::KI) * Cfg::FM * Cfg::FN * (MT == 16 ? 16 : 32) / 4;
  const int lds_clocks = 2 * (r.stores.clocks + r.reads.clocks) + r.sa_reads.clocks + r.sa_writes.clocks;
  const int lds_as_16b = 2 * (r.stores.as_16b + r.reads.as_16b) + r.sa_reads.clocks + r.sa_writes.clocks;
  std::printf("%-9s %-7s | %4d %5d | %4d %5d | %4d %5d | %4d %4d | %5d of %5d MFMA clocks | as 16 B: %5d\n", name,
              layout_name(layout), r.stores.instructions, r.stores.clocks, r.reads.instructions, r.reads.clocks,
              r.sa_reads.instructions, r.sa_reads.clocks, r.sa_writes.instructions, r.sa_writes.clocks, lds_clocks,
              mfma_clocks, lds_as_16b);
}

// The first version's natural map (rows x .. x + 3 for 16 consecutive lanes): the counter must see
// its 2-way conflict, or it could not see the one it checks for.
static void self_test() {
  int half0[64];
  for (int l = 0; l < 64; ++l) half0[l] = (l >> 2) * kLdsStride + (l & 3) * 16;
  CHECK(access_clocks(half0, 8) == 2 * ideal_clocks(8), "self-test: rows in lane order take %d clocks, want %d",
        access_clocks(half0, 8), 2 * ideal_clocks(8));
  CHECK(access_clocks(half0, 16) == 2 * ideal_clocks(16), "self-test (16-byte): %d clocks, want %d",
        access_clocks(half0, 16), 2 * ideal_clocks(16));
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
  self_test();
  std::printf("LDS clocks per stage (all waves): 8-byte accesses and clocks; per K-block: the model's\n"
              "total, and the total if each ds_*2_b64 pair were served as one 16-byte access (not checked)\n");
  std::printf("config    layout  | stores     | operand rd | a_scale rd | a_sc wr   | per K-block\n");
  for (int layout : {kSeed, kNatural}) {
    check_config<Cfg0>("t256x128", layout);
    check_config<Cfg1>("t128x128", layout);
    check_config<Cfg2>("t64x64", layout);
  }
  std::printf("%d failures\n", failures);
  return failures == 0 ? 0 : 1;
}
