// Test driver for the HIP emulator's instructions (run by tests/rocm/test_emulator_mfma.py).
//
// Every mode reads raw little-endian arrays from files in DIR, runs HIP-style kernels through
// emu::launch and writes raw arrays back. The MFMA kernels are layout-agnostic on purpose: lane l
// loads "its" 64-bit operand and stores "its" accumulator registers; the test builds those lane
// operands from whole matrices with AMD's element->(lane, register) formulas and maps the results
// back, so the emulator's register->element mapping is checked against the other direction.
//
//   emu_selftest mfma16 W T DIR   A.bin/B.bin: (W, T, 64) u64, C.bin: (W, 64, 4) f32 -> D.bin
//   emu_selftest mfma32 W T DIR   same with (W, 64, 16) f32 accumulators
//   emu_selftest cvt DIR          words.bin: (64) i32 -> f32.bin (64, 4) f32, pk.bin (64, 2, 2) f32
//   emu_selftest cvtpk N DIR      a.bin, b.bin: (N) f32, old.bin, sel.bin: (N) i32 -> out.bin (N) i32
//   emu_selftest misc DIR         collectives, LDS, atomics -> several .bin files (see kernel)
//   emu_selftest diverge          MFMA with half of the wave returned: must abort with a message
//   emu_selftest dynlds N DIR     dynamic LDS of N floats: poison, then exchange across waves -> out.bin
// Safety nets (each must be caught by the named tool):
//   emu_selftest race             LDS written and read by other waves without __syncthreads (TSan)
//   emu_selftest lds_oob          LDS read one element past the end of a __shared__ array (ASan)
//   emu_selftest lds_uninit DIR   LDS read before written: poison (non-ASan builds) -> out.bin
//   emu_selftest deadlock         half a wave at __syncthreads, half at an MFMA (timeout message)
#define GEMM_HIP_EMULATOR 1
#include "../hip_emu.h"

#include <cinttypes>
#include <fstream>
#include <string>

typedef float floatx4 __attribute__((ext_vector_type(4)));
typedef float floatx16 __attribute__((ext_vector_type(16)));

namespace {

std::vector<char> read_all(const std::string &path, size_t expect) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    std::fprintf(stderr, "cannot read %s\n", path.c_str());
    std::exit(2);
  }
  std::vector<char> v((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (v.size() != expect) {
    std::fprintf(stderr, "%s: %zu bytes, expected %zu\n", path.c_str(), v.size(), expect);
    std::exit(2);
  }
  return v;
}

template <class T>
std::vector<T> read_as(const std::string &path, size_t n) {
  std::vector<char> raw = read_all(path, n * sizeof(T));
  std::vector<T> out(n);
  std::memcpy(out.data(), raw.data(), raw.size());
  return out;
}

template <class T>
void write_all(const std::string &path, const std::vector<T> &v) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char *>(v.data()), std::streamsize(v.size() * sizeof(T)));
  if (!f) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::exit(2);
  }
}

// ---- MFMA: each wave w runs T chained MFMAs on its own operands -------------------------------
__global__ void k_mfma16(const uint64_t *A, const uint64_t *B, const float *C, float *D, int T) {
  const int lane = int(threadIdx.x) % 64, w = int(threadIdx.x) / 64;
  floatx4 acc;
  for (int r = 0; r < 4; ++r) acc[r] = C[(w * 64 + lane) * 4 + r];
  for (int t = 0; t < T; ++t) {
    const long a = long(A[(w * T + t) * 64 + lane]);
    const long b = long(B[(w * T + t) * 64 + lane]);
    acc = __builtin_amdgcn_mfma_f32_16x16x32_fp8_fp8(a, b, acc, 0, 0, 0);
  }
  for (int r = 0; r < 4; ++r) D[(w * 64 + lane) * 4 + r] = acc[r];
}

__global__ void k_mfma32(const uint64_t *A, const uint64_t *B, const float *C, float *D, int T) {
  const int lane = int(threadIdx.x) % 64, w = int(threadIdx.x) / 64;
  floatx16 acc;
  for (int r = 0; r < 16; ++r) acc[r] = C[(w * 64 + lane) * 16 + r];
  for (int t = 0; t < T; ++t) {
    const long a = long(A[(w * T + t) * 64 + lane]);
    const long b = long(B[(w * T + t) * 64 + lane]);
    acc = __builtin_amdgcn_mfma_f32_32x32x16_fp8_fp8(a, b, acc, 0, 0, 0);
  }
  for (int r = 0; r < 16; ++r) D[(w * 64 + lane) * 16 + r] = acc[r];
}

template <int R>
int run_mfma(int W, int T, const std::string &dir) {
  const size_t nops = size_t(W) * T * 64, nacc = size_t(W) * 64 * R;
  auto A = read_as<uint64_t>(dir + "/A.bin", nops);
  auto B = read_as<uint64_t>(dir + "/B.bin", nops);
  auto C = read_as<float>(dir + "/C.bin", nacc);
  std::vector<float> D(nacc, std::numeric_limits<float>::quiet_NaN());
  if (R == 4)
    emu::launch(k_mfma16, dim3(1), dim3(64 * W), A.data(), B.data(), C.data(), D.data(), T);
  else
    emu::launch(k_mfma32, dim3(1), dim3(64 * W), A.data(), B.data(), C.data(), D.data(), T);
  write_all(dir + "/D.bin", D);
  return 0;
}

// ---- conversions ---------------------------------------------------------------------------
__global__ void k_cvt(const int *words, float *f32, float *pk) {
  const int l = int(threadIdx.x);
  const int w = words[l];
  f32[l * 4 + 0] = __builtin_amdgcn_cvt_f32_fp8(w, 0);
  f32[l * 4 + 1] = __builtin_amdgcn_cvt_f32_fp8(w, 1);
  f32[l * 4 + 2] = __builtin_amdgcn_cvt_f32_fp8(w, 2);
  f32[l * 4 + 3] = __builtin_amdgcn_cvt_f32_fp8(w, 3);
  const emu::floatx2 lo = __builtin_amdgcn_cvt_pk_f32_fp8(w, false);
  const emu::floatx2 hi = __builtin_amdgcn_cvt_pk_f32_fp8(w, true);
  pk[l * 4 + 0] = lo[0];
  pk[l * 4 + 1] = lo[1];
  pk[l * 4 + 2] = hi[0];
  pk[l * 4 + 3] = hi[1];
}

__global__ void k_cvtpk(const float *a, const float *b, const int *old, const int *sel, int *out, int n) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i >= n) return;
  out[i] = sel[i] ? __builtin_amdgcn_cvt_pk_fp8_f32(a[i], b[i], old[i], true)
                  : __builtin_amdgcn_cvt_pk_fp8_f32(a[i], b[i], old[i], false);
}

// ---- collectives, LDS, atomics --------------------------------------------------------------
// block 256 (4 waves), grid 3. Outputs (per global thread g = block*256 + tid):
//   lds[g]    = value written by thread 255-tid of the same block (tid*7 + block*1000)
//   xor5[g]   = __shfl_xor(tid, 5)            shfl[g] = __shfl(tid, 63 - lane)
//   down[g]   = __shfl_down(tid, 3, 16)       up[g] = __shfl_up(tid, 2)
//   ballot[g] = __ballot(lane % 3 == 0)       first[g] = readfirstlane(tid) (lane 0's tid)
//   mbcnt[g]  = mbcnt_hi(~0, mbcnt_lo(~0, 0)) wave[g] = LDS value of lane+1 after wave_barrier
//   bperm[g]  = ds_bpermute(4 * (lane ^ 9), tid)
//   sums: [0] += 1.0f per thread, [1] += tid (float), isum += 1 per thread
__global__ void k_misc(int *lds_out, int *xor5, int *shfl, int *down, int *up, unsigned long long *ballot,
                       int *first, int *mbcnt, int *wave, int *bperm, float *sums, int *isum) {
  __shared__ int buf[256];
  __shared__ int wbuf[256];
  const int tid = int(threadIdx.x), lane = tid % 64, g = int(blockIdx.x) * 256 + tid;
  buf[tid] = tid * 7 + int(blockIdx.x) * 1000;
  __syncthreads();
  lds_out[g] = buf[255 - tid];
  xor5[g] = __shfl_xor(tid, 5);
  shfl[g] = __shfl(tid, 63 - lane);
  down[g] = __shfl_down(tid, 3u, 16);
  up[g] = __shfl_up(tid, 2u);
  ballot[g] = __ballot(lane % 3 == 0);
  first[g] = __builtin_amdgcn_readfirstlane(tid);
  mbcnt[g] = int(__builtin_amdgcn_mbcnt_hi(~0u, __builtin_amdgcn_mbcnt_lo(~0u, 0u)));
  wbuf[tid] = tid * 3;
  __builtin_amdgcn_wave_barrier();
  wave[g] = wbuf[(tid & ~63) + (lane + 1) % 64];
  bperm[g] = __builtin_amdgcn_ds_bpermute(4 * (lane ^ 9), tid);
  atomicAdd(&sums[0], 1.0f);
  atomicAdd(&sums[1], float(tid));
  atomicAdd(isum, 1);
}

int run_misc(const std::string &dir) {
  const int n = 3 * 256;
  std::vector<int> lds(n), xor5(n), shfl(n), down(n), up(n), first(n), mbcnt(n), wave(n), bperm(n), isum(1, 0);
  std::vector<unsigned long long> ballot(n);
  std::vector<float> sums(2, 0.0f);
  emu::launch(k_misc, dim3(3), dim3(256), lds.data(), xor5.data(), shfl.data(), down.data(), up.data(),
              ballot.data(), first.data(), mbcnt.data(), wave.data(), bperm.data(), sums.data(), isum.data());
  write_all(dir + "/lds.bin", lds);
  write_all(dir + "/xor5.bin", xor5);
  write_all(dir + "/shfl.bin", shfl);
  write_all(dir + "/down.bin", down);
  write_all(dir + "/up.bin", up);
  write_all(dir + "/ballot.bin", ballot);
  write_all(dir + "/first.bin", first);
  write_all(dir + "/mbcnt.bin", mbcnt);
  write_all(dir + "/wave.bin", wave);
  write_all(dir + "/bperm.bin", bperm);
  write_all(dir + "/sums.bin", sums);
  write_all(dir + "/isum.bin", isum);
  return 0;
}

// ---- a wave that diverges around an MFMA: the emulator must refuse it ----------------------------
__global__ void k_diverge(float *out) {
  const int lane = int(threadIdx.x) % 64;
  if (lane >= 32) return;
  floatx4 acc = {0, 0, 0, 0};
  acc = __builtin_amdgcn_mfma_f32_16x16x32_fp8_fp8(0x3838383838383838L, 0x3838383838383838L, acc, 0, 0, 0);
  out[lane] = acc[0];
}

// ---- dynamic LDS (HIP_DYNAMIC_SHARED + emu::launch_dynamic) ----------------------------------
// block 128, grid 2: out[b][0][i] = initial content (poison), out[b][1][i] = value of thread 127-i.
__global__ void k_dynlds(float *out, int n, int oob) {
  HIP_DYNAMIC_SHARED(float, dyn);
  const int tid = int(threadIdx.x);
  float *o = out + size_t(blockIdx.x) * 2 * 128;
  o[tid] = dyn[tid];  // before anyone writes: poison
  __syncthreads();
  dyn[tid] = float(tid + 1000 * int(blockIdx.x));
  __syncthreads();
  o[128 + tid] = dyn[127 - tid];
  if (oob && tid == 0) o[0] = dyn[n];  // one past the end
}

// ---- safety nets ------------------------------------------------------------------------------
__global__ void k_race(int *out) {
  __shared__ int buf[128];
  const int tid = int(threadIdx.x);
  buf[tid] = tid;
  out[tid] = buf[127 - tid];  // missing __syncthreads: other wave's data
}

__global__ void k_lds_oob(int *out) {
  __shared__ int buf[64];
  const int tid = int(threadIdx.x);
  buf[tid] = tid;
  __syncthreads();
  const int *p = buf;  // through a pointer, as kernels address LDS (UBSan's bounds check sees none)
  out[tid] = p[tid + 1];  // lane 63 reads buf[64]
}

__global__ void k_lds_uninit(uint32_t *out) {
  __shared__ uint32_t buf[64];
  const int tid = int(threadIdx.x);
  if (blockIdx.x == 0) buf[tid] = 7u;  // the second workgroup must not see this
  out[blockIdx.x * 64 + tid] = buf[tid];
}

__global__ void k_deadlock(float *out) {
  const int lane = int(threadIdx.x) % 64;
  floatx4 acc = {0, 0, 0, 0};
  if (lane < 32) {
    __syncthreads();
    acc = __builtin_amdgcn_mfma_f32_16x16x32_fp8_fp8(0L, 0L, acc, 0, 0, 0);
  } else {
    acc = __builtin_amdgcn_mfma_f32_16x16x32_fp8_fp8(0L, 0L, acc, 0, 0, 0);
    __syncthreads();
  }
  out[lane] = acc[0];
}

}  // namespace

int main(int argc, char **argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if ((mode == "mfma16" || mode == "mfma32") && argc == 5) {
    const int W = std::atoi(argv[2]), T = std::atoi(argv[3]);
    if (W < 1 || W > 16 || T < 1) return 2;
    return mode == "mfma16" ? run_mfma<4>(W, T, argv[4]) : run_mfma<16>(W, T, argv[4]);
  }
  if (mode == "cvt" && argc == 3) {
    const std::string dir = argv[2];
    auto words = read_as<int>(dir + "/words.bin", 64);
    std::vector<float> f32(256), pk(256);
    emu::launch(k_cvt, dim3(1), dim3(64), words.data(), f32.data(), pk.data());
    write_all(dir + "/f32.bin", f32);
    write_all(dir + "/pk.bin", pk);
    return 0;
  }
  if (mode == "cvtpk" && argc == 4) {
    const int n = std::atoi(argv[2]);
    const std::string dir = argv[3];
    auto a = read_as<float>(dir + "/a.bin", size_t(n));
    auto b = read_as<float>(dir + "/b.bin", size_t(n));
    auto old = read_as<int>(dir + "/old.bin", size_t(n));
    auto sel = read_as<int>(dir + "/sel.bin", size_t(n));
    std::vector<int> out(size_t(n), 0);
    emu::launch(k_cvtpk, dim3(unsigned((n + 255) / 256)), dim3(256), a.data(), b.data(), old.data(), sel.data(),
                out.data(), n);
    write_all(dir + "/out.bin", out);
    return 0;
  }
  if (mode == "misc" && argc == 3) return run_misc(argv[2]);
  if (mode == "diverge") {
    std::vector<float> out(64, 0.0f);
    emu::launch(k_diverge, dim3(1), dim3(64), out.data());
    std::printf("diverge: no error\n");
    return 0;
  }
  if ((mode == "dynlds" || mode == "dynlds_oob") && argc == 4) {
    const int n = std::atoi(argv[2]);
    if (n < 128) return 2;
    std::vector<float> out(2 * 2 * 128, 0.0f);
    emu::launch_dynamic(k_dynlds, dim3(2), dim3(128), size_t(n) * sizeof(float), out.data(), n,
                        mode == "dynlds_oob" ? 1 : 0);
    write_all(std::string(argv[3]) + "/out.bin", out);
    return 0;
  }
  if (mode == "race") {
    std::vector<int> out(128, 0);
    emu::launch(k_race, dim3(1), dim3(128), out.data());
    return 0;
  }
  if (mode == "lds_oob") {
    std::vector<int> out(64, 0);
    emu::launch(k_lds_oob, dim3(1), dim3(64), out.data());
    return 0;
  }
  if (mode == "lds_uninit" && argc == 3) {
    std::vector<uint32_t> out(128, 0);
    emu::launch(k_lds_uninit, dim3(2), dim3(64), out.data());
    write_all(std::string(argv[2]) + "/out.bin", out);
    std::printf("poisoning=%d\n", GEMM_EMU_LDS_POISON);
    return 0;
  }
  if (mode == "deadlock") {
    std::vector<float> out(64, 0.0f);
    emu::launch(k_deadlock, dim3(1), dim3(64), out.data());
    return 0;
  }
  std::fprintf(stderr, "usage: see the comment at the top of emu_selftest.cpp\n");
  return 2;
}
