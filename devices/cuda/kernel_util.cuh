#pragma once
// Device-side helpers shared by the CUDA kernels: element types, conversions, strided indexing,
// block reductions and launch shapes.
//
//   dispatch_device(x.dtype(), [&](auto tag) { using T = typename decltype(tag)::type; ... });
//   Strided<2> layout;   // output index -> offsets into two broadcast inputs
//   if (!make_strided<2>(out.shape(), {&a.strides(), &b.strides()}, layout)) ...
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <array>
#include <type_traits>

#include "devices/cuda/cuda_util.h"
#include "devices/tensor.h"

namespace troupe::cuda {

// Calls fn(TypeTag<T>{}) with T the device type of t (__half and __nv_bfloat16 for the 16-bit floats).
template <class Fn>
decltype(auto) dispatch_device(DType t, Fn&& fn) {
  switch (t) {
    case DType::f32: return fn(TypeTag<float>{});
    case DType::f64: return fn(TypeTag<double>{});
    case DType::f16: return fn(TypeTag<__half>{});
    case DType::bf16: return fn(TypeTag<__nv_bfloat16>{});
    case DType::i32: return fn(TypeTag<int32_t>{});
    case DType::i64: return fn(TypeTag<int64_t>{});
    case DType::u8: return fn(TypeTag<uint8_t>{});
    case DType::boolean: return fn(TypeTag<bool>{});
  }
  return fn(TypeTag<float>{});  // unreachable: every enumerator is handled above
}

// Floating types only; DeviceError naming the op otherwise.
template <class Fn>
decltype(auto) dispatch_floating(const char* op, DType t, Fn&& fn) {
  switch (t) {
    case DType::f32: return fn(TypeTag<float>{});
    case DType::f64: return fn(TypeTag<double>{});
    case DType::f16: return fn(TypeTag<__half>{});
    case DType::bf16: return fn(TypeTag<__nv_bfloat16>{});
    default: throw DeviceError(std::string(op) + ": no cuda kernel for " + name(t));
  }
}

template <class T>
constexpr bool is_half_v = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;

// The type arithmetic happens in: 16-bit floats compute in float, bool in int.
template <class T> struct AccOf { using type = T; };
template <> struct AccOf<__half> { using type = float; };
template <> struct AccOf<__nv_bfloat16> { using type = float; };
template <> struct AccOf<bool> { using type = int; };
template <class T> using Acc = typename AccOf<T>::type;

// The device twin of troupe::convert: the same rules, so values match the host's bit for bit.
template <class To, class From>
__device__ __forceinline__ To convert_to(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<From, __half>) {
    return convert_to<To>(__half2float(v));
  } else if constexpr (std::is_same_v<From, __nv_bfloat16>) {
    return convert_to<To>(__bfloat162float(v));
  } else if constexpr (std::is_same_v<To, bool>) {
    return static_cast<float>(v) != 0.0f;
  } else if constexpr (std::is_same_v<To, __half>) {
    return __float2half_rn(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, __nv_bfloat16>) {
    return __float2bfloat16_rn(static_cast<float>(v));
  } else {
    return static_cast<To>(v);
  }
}

// Single precision math for float, double for double.
template <class A>
__device__ __forceinline__ A exp_of(A x) {
  if constexpr (std::is_same_v<A, float>) return expf(x); else return ::exp(x);
}
template <class A>
__device__ __forceinline__ A log_of(A x) {
  if constexpr (std::is_same_v<A, float>) return logf(x); else return ::log(x);
}
template <class A>
__device__ __forceinline__ A sqrt_of(A x) {
  if constexpr (std::is_same_v<A, float>) return sqrtf(x); else return ::sqrt(x);
}
template <class A>
__device__ __forceinline__ A erf_of(A x) {
  if constexpr (std::is_same_v<A, float>) return erff(x); else return ::erf(x);
}
template <class A>
__device__ __forceinline__ A tanh_of(A x) {
  if constexpr (std::is_same_v<A, float>) return tanhf(x); else return ::tanh(x);
}
template <class A>
__device__ __forceinline__ A rsqrt_of(A x) {
  if constexpr (std::is_same_v<A, float>) return rsqrtf(x); else return ::rsqrt(x);
}

constexpr int kMaxDims = 8;

// Maps a row-major index over `size` to element offsets into N operands with their own strides.
template <int N>
struct Strided {
  int rank = 0;
  int64_t size[kMaxDims] = {};
  int64_t stride[N][kMaxDims] = {};

  __device__ __forceinline__ void offsets(int64_t i, int64_t (&off)[N]) const {
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int d = rank - 1; d >= 0; --d) {
      const int64_t index = i % size[d];
      i /= size[d];
      for (int k = 0; k < N; ++k) off[k] += index * stride[k][d];
    }
  }
};

// Fills layout for shape walked with each operand's strides, dropping size-1 dims and merging
// dims every operand walks contiguously; false when more than kMaxDims dims remain.
template <int N>
bool make_strided(const Shape& shape, const std::array<const Strides*, N>& strides, Strided<N>& layout) {
  layout.rank = 0;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    const int r = layout.rank;
    bool merges = r > 0;
    for (int k = 0; k < N && merges; ++k)
      merges = layout.stride[k][r - 1] == (*strides[k])[d] * shape[d];
    if (merges) {
      layout.size[r - 1] *= shape[d];
      for (int k = 0; k < N; ++k) layout.stride[k][r - 1] = (*strides[k])[d];
      continue;
    }
    if (r == kMaxDims) return false;
    layout.size[r] = shape[d];
    for (int k = 0; k < N; ++k) layout.stride[k][r] = (*strides[k])[d];
    layout.rank = r + 1;
  }
  return true;
}

constexpr int kThreads = 256;

// Blocks for a grid-stride loop over n elements (n > 0).
inline unsigned blocks_for(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, 1 << 16));
}

struct SumOp { template <class A> __device__ A operator()(A x, A y) const { return x + y; } };
struct MaxOp { template <class A> __device__ A operator()(A x, A y) const { return x > y ? x : y; } };

// The combined value of v over the block, returned to every thread. blockDim.x is a multiple of 32.
template <class A, class Op>
__device__ A block_reduce(A v, Op op) {
  __shared__ A partial[32];
  for (int offset = 16; offset > 0; offset >>= 1) v = op(v, static_cast<A>(__shfl_xor_sync(0xffffffffu, v, offset)));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) v = op(v, partial[w]);
    partial[0] = v;
  }
  __syncthreads();
  v = partial[0];
  __syncthreads();  // partial may be reused by the next reduction
  return v;
}

// Threads per block for one block per row of n elements: a multiple of 32, at most kThreads.
inline int row_threads(int64_t n) { return static_cast<int>(std::clamp<int64_t>((n + 31) / 32 * 32, 32, kThreads)); }

}  // namespace troupe::cuda
