#pragma once
// Cheaper element access for the memory-bound kernels (elementwise, epilogues, normalisation):
// 128-bit loads and stores of contiguous data and 32-bit index math where a tensor fits.
//
//   if (vectorisable(n, {in, out})) ... Pack<T> x = Pack<T>::load(in + p * Pack<T>::kSize) ...
//   if (fits_int32(layout, n)) kernel<<<...>>>(Strided32<2>(layout), ...);  // else Strided<2>
//
// 64-bit division is a long software sequence on the GPU and 32-bit a short one; one 16-byte
// load moves 4 floats or 8 bf16 where a scalar load moves one.
#include <climits>
#include <cstdint>
#include <initializer_list>

#include "devices/cuda/kernel_util.cuh"

namespace troupe::cuda {

// The 32-bit twin of Strided, for layouts whose indices and offsets all stay below 2^31.
template <int N>
struct Strided32 {
  int rank = 0;
  uint32_t size[kMaxDims] = {};
  int32_t stride[N][kMaxDims] = {};

  Strided32() = default;
  explicit Strided32(const Strided<N>& wide) : rank(wide.rank) {
    for (int d = 0; d < rank; ++d) {
      size[d] = static_cast<uint32_t>(wide.size[d]);
      for (int k = 0; k < N; ++k) stride[k][d] = static_cast<int32_t>(wide.stride[k][d]);
    }
  }

  __device__ __forceinline__ void offsets(uint32_t i, int32_t (&off)[N]) const {
    for (int k = 0; k < N; ++k) off[k] = 0;
    for (int d = rank - 1; d >= 0; --d) {
      const uint32_t q = i / size[d];
      const int32_t index = static_cast<int32_t>(i - q * size[d]);
      i = q;
      for (int k = 0; k < N; ++k) off[k] += index * stride[k][d];
    }
  }
};

// True when the n indices and every operand's furthest offset (strides may be negative) fit int32.
template <int N>
bool fits_int32(const Strided<N>& layout, int64_t n) {
  if (n > INT32_MAX) return false;
  for (int k = 0; k < N; ++k) {
    int64_t reach = 0;
    for (int d = 0; d < layout.rank; ++d) {
      const int64_t s = layout.stride[k][d] < 0 ? -layout.stride[k][d] : layout.stride[k][d];
      if (s > INT32_MAX) return false;
      reach += (layout.size[d] - 1) * s;
    }
    if (reach > INT32_MAX) return false;
  }
  return true;
}

// 16 bytes of T (4 floats, 8 bf16 or f16, 2 doubles), loaded and stored by one instruction.
template <class T>
struct alignas(16) Pack {
  static constexpr int kSize = 16 / sizeof(T);
  T v[kSize];
  __device__ __forceinline__ static Pack load(const T* p) { return *reinterpret_cast<const Pack*>(p); }
  __device__ __forceinline__ void store(T* p) const { *reinterpret_cast<Pack*>(p) = *this; }
};

// Whole Packs can be read from each pointer (16-byte aligned: a view at an odd offset is not) and
// the n elements fit 32-bit indices.
inline bool vectorisable(int64_t n, std::initializer_list<const void*> pointers) {
  if (n > INT32_MAX) return false;
  for (const void* p : pointers)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  return true;
}

// Blocks for a grid-stride loop over the whole Packs of n elements (n > 0).
template <class T>
unsigned blocks_for_packs(int64_t n) {
  return blocks_for(n / Pack<T>::kSize > 0 ? n / Pack<T>::kSize : 1);
}

}  // namespace troupe::cuda
