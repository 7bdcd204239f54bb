// hip_emu.h: run unmodified HIP kernel source on the CPU (host clang++-19, C++17).
//
// Included by gemm/rocm/hip_compat.h when GEMM_HIP_EMULATOR is defined. See README.md next to this
// file for the model, the sources of every layout and conversion rule, and the limits.
//
// Model
// - emu::launch(kernel, grid, block, args...) runs the grid one workgroup at a time; every
//   work-item of the workgroup is a real std::thread (so ThreadSanitizer sees LDS races).
// - Lanes of one wave are 64 consecutive linear thread ids (wave64, as on gfx942).
// - __shared__ variables are function-scope statics: one copy, used by the one running workgroup.
//   Outside AddressSanitizer builds they are placed in the ELF section "gemm_emu_lds" and poisoned
//   (filled with 0xFF bytes: NaN as f32, -240 as fp8 e4m3fnuz) before every workgroup, so a read of
//   LDS that the workgroup did not write shows up as wrong numbers. Under ASan they stay plain
//   statics so that ASan's redzones catch out-of-bounds LDS accesses.
// - __syncthreads() is a real barrier over the workgroup's threads (threads that returned from the
//   kernel no longer count, like finished waves on the hardware).
// - Wave-level instructions (MFMA, shuffles, ballot, readfirstlane, wave_barrier) are collectives:
//   all active lanes of the wave rendezvous, one lane computes the whole instruction from the
//   gathered lane operands, every lane reads its own result. MFMA requires all 64 lanes.
// - A rendezvous that waits longer than GEMM_EMU_TIMEOUT_S seconds (default 600) aborts with a
//   message naming the workgroup, thread and instruction (divergent barrier = deadlock).
#pragma once

#ifndef GEMM_HIP_EMULATOR
#define GEMM_HIP_EMULATOR 1
#endif

#if __cplusplus < 201703L
#error "hip_emu.h needs C++17 or newer (-std=c++17)"
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <ctime>
#include <cmath>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef __has_feature
#define __has_feature(x) 0
#endif

// ---------------------------------------------------------------------------------------------
// Qualifiers
// ---------------------------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __constant__ static const

#if defined(__SANITIZE_ADDRESS__) || __has_feature(address_sanitizer)
#define GEMM_EMU_LDS_POISON 0
#define __shared__ static
#else
#define GEMM_EMU_LDS_POISON 1
#define __shared__ static __attribute__((section("gemm_emu_lds")))
// Bounds of the section, provided by the linker (weak: absent when no __shared__ exists).
extern "C" char __start_gemm_emu_lds[] __attribute__((weak, visibility("hidden")));
extern "C" char __stop_gemm_emu_lds[] __attribute__((weak, visibility("hidden")));
#endif

// ---------------------------------------------------------------------------------------------
// Vector types used by the builtins (clang ext_vector_type: same type as the kernel's typedefs)
// ---------------------------------------------------------------------------------------------
namespace emu {
typedef float floatx2 __attribute__((ext_vector_type(2)));
typedef float floatx4 __attribute__((ext_vector_type(4)));
typedef float floatx16 __attribute__((ext_vector_type(16)));
constexpr int kWaveSize = 64;
}  // namespace emu

// HIP's dim3 (the emulator never includes hip_runtime.h).
struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int x_ = 1, unsigned int y_ = 1, unsigned int z_ = 1) : x(x_), y(y_), z(z_) {}
};

inline thread_local dim3 threadIdx{0, 0, 0};
inline thread_local dim3 blockIdx{0, 0, 0};
inline thread_local dim3 blockDim{1, 1, 1};
inline thread_local dim3 gridDim{1, 1, 1};
constexpr int warpSize = 64;

namespace emu {
namespace detail {

[[noreturn]] __attribute__((format(printf, 1, 2))) inline void fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::fprintf(stderr, "hip_emu: ");
  std::vfprintf(stderr, fmt, ap);
  std::fprintf(stderr, "\n");
  std::fflush(stderr);
  va_end(ap);
  std::abort();
}

inline double timeout_seconds() {
  static const double t = [] {
    const char *s = std::getenv("GEMM_EMU_TIMEOUT_S");
    double v = s ? std::atof(s) : 0.0;
    return v > 0 ? v : 600.0;
  }();
  return t;
}

// Prints what every thread of the current workgroup waits on, then aborts (defined below).
[[noreturn]] inline void report_deadlock(const char *what, double waited, int arrived);

// Futex wait/wake on a 32-bit word (Linux). Only a sleeping mechanism: the ordering between
// threads comes from the atomics and the mutex below, which the sanitizers understand.
inline void futex_wait(std::atomic<uint32_t> *word, uint32_t expected, double seconds) {
  timespec ts;
  ts.tv_sec = time_t(seconds);
  ts.tv_nsec = long((seconds - double(ts.tv_sec)) * 1e9);
  syscall(SYS_futex, reinterpret_cast<uint32_t *>(word), FUTEX_WAIT_PRIVATE, expected, &ts, nullptr, 0);
}
inline void futex_wake_all(std::atomic<uint32_t> *word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t *>(word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

// A reusable rendezvous of `expected` threads; the last arriver runs `complete` under the lock
// before anyone leaves (so the gathered operands and the results are ordered by the mutex and the
// release/acquire of the generation counter). Waiters sleep on a futex, not on a condition
// variable, so a completed rendezvous does not make 63 threads queue for the mutex again.
class Rendezvous {
 public:
  explicit Rendezvous(int expected = 0) : expected_(expected) {}
  void reset(int expected) {
    expected_ = expected;
    arrived_ = 0;
    generation_.store(0, std::memory_order_relaxed);
  }

  template <class F>
  void arrive(F &&complete, const char *what) {
    uint32_t g;
    {
      std::lock_guard<std::mutex> lk(mu_);
      g = generation_.load(std::memory_order_relaxed);
      if (++arrived_ == expected_) {
        complete();
        release_locked(g);
        return;
      }
    }
    wait(g, what);
  }

  // A thread leaves for good (returned from the kernel). If everyone else is already waiting,
  // the pending rendezvous completes without it (`complete` decides whether that is legal).
  template <class F>
  void retire(F &&complete) {
    std::lock_guard<std::mutex> lk(mu_);
    --expected_;
    if (arrived_ > 0 && arrived_ == expected_) {
      complete();
      release_locked(generation_.load(std::memory_order_relaxed));
    }
  }

 private:
  void release_locked(uint32_t g) {
    arrived_ = 0;
    generation_.store(g + 1, std::memory_order_release);
    futex_wake_all(&generation_);
  }

  void wait(uint32_t g, const char *what) {
    for (int spin = 0; spin < 16; ++spin) {
      if (generation_.load(std::memory_order_acquire) != g) return;
      std::this_thread::yield();
    }
    const auto start = std::chrono::steady_clock::now();
    while (generation_.load(std::memory_order_acquire) == g) {
      futex_wait(&generation_, g, 1.0);
      const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (waited > timeout_seconds() && generation_.load(std::memory_order_acquire) == g) {
        int arrived;
        {
          std::lock_guard<std::mutex> lk(mu_);
          arrived = arrived_;
        }
        report_deadlock(what, waited, arrived);
      }
    }
  }

  std::mutex mu_;
  int expected_ = 0;
  int arrived_ = 0;
  std::atomic<uint32_t> generation_{0};
};

enum class Op : int {
  none = 0,
  mfma16x16x32_fp8,
  mfma32x32x16_fp8,
  shuffle,
  ballot,
  readfirstlane,
  wave_barrier,
};

inline const char *op_name(Op op) {
  switch (op) {
    case Op::mfma16x16x32_fp8: return "__builtin_amdgcn_mfma_f32_16x16x32_fp8_fp8";
    case Op::mfma32x32x16_fp8: return "__builtin_amdgcn_mfma_f32_32x32x16_fp8_fp8";
    case Op::shuffle: return "wave shuffle (__shfl*/ds_bpermute)";
    case Op::ballot: return "__ballot/__any/__all";
    case Op::readfirstlane: return "__builtin_amdgcn_readfirstlane";
    case Op::wave_barrier: return "__builtin_amdgcn_wave_barrier";
    default: return "?";
  }
}

struct LaneSlot {
  uint64_t seq = 0;  // collective sequence number of this lane (1-based); identifies arrival
  Op op = Op::none;
  int imm[3] = {0, 0, 0};
  uint64_t a = 0, b = 0;  // operands (fp8x8 A/B, shuffle value / source index, predicate)
  float c[16] = {};
  float d[16] = {};
  uint64_t r = 0;  // scalar result
};

struct Wave {
  Rendezvous rv;
  int lanes = 0;         // threads in this wave (64 unless the block size is not a multiple)
  uint64_t done = 0;     // completed collectives
  LaneSlot slots[2][kWaveSize];
};

struct Workgroup {
  Rendezvous barrier;
  std::unique_ptr<std::atomic<const char *>[]> waiting_on;  // per thread: rendezvous it waits at
  std::vector<std::unique_ptr<Wave>> waves;
  unsigned char *dynamic_lds = nullptr;
  size_t dynamic_lds_bytes = 0;
  dim3 id;
};

struct ThreadCtx {
  Workgroup *wg = nullptr;
  Wave *wave = nullptr;
  int tid = 0;   // linear id in the workgroup
  int lane = 0;  // tid % 64
  uint64_t seq = 0;
};

inline thread_local ThreadCtx ctx;

inline ThreadCtx &self(const char *what) {
  if (!ctx.wg) fail("%s called outside emu::launch (no workgroup on this thread)", what);
  return ctx;
}

inline void where(char *buf, size_t n, const char *what) {
  std::snprintf(buf, n, "%s in workgroup (%u,%u,%u) thread %d", what, ctx.wg ? ctx.wg->id.x : 0,
                ctx.wg ? ctx.wg->id.y : 0, ctx.wg ? ctx.wg->id.z : 0, ctx.tid);
}

// Run one wave-wide instruction. `fill` writes this lane's operands, `compute` sees all slots of
// the wave (with `present` telling which lanes arrived), `read` takes this lane's result.
template <class Fill, class Compute, class Read>
inline void collective(Op op, Fill &&fill, Compute &&compute, Read &&read) {
  ThreadCtx &t = self(op_name(op));
  Wave &w = *t.wave;
  const uint64_t seq = ++t.seq;
  const int buf = int(seq & 1);
  LaneSlot &s = w.slots[buf][t.lane];
  s.seq = seq;
  s.op = op;
  fill(s);
  char msg[160];
  where(msg, sizeof msg, op_name(op));
  t.wg->waiting_on[size_t(t.tid)].store(op_name(op), std::memory_order_relaxed);
  w.rv.arrive(
      [&] {
        bool present[kWaveSize];
        for (int l = 0; l < kWaveSize; ++l) {
          const LaneSlot &o = w.slots[buf][l];
          present[l] = l < w.lanes && o.seq == seq;
          if (present[l] && o.op != op)
            fail("wave executes different instructions at once: %s vs %s", op_name(op), op_name(o.op));
        }
        ++w.done;
        compute(w.slots[buf], present);
      },
      msg);
  t.wg->waiting_on[size_t(t.tid)].store(nullptr, std::memory_order_relaxed);
  read(s);
}

[[noreturn]] inline void report_deadlock(const char *what, double waited, int arrived) {
  static std::mutex once;
  std::lock_guard<std::mutex> lk(once);  // one report, the other timed-out threads block here
  std::fprintf(stderr, "hip_emu: deadlock: %s waited %.0f s with %d of the threads arrived (divergent "
               "barrier or wave instruction?)\n", what, waited, arrived);
  if (ctx.wg) {
    const int n = int(blockDim.x * blockDim.y * blockDim.z);
    int first = 0;
    for (int t = 1; t <= n; ++t) {  // runs of threads waiting at the same place
      const char *a = ctx.wg->waiting_on[size_t(first)].load(std::memory_order_relaxed);
      const char *b = t < n ? ctx.wg->waiting_on[size_t(t)].load(std::memory_order_relaxed) : nullptr;
      if (t < n && a == b) continue;
      std::fprintf(stderr, "hip_emu:   threads %d-%d: %s\n", first, t - 1, a ? a : "running or returned");
      first = t;
    }
  }
  std::fflush(stderr);
  std::abort();
}

inline void lane_retire() {
  Wave &w = *ctx.wave;
  w.rv.retire([&] {
    const uint64_t seq = w.done + 1;
    for (int l = 0; l < w.lanes; ++l)
      for (int b = 0; b < 2; ++b)
        if (w.slots[b][l].seq == seq && w.slots[b][l].op != Op::wave_barrier)
          fail("%s executed by part of a wave while other lanes returned from the kernel",
               op_name(w.slots[b][l].op));
    ++w.done;  // a pending wave_barrier completes without the returned lanes
  });
  ctx.wg->barrier.retire([] {});
}

// ---------------------------------------------------------------------------------------------
// fp8 e4m3fnuz (gfx942 "FP8"): 1 sign, 4 exponent (bias 8), 3 mantissa; 0x80 = NaN; no -0, no inf
// ---------------------------------------------------------------------------------------------
inline float fp8_e4m3fnuz_to_f32(uint8_t v) {
  if (v == 0x80) return std::numeric_limits<float>::quiet_NaN();
  const int e = (v >> 3) & 0xF, m = v & 7;
  const float mag = e == 0 ? std::ldexp(float(m), -10) : std::ldexp(float(8 + m), e - 11);
  return (v & 0x80) ? -mag : mag;
}

// Round to nearest even, no saturation: |x| that rounds above 240, inf and NaN give NaN (0x80);
// results that round to zero are +0 (0x00) whatever the sign (the format has no -0).
inline uint8_t f32_to_fp8_e4m3fnuz(float x) {
  if (std::isnan(x) || std::isinf(x)) return 0x80;
  const bool neg = std::signbit(x);
  const double a = std::fabs(double(x));
  if (a == 0.0) return 0x00;
  int e2;
  std::frexp(a, &e2);  // a = f * 2^e2, f in [0.5, 1)
  int E = std::max(e2 - 1, -7);                 // unbiased exponent; -7 = smallest normal
  double q = std::ldexp(a, 3 - E);              // value in units of the last mantissa place
  double r = q - std::floor(q);                 // round half to even, explicitly
  double n = std::floor(q);
  if (r > 0.5 || (r == 0.5 && std::fmod(n, 2.0) != 0.0)) n += 1.0;
  if (n == 0.0) return 0x00;
  if (n >= 16.0) {  // carried into the next binade
    n /= 2.0;
    E += 1;
  }
  uint8_t bits;
  if (n < 8.0) {
    bits = uint8_t(n);  // subnormal (E == -7)
  } else {
    const int field = E + 8;
    if (field > 15) return 0x80;  // overflow: NaN
    bits = uint8_t((field << 3) | (int(n) - 8));
  }
  return neg ? uint8_t(bits | 0x80) : bits;
}

// ---------------------------------------------------------------------------------------------
// MFMA. Lane layouts from AMD's matrix instruction calculator for CDNA3
// (github.com/ROCm/amd_matrix_instruction_calculator, `-a CDNA3 -i <instr> -d`):
//  v_mfma_f32_16x16x32_fp8_fp8: A[i][k]: lane 16*(k/8)+i, byte k%8 of the 64-bit operand;
//    B[k][j]: lane 16*(k/8)+j, byte k%8; C/D[i][j]: lane 16*(i/4)+j, element i%4.
//  v_mfma_f32_32x32x16_fp8_fp8: A[i][k]: lane 32*(k/8)+i, byte k%8; B[k][j]: lane 32*(k/8)+j,
//    byte k%8; C/D[i][j]: lane 32*((i/4)%2)+j, element 4*(i/8)+i%4.
//  Both: CBSZ/ABID/BLGP "not supported" for these instructions, so they must be 0 here.
// Arithmetic: every fp8 product is exact in double and so is the sum of a K-chunk (all terms are
// multiples of 2^-20 below 2^21); D = fp32(double(C) + sum), i.e. one rounding (plus a double
// rounding only when C and the sum are ~30 binades apart).
// ---------------------------------------------------------------------------------------------
inline void check_mfma_mods(const char *name, int cbsz, int abid, int blgp) {
  if (cbsz != 0 || abid != 0 || blgp != 0)
    fail("%s: cbsz=%d abid=%d blgp=%d, all must be 0 (not supported by the fp8 MFMAs on CDNA3)",
         name, cbsz, abid, blgp);
}

template <int M, int K>
inline void mfma_compute(LaneSlot *slots, const bool *present, const char *name) {
  for (int l = 0; l < kWaveSize; ++l)
    if (!present[l]) fail("%s needs all 64 lanes of the wave; lane %d is inactive", name, l);
  constexpr int KL = 8;            // fp8 values per lane
  constexpr int G = kWaveSize / M;  // lane groups (K chunks of 8)
  static_assert(G * KL == K, "layout");
  double A[M][K], B[K][M];
  for (int l = 0; l < kWaveSize; ++l) {
    const int row = l % M, k0 = KL * (l / M);
    for (int b = 0; b < KL; ++b) {
      A[row][k0 + b] = fp8_e4m3fnuz_to_f32(uint8_t(slots[l].a >> (8 * b)));
      B[k0 + b][row] = fp8_e4m3fnuz_to_f32(uint8_t(slots[l].b >> (8 * b)));
    }
  }
  constexpr int R = M * M / kWaveSize;  // accumulator elements per lane (4 or 16)
  for (int l = 0; l < kWaveSize; ++l) {
    const int j = l % M;
    for (int r = 0; r < R; ++r) {
      const int i = (M == 16) ? 4 * (l / 16) + r : 8 * (r / 4) + 4 * (l / 32) + r % 4;
      double s = 0.0;
      for (int k = 0; k < K; ++k) s += A[i][k] * B[k][j];
      slots[l].d[r] = float(double(slots[l].c[r]) + s);
    }
  }
}

inline floatx4 mfma_f32_16x16x32_fp8_fp8(long a, long b, const floatx4 &c, int cbsz, int abid, int blgp) {
  const Op op = Op::mfma16x16x32_fp8;
  check_mfma_mods(op_name(op), cbsz, abid, blgp);
  floatx4 d;
  collective(
      op,
      [&](LaneSlot &s) {
        s.a = uint64_t(a);
        s.b = uint64_t(b);
        for (int r = 0; r < 4; ++r) s.c[r] = c[r];
      },
      [&](LaneSlot *slots, const bool *present) { mfma_compute<16, 32>(slots, present, op_name(op)); },
      [&](const LaneSlot &s) {
        for (int r = 0; r < 4; ++r) d[r] = s.d[r];
      });
  return d;
}

// Result through a reference: returning a 64-byte vector by value trips -Wpsabi on x86 without AVX-512.
inline void mfma_f32_32x32x16_fp8_fp8(long a, long b, const floatx16 &c, floatx16 &d, int cbsz, int abid,
                                      int blgp) {
  const Op op = Op::mfma32x32x16_fp8;
  check_mfma_mods(op_name(op), cbsz, abid, blgp);
  collective(
      op,
      [&](LaneSlot &s) {
        s.a = uint64_t(a);
        s.b = uint64_t(b);
        for (int r = 0; r < 16; ++r) s.c[r] = c[r];
      },
      [&](LaneSlot *slots, const bool *present) { mfma_compute<32, 16>(slots, present, op_name(op)); },
      [&](const LaneSlot &s) {
        for (int r = 0; r < 16; ++r) d[r] = s.d[r];
      });
}

// ---------------------------------------------------------------------------------------------
// Other wave-level operations
// ---------------------------------------------------------------------------------------------
// Value of lane `src(lane)` for every lane; lanes reading an inactive lane get their own value.
// Lane-level shuffles executed since the process started (drivers read it to check how much work a
// launch did, e.g. that a grid-stride loop visits each group once).
inline std::atomic<uint64_t> &lane_shuffles() {
  static std::atomic<uint64_t> count{0};
  return count;
}

template <class T, class Src>
inline T shuffle(T v, Src &&src) {
  static_assert(std::is_trivially_copyable<T>::value && sizeof(T) <= 8, "shuffle: <= 8-byte types");
  lane_shuffles().fetch_add(1, std::memory_order_relaxed);
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  T out = v;
  const int me = ctx.lane;
  collective(
      Op::shuffle,
      [&](LaneSlot &s) {
        s.a = bits;
        s.b = uint64_t(src(me));
      },
      [&](LaneSlot *slots, const bool *present) {
        for (int l = 0; l < kWaveSize; ++l) {
          if (!present[l]) continue;
          const uint64_t from = slots[l].b;
          slots[l].r = (from < uint64_t(kWaveSize) && present[from]) ? slots[from].a : slots[l].a;
        }
      },
      [&](const LaneSlot &s) { std::memcpy(&out, &s.r, sizeof(T)); });
  return out;
}

inline uint64_t ballot(bool pred) {
  uint64_t out = 0;
  collective(
      Op::ballot, [&](LaneSlot &s) { s.a = pred ? 1 : 0; },
      [&](LaneSlot *slots, const bool *present) {
        uint64_t m = 0;
        for (int l = 0; l < kWaveSize; ++l)
          if (present[l] && slots[l].a) m |= uint64_t(1) << l;
        for (int l = 0; l < kWaveSize; ++l) slots[l].r = m;
      },
      [&](const LaneSlot &s) { out = s.r; });
  return out;
}

template <class T>
inline T readfirstlane(T v) {
  static_assert(std::is_trivially_copyable<T>::value && sizeof(T) <= 8, "readfirstlane type");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  T out = v;
  collective(
      Op::readfirstlane, [&](LaneSlot &s) { s.a = bits; },
      [&](LaneSlot *slots, const bool *present) {
        int first = 0;
        while (first < kWaveSize && !present[first]) ++first;
        for (int l = 0; l < kWaveSize; ++l) slots[l].r = slots[first].a;
      },
      [&](const LaneSlot &s) { std::memcpy(&out, &s.r, sizeof(T)); });
  return out;
}

inline void wave_barrier() {
  collective(
      Op::wave_barrier, [](LaneSlot &) {}, [](LaneSlot *, const bool *) {}, [](const LaneSlot &) {});
}

inline void syncthreads() {
  ThreadCtx &t = self("__syncthreads");
  char msg[160];
  where(msg, sizeof msg, "__syncthreads");
  t.wg->waiting_on[size_t(t.tid)].store("__syncthreads", std::memory_order_relaxed);
  t.wg->barrier.arrive([] {}, msg);
  t.wg->waiting_on[size_t(t.tid)].store(nullptr, std::memory_order_relaxed);
}

inline int lane_id() { return self("__lane_id").lane; }

inline unsigned mbcnt_lo(unsigned mask, unsigned base) {
  const int lane = lane_id();
  const unsigned below = lane >= 32 ? 0xFFFFFFFFu : ((1u << lane) - 1u);
  return base + unsigned(__builtin_popcount(mask & below));
}
inline unsigned mbcnt_hi(unsigned mask, unsigned base) {
  const int lane = lane_id();
  const unsigned below = lane <= 32 ? 0u : ((1u << (lane - 32)) - 1u);
  return base + unsigned(__builtin_popcount(mask & below));
}

// ---------------------------------------------------------------------------------------------
// Conversions (V_CVT_F32_FP8, V_CVT_PK_FP8_F32, V_CVT_PK_F32_FP8 on gfx942)
// ---------------------------------------------------------------------------------------------
inline float cvt_f32_fp8(int src, int byte_sel) {
  if (byte_sel < 0 || byte_sel > 3) fail("__builtin_amdgcn_cvt_f32_fp8: byte_sel %d not in 0..3", byte_sel);
  return fp8_e4m3fnuz_to_f32(uint8_t(uint32_t(src) >> (8 * byte_sel)));
}
inline floatx2 cvt_pk_f32_fp8(int src, bool word_sel) {
  const uint32_t w = uint32_t(src) >> (word_sel ? 16 : 0);
  floatx2 r;
  r[0] = fp8_e4m3fnuz_to_f32(uint8_t(w));
  r[1] = fp8_e4m3fnuz_to_f32(uint8_t(w >> 8));
  return r;
}
// Packs fp8(a) | fp8(b) << 8 into word `word_sel` of `old`; the other word keeps old's bits.
inline int cvt_pk_fp8_f32(float a, float b, int old, bool word_sel) {
  const uint32_t pk = uint32_t(f32_to_fp8_e4m3fnuz(a)) | (uint32_t(f32_to_fp8_e4m3fnuz(b)) << 8);
  const int sh = word_sel ? 16 : 0;
  const uint32_t o = (uint32_t(old) & ~(0xFFFFu << sh)) | (pk << sh);
  return int(o);
}

inline float fmed3f(float a, float b, float c) {
  if (std::isnan(a) || std::isnan(b) || std::isnan(c)) return std::fmin(std::fmin(a, b), c);
  return std::max(std::min(a, b), std::min(std::max(a, b), c));
}

// ---------------------------------------------------------------------------------------------
// Atomics (real atomics on host memory)
// ---------------------------------------------------------------------------------------------
inline float atomic_add(float *p, float v) {
  uint32_t *u = reinterpret_cast<uint32_t *>(p);
  uint32_t old = __atomic_load_n(u, __ATOMIC_RELAXED);
  for (;;) {
    float of;
    std::memcpy(&of, &old, 4);
    const float nf = of + v;
    uint32_t nu;
    std::memcpy(&nu, &nf, 4);
    if (__atomic_compare_exchange_n(u, &old, nu, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) return of;
  }
}
template <class T>
inline T atomic_add_int(T *p, T v) {
  return __atomic_fetch_add(p, v, __ATOMIC_RELAXED);
}

// ---------------------------------------------------------------------------------------------
// Launch
// ---------------------------------------------------------------------------------------------
inline std::mutex &launch_mutex() {
  static std::mutex m;
  return m;
}

inline void poison_static_lds() {
#if GEMM_EMU_LDS_POISON
  if (__start_gemm_emu_lds && __stop_gemm_emu_lds && __stop_gemm_emu_lds > __start_gemm_emu_lds)
    std::memset(__start_gemm_emu_lds, 0xFF, size_t(__stop_gemm_emu_lds - __start_gemm_emu_lds));
#endif
}

inline thread_local unsigned char *dynamic_lds_ptr = nullptr;

template <class Kernel, class... Args>
void launch_impl(Kernel kernel, dim3 grid, dim3 block, size_t dynamic_lds, Args... args) {
  const size_t nthreads = size_t(block.x) * block.y * block.z;
  if (block.x == 0 || block.y == 0 || block.z == 0 || nthreads > 1024)
    fail("launch: block (%u,%u,%u) must have 1..1024 threads", block.x, block.y, block.z);
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) fail("launch: grid has a zero dimension");
  // HIP's own refusal (hipErrorInvalidConfiguration): more than 2^32 - 1 work-items along a dimension.
  if (uint64_t(grid.x) * block.x > 0xffffffffull || uint64_t(grid.y) * block.y > 0xffffffffull ||
      uint64_t(grid.z) * block.z > 0xffffffffull)
    fail("launch: grid (%u,%u,%u) x block (%u,%u,%u) passes 2^32 - 1 work-items along a dimension", grid.x, grid.y,
         grid.z, block.x, block.y, block.z);
  if (dynamic_lds > 65536) fail("launch: dynamic LDS %zu bytes > 64 KiB", dynamic_lds);
  std::lock_guard<std::mutex> serial(launch_mutex());  // __shared__ statics: one workgroup at a time
  const int n = int(nthreads);
  const int nwaves = (n + kWaveSize - 1) / kWaveSize;
  for (unsigned bz = 0; bz < grid.z; ++bz)
    for (unsigned by = 0; by < grid.y; ++by)
      for (unsigned bx = 0; bx < grid.x; ++bx) {
        Workgroup wg;
        wg.id = dim3(bx, by, bz);
        wg.barrier.reset(n);
        wg.waiting_on.reset(new std::atomic<const char *>[size_t(n)]);
        for (int i = 0; i < n; ++i) wg.waiting_on[size_t(i)].store(nullptr, std::memory_order_relaxed);
        for (int w = 0; w < nwaves; ++w) {
          wg.waves.emplace_back(new Wave());
          wg.waves.back()->lanes = std::min(kWaveSize, n - w * kWaveSize);
          wg.waves.back()->rv.reset(wg.waves.back()->lanes);
        }
        std::unique_ptr<unsigned char[]> dyn;
        if (dynamic_lds) {
          dyn.reset(new unsigned char[dynamic_lds]);
          std::memset(dyn.get(), 0xFF, dynamic_lds);
          wg.dynamic_lds = dyn.get();
          wg.dynamic_lds_bytes = dynamic_lds;
        }
        poison_static_lds();
        std::vector<std::thread> threads;
        threads.reserve(nthreads);
        for (int tid = 0; tid < n; ++tid) {
          threads.emplace_back([&, tid] {
            ctx = ThreadCtx{};
            ctx.wg = &wg;
            ctx.tid = tid;
            ctx.lane = tid % kWaveSize;
            ctx.wave = wg.waves[size_t(tid / kWaveSize)].get();
            threadIdx = dim3(unsigned(tid) % block.x, (unsigned(tid) / block.x) % block.y,
                             unsigned(tid) / (block.x * block.y));
            blockIdx = wg.id;
            blockDim = block;
            gridDim = grid;
            dynamic_lds_ptr = wg.dynamic_lds;
            try {
              kernel(args...);
            } catch (const std::exception &e) {
              fail("kernel threw: %s", e.what());
            } catch (...) {
              fail("kernel threw a non-std exception");
            }
            lane_retire();
            ctx = ThreadCtx{};
            dynamic_lds_ptr = nullptr;
          });
        }
        for (auto &t : threads) t.join();
      }
}

}  // namespace detail

// emu::launch(kernel, grid, block, args...): like kernel<<<grid, block>>>(args...), synchronous.
template <class Kernel, class... Args>
void launch(Kernel kernel, dim3 grid, dim3 block, Args... args) {
  detail::launch_impl(kernel, grid, block, 0, args...);
}

// Same with `dynamic_lds` bytes of dynamic LDS (read it with HIP_DYNAMIC_SHARED(type, name)).
template <class Kernel, class... Args>
void launch_dynamic(Kernel kernel, dim3 grid, dim3 block, size_t dynamic_lds, Args... args) {
  detail::launch_impl(kernel, grid, block, dynamic_lds, args...);
}

}  // namespace emu

// ---------------------------------------------------------------------------------------------
// HIP spellings
// ---------------------------------------------------------------------------------------------
#define __syncthreads() ::emu::detail::syncthreads()
#define __threadfence() std::atomic_thread_fence(std::memory_order_seq_cst)
#define __threadfence_block() std::atomic_thread_fence(std::memory_order_seq_cst)
#define __lane_id() ::emu::detail::lane_id()
#define HIP_DYNAMIC_SHARED(type, var) type *var = reinterpret_cast<type *>(::emu::detail::dynamic_lds_ptr)
#define HIP_KERNEL_NAME(...) __VA_ARGS__
#define hipLaunchKernelGGL(kernel, grid, block, dynamic_lds, stream, ...) \
  ::emu::launch_dynamic(kernel, dim3(grid), dim3(block), size_t(dynamic_lds), ##__VA_ARGS__)

inline float atomicAdd(float *p, float v) { return ::emu::detail::atomic_add(p, v); }
inline int atomicAdd(int *p, int v) { return ::emu::detail::atomic_add_int(p, v); }
inline unsigned atomicAdd(unsigned *p, unsigned v) { return ::emu::detail::atomic_add_int(p, v); }
inline unsigned long long atomicAdd(unsigned long long *p, unsigned long long v) {
  return ::emu::detail::atomic_add_int(p, v);
}

template <class T>
inline T __shfl(T v, int src, int width = warpSize) {
  return ::emu::detail::shuffle(v, [=](int self) { return (self & ~(width - 1)) + (src & (width - 1)); });
}
template <class T>
inline T __shfl_xor(T v, int mask, int width = warpSize) {
  return ::emu::detail::shuffle(v, [=](int self) {
    const int i = self ^ mask;
    return i >= ((self + width) & ~(width - 1)) ? self : i;
  });
}
template <class T>
inline T __shfl_down(T v, unsigned delta, int width = warpSize) {
  return ::emu::detail::shuffle(v, [=](int self) {
    const int i = self + int(delta);
    return (i & ~(width - 1)) != (self & ~(width - 1)) ? self : i;
  });
}
template <class T>
inline T __shfl_up(T v, unsigned delta, int width = warpSize) {
  return ::emu::detail::shuffle(v, [=](int self) {
    const int i = self - int(delta);
    return (i < (self & ~(width - 1))) ? self : i;
  });
}
inline unsigned long long __ballot(int pred) { return ::emu::detail::ballot(pred != 0); }
inline int __any(int pred) { return ::emu::detail::ballot(pred != 0) != 0; }
inline int __all(int pred) {
  const int lanes = ::emu::detail::self("__all").wave->lanes;
  const uint64_t full = lanes == 64 ? ~uint64_t(0) : ((uint64_t(1) << lanes) - 1);
  return ::emu::detail::ballot(pred != 0) == full;
}

// Builtins. Macros, so that host clang never sees an unknown __builtin_amdgcn_* call.
#define __builtin_amdgcn_mfma_f32_16x16x32_fp8_fp8(a, b, c, cbsz, abid, blgp) \
  ::emu::detail::mfma_f32_16x16x32_fp8_fp8((long)(a), (long)(b), (c), (cbsz), (abid), (blgp))
#define __builtin_amdgcn_mfma_f32_32x32x16_fp8_fp8(a, b, c, cbsz, abid, blgp)                         \
  ({                                                                                                 \
    ::emu::floatx16 emu_mfma_d_;                                                                     \
    ::emu::detail::mfma_f32_32x32x16_fp8_fp8((long)(a), (long)(b), (c), emu_mfma_d_, (cbsz), (abid), \
                                             (blgp));                                                \
    emu_mfma_d_;                                                                                     \
  })
#define __builtin_amdgcn_cvt_f32_fp8(src, sel) ::emu::detail::cvt_f32_fp8((int)(src), (sel))
#define __builtin_amdgcn_cvt_pk_f32_fp8(src, sel) ::emu::detail::cvt_pk_f32_fp8((int)(src), (sel))
#define __builtin_amdgcn_cvt_pk_fp8_f32(a, b, old, sel) \
  ::emu::detail::cvt_pk_fp8_f32((float)(a), (float)(b), (int)(old), (sel))
#define __builtin_amdgcn_fmed3f(a, b, c) ::emu::detail::fmed3f((a), (b), (c))
#define __builtin_amdgcn_readfirstlane(v) ::emu::detail::readfirstlane(v)
#define __builtin_amdgcn_wave_barrier() ::emu::detail::wave_barrier()
#define __builtin_amdgcn_s_barrier() ::emu::detail::syncthreads()
#define __builtin_amdgcn_mbcnt_lo(mask, base) ::emu::detail::mbcnt_lo((mask), (base))
#define __builtin_amdgcn_mbcnt_hi(mask, base) ::emu::detail::mbcnt_hi((mask), (base))
#define __builtin_amdgcn_ds_bpermute(addr, data) \
  ::emu::detail::shuffle((int)(data), [_a = (int)(addr)](int) { return (_a >> 2) & 63; })
#define __builtin_amdgcn_workitem_id_x() (threadIdx.x)
#define __builtin_amdgcn_workitem_id_y() (threadIdx.y)
#define __builtin_amdgcn_workitem_id_z() (threadIdx.z)
#define __builtin_amdgcn_workgroup_id_x() (blockIdx.x)
#define __builtin_amdgcn_workgroup_id_y() (blockIdx.y)
#define __builtin_amdgcn_workgroup_id_z() (blockIdx.z)
#define __builtin_amdgcn_wavefrontsize() 64
// Scheduling and wait hints: no effect on the emulated semantics.
#define __builtin_amdgcn_sched_barrier(...) ((void)0)
#define __builtin_amdgcn_sched_group_barrier(...) ((void)0)
#define __builtin_amdgcn_s_setprio(...) ((void)0)
#define __builtin_amdgcn_s_waitcnt(...) ((void)0)
#define __builtin_amdgcn_s_sleep(...) ((void)0)
#define __builtin_amdgcn_iglp_opt(...) ((void)0)
#define __builtin_amdgcn_fence(...) std::atomic_thread_fence(std::memory_order_seq_cst)
