// Seed-layout preparation (torch-free): one launch transposes a (K, M) -> x (M, K), b (K, N) -> w (N, K)
// and both scale tensors into the K-major layout the FP8 wgmma path needs (or b and b_scale alone, for
// the kernels that read a as it is: PrepArgs::b_only). FP8 wgmma reads only
// K-major shared-memory operands, and torch's .contiguous() on these runs at ~350 GB/s, so this
// kernel moves 128x128-byte tiles with 16-byte global accesses and a bank-conflict-free swizzled
// shared-memory transpose (4x4 byte transposes in registers with prmt).
#include <cuda_runtime.h>

#include <cstdint>

#include "gemm_cuda_kernels.h"

namespace gemm_cuda {
namespace {

constexpr int kTT = 128;  // byte tile: 128 rows (k) x 128 columns (m or n)
constexpr int kThreads = 256;
constexpr int kScalePerBlock = kThreads * 4;

// Transposes one kTT x kTT tile of src (rows x cols bytes, row-major; cols % 16 == 0 and src 16-byte
// aligned; rows % kTT == 0) into dst (cols x rows). Shared memory holds the tile as 8 chunks of 16 bytes
// per row; chunk c of row r is stored at c ^ ((r >> 4) & 7), so that phase 2's reads of one word column
// over 16 rows by a warp hit 32 distinct banks.
__device__ __forceinline__ void transpose_tile(uint8_t const *__restrict__ src, uint8_t *__restrict__ dst,
                                               int64_t rows, int64_t cols, int64_t r0, int64_t c0,
                                               uint32_t *smem) {
  int const t = threadIdx.x;
  // Phase 1: coalesced 16-byte loads; 128 rows x 8 chunks = 1024 chunks, 4 per thread.
  uint4 v[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    int const idx = t + i * kThreads;
    int const r = idx >> 3, c = idx & 7;
    int64_t const gc = c0 + c * 16;
    v[i] = make_uint4(0, 0, 0, 0);
    if (gc < cols) v[i] = __ldg(reinterpret_cast<uint4 const *>(src + (r0 + r) * cols + gc));
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    int const idx = t + i * kThreads;
    int const r = idx >> 3, c = idx & 7;
    reinterpret_cast<uint4 *>(smem)[r * 8 + (c ^ ((r >> 4) & 7))] = v[i];
  }
  __syncthreads();
  // Phase 2: thread (mq = t / 8, kg = t % 8) owns tile columns 4mq..4mq+3 and rows 16kg..16kg+15.
  int const mq = t >> 3, kg = t & 7;
  uint32_t w[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) {
    int const r = kg * 16 + i;
    int const pword = (((mq >> 2) ^ kg) << 2) | (mq & 3);  // (r >> 4) & 7 == kg
    w[i] = smem[r * 32 + pword];
  }
  // Byte j of w[i] is src[r0 + 16kg + i][c0 + 4mq + j]. Output row c0 + 4mq + j takes, at columns
  // r0 + 16kg .. +15, byte j of w[0..15]: word q gathers byte j of w[4q..4q+3].
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    int64_t const oc = c0 + 4 * mq + j;
    uint32_t const sel = static_cast<uint32_t>(j) | (static_cast<uint32_t>(j + 4) << 4);
    uint32_t o[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      uint32_t const lo = __byte_perm(w[4 * q + 0], w[4 * q + 1], sel);
      uint32_t const hi = __byte_perm(w[4 * q + 2], w[4 * q + 3], sel);
      o[q] = __byte_perm(lo, hi, 0x5410);
    }
    if (oc < cols) {
      *reinterpret_cast<uint4 *>(dst + oc * rows + r0 + kg * 16) = make_uint4(o[0], o[1], o[2], o[3]);
    }
  }
}

struct PrepParams {
  PrepArgs p;
  int64_t KB, NB;
  int64_t tiles_a, tiles_b;  // vectorized tiles (0 when that operand goes through the byte path, or not at all)
  int64_t scales_a;  // x_scale entries to write (0 with b_only)
  int64_t tiles_m, tiles_n;  // tile columns per operand
};

__global__ void __launch_bounds__(kThreads) seed_prep_kernel(PrepParams const q) {
  __shared__ __align__(16) uint32_t smem[kTT * kTT / 4];
  PrepArgs const &p = q.p;
  int64_t bid = blockIdx.x;
  if (bid < q.tiles_a) {
    transpose_tile(p.a, p.x, p.K, p.M, (bid / q.tiles_m) * kTT, (bid % q.tiles_m) * kTT, smem);
    return;
  }
  bid -= q.tiles_a;
  if (bid < q.tiles_b) {
    transpose_tile(p.b, p.w, p.K, p.N, (bid / q.tiles_n) * kTT, (bid % q.tiles_n) * kTT, smem);
    return;
  }
  bid -= q.tiles_b;
  // Scales, in output order (coalesced writes; the reads are small and strided).
  int64_t const total_a = q.scales_a, total = total_a + q.NB * q.KB;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    int64_t const e = bid * kScalePerBlock + i * kThreads + threadIdx.x;
    if (e >= total) return;
    if (e < total_a) {
      int64_t const m = e / q.KB, kb = e % q.KB;
      p.sx[e] = p.sa[kb * p.M + m];
    } else {
      int64_t const f = e - total_a, n = f / q.KB, kb = f % q.KB;
      p.sw[f] = p.sb[kb * q.NB + n];
    }
  }
}

// Transpose for operands whose rows are not 16-byte aligned (M or N not a multiple of 16): src (rows, cols)
// bytes at any alignment into dst (cols, rows), rows = K a multiple of 64 and dst 16-byte aligned (a fresh
// allocation), so the K-major writes are whole 16-byte stores. A 64 x 64 byte tile a round: each thread reads
// 16 bytes of one column with byte loads (a warp's 32 lanes read 32 consecutive bytes of a row), then writes
// 16 K bytes of one output row. (Byte loads and byte stores in 32 x 32 tiles, before, moved b at ~1 TB/s:
// run 148, 1x50257x4096 in the seed layout 522 us against 85 in the natural one.) Rows (K) may number up to
// 2^31 - 128, more than gridDim.y's 65535 blocks of 64 cover: each block takes every gridDim.y-th block of
// 64 rows. The loop bound is the same for the whole block, so the barriers in it are reached by every thread.
constexpr int kByteTile = 64;
constexpr int kByteThreads = 256;

__global__ __launch_bounds__(kByteThreads) void transpose_bytes_kernel(uint8_t const *__restrict__ src,
                                                                        uint8_t *__restrict__ dst, int64_t rows,
                                                                        int64_t cols) {
  __shared__ uint8_t tile[kByteTile][kByteTile + 4];  // [row][column]
  int64_t const c0 = static_cast<int64_t>(blockIdx.x) * kByteTile;
  int const t = threadIdx.x;
  int const load_c = t % kByteTile, load_r = t / kByteTile;  // rows load_r, load_r + 4, ...
  int const store_c = t / 4, store_r = (t % 4) * 16;         // 16 bytes of output row store_c
  bool const load_ok = c0 + load_c < cols, store_ok = c0 + store_c < cols;
  for (int64_t r0 = static_cast<int64_t>(blockIdx.y) * kByteTile; r0 < rows;
       r0 += static_cast<int64_t>(gridDim.y) * kByteTile) {
    if (load_ok) {
      uint8_t const *in = src + (r0 + load_r) * cols + c0 + load_c;
#pragma unroll
      for (int i = 0; i < kByteTile / 4; ++i) tile[load_r + 4 * i][load_c] = in[4 * i * cols];
    }
    __syncthreads();
    if (store_ok) {
      uint32_t word[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        int const r = store_r + 4 * j;
        word[j] = tile[r][store_c] | (tile[r + 1][store_c] << 8) | (tile[r + 2][store_c] << 16) |
                  (static_cast<uint32_t>(tile[r + 3][store_c]) << 24);
      }
      *reinterpret_cast<uint4 *>(dst + (c0 + store_c) * rows + r0 + store_r) =
          make_uint4(word[0], word[1], word[2], word[3]);
    }
    __syncthreads();  // the next round's loads overwrite the tile
  }
}

// The grid of transpose_bytes_kernel for a (rows, cols) byte matrix: columns along x, rows along y up to
// the hardware's 65535.
dim3 transpose_grid(int64_t rows, int64_t cols) {
  int64_t const row_blocks = rows / kByteTile;
  return dim3(static_cast<unsigned>((cols + kByteTile - 1) / kByteTile),
              static_cast<unsigned>(row_blocks < 65535 ? row_blocks : 65535));
}

bool aligned16(void const *p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace

cudaError_t launch_seed_prep(PrepArgs const &p, cudaStream_t stream) {
  PrepParams q{};
  q.p = p;
  q.KB = p.K / kTT;
  q.NB = (p.N + kTT - 1) / kTT;
  bool const with_a = !p.b_only;
  bool const vec_a = (p.M % 16 == 0) && aligned16(p.a) && aligned16(p.x);
  bool const vec_b = (p.N % 16 == 0) && aligned16(p.b) && aligned16(p.w);
  // The byte transposes write K-major rows 16 bytes at a time (K % 128 == 0; x and w fresh, so aligned).
  if (p.K % kByteTile != 0 || (with_a && !vec_a && !aligned16(p.x)) || (!vec_b && !aligned16(p.w))) {
    return cudaErrorInvalidValue;
  }
  q.tiles_m = (p.M + kTT - 1) / kTT;
  q.tiles_n = (p.N + kTT - 1) / kTT;
  q.tiles_a = with_a && vec_a ? (p.K / kTT) * q.tiles_m : 0;
  q.tiles_b = vec_b ? (p.K / kTT) * q.tiles_n : 0;
  q.scales_a = with_a ? p.M * q.KB : 0;
  int64_t const scale_blocks = (q.scales_a + q.NB * q.KB + kScalePerBlock - 1) / kScalePerBlock;
  int64_t const blocks = q.tiles_a + q.tiles_b + scale_blocks;
  if (blocks >= INT32_MAX) return cudaErrorInvalidValue;
  seed_prep_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(q);
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  if (with_a && !vec_a) {
    transpose_bytes_kernel<<<transpose_grid(p.K, p.M), kByteThreads, 0, stream>>>(p.a, p.x, p.K, p.M);
    err = cudaGetLastError();
    if (err != cudaSuccess) return err;
  }
  if (!vec_b) {
    transpose_bytes_kernel<<<transpose_grid(p.K, p.N), kByteThreads, 0, stream>>>(p.b, p.w, p.K, p.N);
    err = cudaGetLastError();
  }
  return err;
}

}  // namespace gemm_cuda
