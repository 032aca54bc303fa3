// packed_attention on cuda (the op: devices/op_defs/attention.cpp): softmax(q k^T
// / sqrt(hd)) v per sequence and head over the packed tokens, f32 or bf16 in and the same out,
// computing no padded position.
//
// Two flash-style kernels (K and V staged in shared memory a tile at a time, an online softmax: the
// running maximum rescales the running sum and context, so no score matrix is stored):
// - bf16 heads of 64 or 128 columns on tensor cores: mma.sync m16n8k16 bf16 -> f32, a block of 4
//   warps for 64 query rows, K/V tiles of 64 keys copied by cp.async while the previous tile is
//   used, the scores kept in registers and fed back to the second product as bf16 (FlashAttention-2's
//   layout). Needs sm_80 or later, which the build's architectures are.
// - everything else (f32, other head widths up to 256): FMA in f32, a block of 4 warps for 32 query
//   rows, K/V tiles of 32 keys (one per lane) and the weights in shared memory, q and the weights
//   read 4 floats at a time. f32 stays f32 (no TF32): the results keep the CPU kernel's to 1e-4.
// ptxas -v (sm_80, sm_90): no spills; 159 registers for bf16 heads of 64, 140 for f32 ones.
// The grid and the sequences a block computes: devices/cuda/attention_tiles.h (no host read of the
// offsets). Offsets are not validated as on the CPU (that needs them on the host); a row with no
// keys gets NaN, as there.
//
// Why hand-written and not cuDNN 9's fused attention (graph API, ragged offsets): cuDNN's SDPA is
// reached through its graph API, whose C++ frontend (the header library that makes it usable) is not
// installed here; a graph is built, its plan chosen and finalized per problem shape (batch, longest
// sequence), which the serving path changes every call; q, k and v come with ragged offsets of their
// own. A kernel of our own reads the packed qkv as the projection wrote it, with no plan to cache.
// Which is faster must be measured on the GPU (examples/attention_bench.cpp beside PyTorch's
// FlashAttention varlen, examples/attention_torch.py); nothing could be measured where this was written.
#include <cuda_bf16.h>

#include "devices/cuda/attention_tiles.h"
#include "devices/cuda/kernel_util.cuh"
#include "devices/op_defs/attention.h"
#include "devices/registry.h"

namespace troupe::cuda {

namespace {

constexpr int kThreads = 128;  // both kernels: 4 warps
constexpr unsigned kFull = 0xffffffffu;

// ---- tensor cores (bf16) ----

constexpr int kMmaRows = 64;  // query rows per block, 16 per warp (an mma's m)
constexpr int kMmaKeys = 64;  // keys per K/V tile
constexpr int kPad = 8;       // bf16 past each row in shared memory: rows 16 bytes apart mod 128, so
                              // the 8 rows an ldmatrix reads fall in different banks

template <int HD>
constexpr size_t mma_shared_bytes() {  // Q [64][HD + 8], K and V [2 buffers][64][HD + 8]
  return size_t(kMmaRows + 4 * kMmaKeys) * (HD + kPad) * sizeof(__nv_bfloat16);
}

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes from global to shared memory without passing through registers; zeros when !valid
// (src is then not read).
__device__ __forceinline__ void copy_16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(dst)), "l"(src),
               "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void copies_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int Pending>
__device__ __forceinline__ void copies_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending));
}

// Four 8x8 bf16 matrices; lanes 8i..8i+7 give the addresses of matrix i's rows, and register i
// holds row lane / 4, columns 2 (lane % 4) and the next, of matrix i (of its transpose with trans).
__device__ __forceinline__ void load_matrices(uint32_t (&r)[4], const __nv_bfloat16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(p)));
}
__device__ __forceinline__ void load_matrices_transposed(uint32_t (&r)[4], const __nv_bfloat16* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(p)));
}

// c += a b: a 16x16 (row-major fragments), b 16x8 (column-major), c 16x8 f32.
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats as the bf16 pair of a fragment register: the first in the low half.
__device__ __forceinline__ uint32_t bf16_pair(float first, float second) {
  const __nv_bfloat162 pair = __floats2bfloat162_rn(first, second);
  return *reinterpret_cast<const uint32_t*>(&pair);
}

// One block per (tile of 64 packed rows, head). Warp w owns the tile's rows 16w..16w+15; in the
// fragments, lane l holds rows l / 4 and l / 4 + 8 of them, and columns 2 (l % 4) and the next of
// each 8-column block.
template <int HD>
__global__ void __launch_bounds__(kThreads)
    attention_tensor_cores(const __nv_bfloat16* qkv, const int64_t* offsets, const int64_t* key_lengths,
                           __nv_bfloat16* out, int64_t rows, int64_t sequences, int64_t d, float scale_log2) {
  constexpr int kStride = HD + kPad, kChunks = HD / 8;  // 16-byte pieces of a row
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  __nv_bfloat16* q_tile = reinterpret_cast<__nv_bfloat16*>(shared_bytes);
  __nv_bfloat16* k_tiles = q_tile + kMmaRows * kStride;
  __nv_bfloat16* v_tiles = k_tiles + 2 * kMmaKeys * kStride;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, group = lane / 4, pair = 2 * (lane % 4);
  const int64_t head = blockIdx.y, row_stride = 3 * d;
  const int64_t tile_begin = int64_t(blockIdx.x) * kMmaRows;
  const int64_t tile_end = tile_begin + kMmaRows < rows ? tile_begin + kMmaRows : rows;
  const int64_t warp_begin = tile_begin + 16 * warp;

  // The tile's queries, once (rows past the last are zeros), then this warp's as A fragments.
  for (int i = threadIdx.x; i < kMmaRows * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    const bool valid = tile_begin + r < tile_end;
    copy_16(q_tile + r * kStride + 8 * c, qkv + (valid ? tile_begin + r : 0) * row_stride + head * HD + 8 * c, valid);
  }
  copies_commit();
  copies_wait<0>();
  __syncthreads();
  uint32_t q[HD / 16][4];
#pragma unroll
  for (int kk = 0; kk < HD / 16; ++kk)
    load_matrices(q[kk], q_tile + (16 * warp + lane % 16) * kStride + 16 * kk + 8 * (lane / 16));

  for_each_tile_segment(offsets, sequences, tile_begin, tile_end, [&](int64_t s, int64_t begin, int64_t end) {
    const int64_t n = keys_of(offsets, key_lengths, s);
    if (n == 0) {
      for (int64_t i = threadIdx.x; i < (end - begin) * HD; i += kThreads)
        out[(begin + i / HD) * d + head * HD + i % HD] = __float2bfloat16_rn(NAN);
      return;
    }
    const __nv_bfloat16* keys = qkv + offsets[s] * row_stride + d + head * HD;
    const __nv_bfloat16* values = keys + d;
    const auto load_tile = [&](int64_t t, int buffer) {
      for (int i = threadIdx.x; i < kMmaKeys * kChunks; i += kThreads) {
        const int j = i / kChunks, c = i % kChunks;
        const int64_t key = t * kMmaKeys + j;
        const bool valid = key < n;  // zeros past the last key: 0 weights times zeros, never NaN
        const int64_t at = (valid ? key : 0) * row_stride + 8 * c;
        const int slot = (buffer * kMmaKeys + j) * kStride + 8 * c;
        copy_16(k_tiles + slot, keys + at, valid);
        copy_16(v_tiles + slot, values + at, valid);
      }
      copies_commit();
    };
    // Warps with no row in the segment only help copy.
    const bool mine = warp_begin < end && warp_begin + 16 > begin;
    float context[HD / 8][4] = {};
    float top[2] = {-INFINITY, -INFINITY}, total[2] = {0.0f, 0.0f};  // rows group and group + 8
    const int64_t tiles = (n + kMmaKeys - 1) / kMmaKeys;
    load_tile(0, 0);
    for (int64_t t = 0; t < tiles; ++t) {
      if (t + 1 < tiles) {
        load_tile(t + 1, int((t + 1) & 1));
        copies_wait<1>();
      } else {
        copies_wait<0>();
      }
      __syncthreads();
      if (mine) {
        const __nv_bfloat16* k_tile = k_tiles + (t & 1) * kMmaKeys * kStride;
        const __nv_bfloat16* v_tile = v_tiles + (t & 1) * kMmaKeys * kStride;
        // Scores: q k^T, 8 blocks of 8 keys.
        float score[kMmaKeys / 8][4] = {};
#pragma unroll
        for (int kk = 0; kk < HD / 16; ++kk) {
#pragma unroll
          for (int nb = 0; nb < kMmaKeys / 16; ++nb) {
            uint32_t b[4];  // keys 16nb.. and 16nb + 8.., columns 16kk.. and 16kk + 8..
            load_matrices(b, k_tile + (16 * nb + lane % 8 + 8 * (lane / 16)) * kStride + 16 * kk + 8 * ((lane / 8) % 2));
            mma(score[2 * nb], q[kk], b[0], b[1]);
            mma(score[2 * nb + 1], q[kk], b[2], b[3]);
          }
        }
        // Online softmax in base 2, keys past the last masked. Each tile has a key, so the
        // maximum is finite after the first and exp2(-inf) weighs the masked ones 0.
        const int64_t valid_keys = n - t * kMmaKeys;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          float next = top[half];
#pragma unroll
          for (int nb = 0; nb < kMmaKeys / 8; ++nb)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              float& x = score[nb][2 * half + e];
              x = 8 * nb + pair + e < valid_keys ? x * scale_log2 : -INFINITY;
              next = fmaxf(next, x);
            }
          next = fmaxf(next, __shfl_xor_sync(kFull, next, 1));
          next = fmaxf(next, __shfl_xor_sync(kFull, next, 2));
          const float rescale = exp2f(top[half] - next);
          top[half] = next;
          float sum = 0.0f;  // this lane's columns; the 4 lanes of a row add theirs at the end
#pragma unroll
          for (int nb = 0; nb < kMmaKeys / 8; ++nb)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              float& x = score[nb][2 * half + e];
              x = exp2f(x - next);
              sum += x;
            }
          total[half] = total[half] * rescale + sum;
#pragma unroll
          for (int nb = 0; nb < HD / 8; ++nb) {
            context[nb][2 * half] *= rescale;
            context[nb][2 * half + 1] *= rescale;
          }
        }
        // context += weights v: the score fragments of keys 16kk..16kk + 15 are the A fragment.
#pragma unroll
        for (int kk = 0; kk < kMmaKeys / 16; ++kk) {
          const uint32_t a[4] = {bf16_pair(score[2 * kk][0], score[2 * kk][1]),
                                 bf16_pair(score[2 * kk][2], score[2 * kk][3]),
                                 bf16_pair(score[2 * kk + 1][0], score[2 * kk + 1][1]),
                                 bf16_pair(score[2 * kk + 1][2], score[2 * kk + 1][3])};
#pragma unroll
          for (int nb = 0; nb < HD / 16; ++nb) {
            uint32_t b[4];  // keys 16kk.. and 16kk + 8.., columns 16nb.. and 16nb + 8.., transposed
            load_matrices_transposed(b, v_tile + (16 * kk + lane % 16) * kStride + 16 * nb + 8 * (lane / 16));
            mma(context[2 * nb], a, b[0], b[1]);
            mma(context[2 * nb + 1], a, b[2], b[3]);
          }
        }
      }
      __syncthreads();  // the tile's buffer is free for the copy after next
    }
    if (!mine) return;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float sum = total[half];
      sum += __shfl_xor_sync(kFull, sum, 1);
      sum += __shfl_xor_sync(kFull, sum, 2);
      const int64_t row = warp_begin + group + 8 * half;
      if (row < begin || row >= end) continue;
      const float inverse = 1.0f / sum;
      __nv_bfloat16* o = out + row * d + head * HD + pair;
#pragma unroll
      for (int nb = 0; nb < HD / 8; ++nb)
        *reinterpret_cast<uint32_t*>(o + 8 * nb) =
            bf16_pair(context[nb][2 * half] * inverse, context[nb][2 * half + 1] * inverse);
    }
  });
}

// ---- FMA in f32, tiled through shared memory (either dtype, any head width up to 256) ----

constexpr int kTiledRows = 32;  // query rows per block, 8 per warp
constexpr int kTiledKeys = 32;  // keys per K/V tile, one per lane
constexpr int kWarpRows = kTiledRows / (kThreads / 32);

// A row of q or k in shared memory: the head's columns and zeros up to a multiple of 4, so that q
// and the weights are read 4 floats at a time (one broadcast load feeds 4 FMAs per row).
__host__ __device__ inline int padded_width(int hd) { return (hd + 3) & ~3; }

// Q [32][width], K [32][width + 1] (an odd stride: lane j reads row j without bank conflicts),
// V [32][hd], each warp's weights [8][32].
size_t tiled_shared_bytes(int hd) {
  const size_t width = padded_width(hd);
  return (kTiledRows * width + kTiledKeys * (width + 1) + kTiledKeys * size_t(hd) + kTiledRows * kTiledKeys) *
         sizeof(float);
}

// One block per (tile of 32 packed rows, head). Lane j scores key j of a tile for the warp's 8 rows;
// the weights go through shared memory, and each lane accumulates the context columns lane,
// lane + 32, ... (Columns of them).
template <class T, int Columns>
__global__ void __launch_bounds__(kThreads, 1)
    attention_tiled(const T* qkv, const int64_t* offsets, const int64_t* key_lengths, T* out, int64_t rows,
                    int64_t sequences, int64_t d, int hd, float scale) {
  extern __shared__ float4 tiled_shared[];  // float4: 16-byte aligned
  const int width = padded_width(hd);
  float* q_tile = reinterpret_cast<float*>(tiled_shared);
  float* k_tile = q_tile + kTiledRows * width;
  float* v_tile = k_tile + kTiledKeys * (width + 1);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  float* weights = v_tile + kTiledKeys * hd + warp * kWarpRows * kTiledKeys;  // this warp's [8][32]
  const int64_t head = blockIdx.y, row_stride = 3 * d;
  const int64_t tile_begin = int64_t(blockIdx.x) * kTiledRows;
  const int64_t tile_end = tile_begin + kTiledRows < rows ? tile_begin + kTiledRows : rows;
  const int64_t warp_begin = tile_begin + kWarpRows * warp;
  const float* q_rows = q_tile + kWarpRows * warp * width;

  for (int i = threadIdx.x; i < kTiledRows * width; i += kThreads) {  // seen after the first tile's barrier
    const int64_t row = tile_begin + i / width;
    const int c = i % width;
    q_tile[i] = row < tile_end && c < hd ? convert_to<float>(qkv[row * row_stride + head * hd + c]) : 0.0f;
  }

  for_each_tile_segment(offsets, sequences, tile_begin, tile_end, [&](int64_t s, int64_t begin, int64_t end) {
    const int64_t n = keys_of(offsets, key_lengths, s);
    if (n == 0) {
      for (int64_t i = threadIdx.x; i < (end - begin) * hd; i += kThreads)
        out[(begin + i / hd) * d + head * hd + i % hd] = convert_to<T>(NAN);
      return;
    }
    const T* keys = qkv + offsets[s] * row_stride + d + head * hd;
    const bool mine = warp_begin < end && warp_begin + kWarpRows > begin;
    float context[kWarpRows][Columns] = {};
    float top[kWarpRows], total[kWarpRows];  // total: this lane's keys; the warp adds them at the end
#pragma unroll
    for (int r = 0; r < kWarpRows; ++r) top[r] = -INFINITY, total[r] = 0.0f;
    for (int64_t first = 0; first < n; first += kTiledKeys) {
      __syncthreads();  // the previous tile's readers are done
      // Keys and values past the last, and columns past hd, are zeros: weighed 0, never NaN.
      for (int i = threadIdx.x; i < kTiledKeys * width; i += kThreads) {
        const int j = i / width, c = i % width;
        const bool valid = first + j < n && c < hd;
        const T* k = keys + (first + j) * row_stride + c;
        k_tile[j * (width + 1) + c] = valid ? convert_to<float>(k[0]) : 0.0f;
        if (c < hd) v_tile[j * hd + c] = valid ? convert_to<float>(k[d]) : 0.0f;
      }
      __syncthreads();
      if (!mine) continue;
      float weight[kWarpRows] = {};
      const float* k = k_tile + lane * (width + 1);
#pragma unroll 2
      for (int c = 0; c < width; c += 4) {
        const float k0 = k[c], k1 = k[c + 1], k2 = k[c + 2], k3 = k[c + 3];
#pragma unroll
        for (int r = 0; r < kWarpRows; ++r) {
          const float4 q = *reinterpret_cast<const float4*>(q_rows + r * width + c);
          weight[r] += q.x * k0 + q.y * k1 + q.z * k2 + q.w * k3;
        }
      }
      const bool valid = first + lane < n;  // lane 0's key always is: the maxima stay finite
#pragma unroll
      for (int r = 0; r < kWarpRows; ++r) {
        const float score = valid ? weight[r] * scale : -INFINITY;
        float next = fmaxf(top[r], score);
        for (int offset = 16; offset > 0; offset >>= 1) next = fmaxf(next, __shfl_xor_sync(kFull, next, offset));
        const float rescale = expf(top[r] - next), w = expf(score - next);
        top[r] = next;
        total[r] = total[r] * rescale + w;
        weights[r * kTiledKeys + lane] = w;
#pragma unroll
        for (int col = 0; col < Columns; ++col) context[r][col] *= rescale;
      }
      __syncwarp();
      const int64_t here = n - first < kTiledKeys ? n - first : kTiledKeys;
#pragma unroll 1
      for (int j = 0; j < here; j += 4) {  // up to 3 keys past the last: weight 0, values 0
        float v[4][Columns];
#pragma unroll
        for (int jj = 0; jj < 4; ++jj)
#pragma unroll
          for (int col = 0; col < Columns; ++col)
            v[jj][col] = lane + 32 * col < hd ? v_tile[(j + jj) * hd + lane + 32 * col] : 0.0f;
#pragma unroll
        for (int r = 0; r < kWarpRows; ++r) {
          const float4 w = *reinterpret_cast<const float4*>(weights + r * kTiledKeys + j);
#pragma unroll
          for (int col = 0; col < Columns; ++col)
            context[r][col] += w.x * v[0][col] + w.y * v[1][col] + w.z * v[2][col] + w.w * v[3][col];
        }
      }
    }
    if (!mine) return;
#pragma unroll
    for (int r = 0; r < kWarpRows; ++r) {
      float sum = total[r];
      for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(kFull, sum, offset);
      const int64_t row = warp_begin + r;
      if (row < begin || row >= end) continue;
      const float inverse = 1.0f / sum;
#pragma unroll
      for (int col = 0; col < Columns; ++col)
        if (lane + 32 * col < hd) out[row * d + head * hd + lane + 32 * col] = convert_to<T>(context[r][col] * inverse);
    }
  });
}

// Kernels asking for more than 48 KiB of shared memory must say so first.
template <class Kernel>
void allow_shared_bytes(Kernel kernel, size_t bytes, int device) {
  if (bytes > 48 * 1024)
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)),
          "cudaFuncSetAttribute(packed_attention)", device);
}

dim3 grid_of(int64_t rows, int64_t tile_rows, int64_t heads, const Tensor& qkv) {
  const int64_t tiles = (rows + tile_rows - 1) / tile_rows;
  if (tiles > INT32_MAX || heads > 65535)
    throw DeviceError("packed_attention: qkv " + qkv.meta().str() + " with " + std::to_string(heads) +
                      " heads is too large for the cuda kernel's grid");
  return dim3(static_cast<unsigned>(tiles), static_cast<unsigned>(heads));
}

template <int HD>
void launch_tensor_cores(const Tensor& qkv, const int64_t* offsets, const int64_t* key_lengths, Tensor& out,
                         int64_t sequences, int64_t heads, int device) {
  const int64_t rows = qkv.size(0), d = qkv.size(1) / 3;
  const size_t bytes = mma_shared_bytes<HD>();
  allow_shared_bytes(attention_tensor_cores<HD>, bytes, device);
  const float scale_log2 = 1.4426950408889634f / std::sqrt(static_cast<float>(HD));
  attention_tensor_cores<HD><<<grid_of(rows, kMmaRows, heads, qkv), kThreads, bytes, current_stream(device)>>>(
      static_cast<const __nv_bfloat16*>(qkv.raw_data()), offsets, key_lengths,
      static_cast<__nv_bfloat16*>(out.mutable_raw_data()), rows, sequences, d, scale_log2);
}

template <class T, int Columns>
void launch_tiled(const Tensor& qkv, const int64_t* offsets, const int64_t* key_lengths, Tensor& out,
                  int64_t sequences, int64_t heads, int device) {
  const int64_t rows = qkv.size(0), d = qkv.size(1) / 3, hd = d / heads;
  const size_t bytes = tiled_shared_bytes(static_cast<int>(hd));
  allow_shared_bytes(attention_tiled<T, Columns>, bytes, device);
  attention_tiled<T, Columns><<<grid_of(rows, kTiledRows, heads, qkv), kThreads, bytes, current_stream(device)>>>(
      static_cast<const T*>(qkv.raw_data()), offsets, key_lengths, static_cast<T*>(out.mutable_raw_data()), rows,
      sequences, d, static_cast<int>(hd), 1.0f / std::sqrt(static_cast<float>(hd)));
}

template <class T>
void launch_tiled_for_width(int64_t hd, const Tensor& qkv, const int64_t* offsets, const int64_t* key_lengths, Tensor& out,
                  int64_t sequences, int64_t heads, int device) {
  if (hd <= 32) return launch_tiled<T, 1>(qkv, offsets, key_lengths, out, sequences, heads, device);
  if (hd <= 64) return launch_tiled<T, 2>(qkv, offsets, key_lengths, out, sequences, heads, device);
  if (hd <= 128) return launch_tiled<T, 4>(qkv, offsets, key_lengths, out, sequences, heads, device);
  launch_tiled<T, 8>(qkv, offsets, key_lengths, out, sequences, heads, device);
}

constexpr int64_t kMaxHeadWidth = 256;

std::vector<Tensor> packed_attention_cuda(const OpCall& call) {
  const Tensor qkv = call.inputs[0].contiguous(), offsets = call.inputs[1].contiguous();
  const Tensor key_lengths = call.inputs.size() > 2 ? call.inputs[2].contiguous() : Tensor();
  const PackedAttentionDims dims = packed_attention_dims(qkv.shape(), call.attrs);
  const int64_t rows = dims.rows, d = dims.width, heads = dims.heads, hd = dims.head_width;
  if (hd > kMaxHeadWidth)
    throw DeviceError("packed_attention: the cuda kernels take heads up to " + std::to_string(kMaxHeadWidth) +
                      " columns wide, qkv " + qkv.meta().str() + " with " + std::to_string(heads) + " heads has " +
                      std::to_string(hd));
  const int device = qkv.device().index;
  DeviceGuard on(device);
  Tensor out = Tensor::empty({rows, d}, qkv.dtype(), qkv.device());
  if (rows == 0) return {out};
  const int64_t sequences = offsets.numel() - 1;
  const int64_t* starts = device_read<int64_t>(offsets);
  const int64_t* keys = key_lengths.defined() ? device_read<int64_t>(key_lengths) : nullptr;
  const bool bf16 = qkv.dtype() == DType::bf16;
  switch (attention_kernel_for(bf16, hd, reinterpret_cast<uintptr_t>(qkv.raw_data()))) {
    case AttentionKernel::tensor_cores_64:
      launch_tensor_cores<64>(qkv, starts, keys, out, sequences, heads, device);
      break;
    case AttentionKernel::tensor_cores_128:
      launch_tensor_cores<128>(qkv, starts, keys, out, sequences, heads, device);
      break;
    case AttentionKernel::tiled_fma:
      if (bf16)
        launch_tiled_for_width<__nv_bfloat16>(hd, qkv, starts, keys, out, sequences, heads, device);
      else
        launch_tiled_for_width<float>(hd, qkv, starts, keys, out, sequences, heads, device);
      break;
  }
  check_launch("packed_attention", device);
  return {out};
}

const OpRegistrar packed_attention_kernel{"packed_attention", DeviceType::cuda, packed_attention_cuda};

}  // namespace

}  // namespace troupe::cuda
