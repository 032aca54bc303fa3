#include "net/collectives/reduce_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include <immintrin.h>

namespace troupe::net::collectives {

namespace {

// Plain loops over restrict-free contiguous arrays: GCC vectorises each one (out may alias a or b,
// elementwise, so aliasing is harmless).
template <class T, class Fn>
void apply(T* out, const T* a, const T* b, size_t n, Fn fn) {
  for (size_t i = 0; i < n; ++i) out[i] = fn(a[i], b[i]);
}

template <class T>
void reduce_typed(T* out, const T* a, const T* b, size_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg:
      if constexpr (std::is_same_v<T, bool>) apply(out, a, b, n, [](bool x, bool y) { return x || y; });
      else apply(out, a, b, n, [](T x, T y) { return static_cast<T>(x + y); });
      return;
    case ReduceOp::product:
      if constexpr (std::is_same_v<T, bool>) apply(out, a, b, n, [](bool x, bool y) { return x && y; });
      else apply(out, a, b, n, [](T x, T y) { return static_cast<T>(x * y); });
      return;
    case ReduceOp::max:
      // x != x is NaN: NaN wins, like torch.max.
      apply(out, a, b, n, [](T x, T y) { return (x != x || x > y) ? x : y; });
      return;
    case ReduceOp::min:
      apply(out, a, b, n, [](T x, T y) { return (x != x || x < y) ? x : y; });
      return;
    case ReduceOp::none:
      return;
  }
}

// f16/bf16: widen a block to f32, reduce there, round back.
template <class H>
void reduce_half(H* out, const H* a, const H* b, size_t n, ReduceOp op) {
  constexpr size_t kBlock = 512;
  float x[kBlock], y[kBlock];
  for (size_t start = 0; start < n; start += kBlock) {
    const size_t m = std::min(kBlock, n - start);
    for (size_t i = 0; i < m; ++i) {
      x[i] = static_cast<float>(a[start + i]);
      y[i] = static_cast<float>(b[start + i]);
    }
    reduce_typed(x, x, y, m, op);
    for (size_t i = 0; i < m; ++i) out[start + i] = H(x[i]);
  }
}

}  // namespace

bool reduction_supports(DType dtype, ReduceOp op) {
  switch (op) {
    case ReduceOp::max:
    case ReduceOp::min: return true;
    case ReduceOp::sum:
    case ReduceOp::product: return dtype != DType::boolean;
    case ReduceOp::avg: return is_floating(dtype);
    case ReduceOp::none: return false;
  }
  return false;
}

void reduce_buffers(void* out, const void* a, const void* b, size_t n, DType dtype, ReduceOp op) {
  dispatch(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>)
      reduce_half(static_cast<T*>(out), static_cast<const T*>(a), static_cast<const T*>(b), n, op);
    else
      reduce_typed(static_cast<T*>(out), static_cast<const T*>(a), static_cast<const T*>(b), n, op);
  });
}

void reduce_buffers_streaming(void* out, const void* a, const void* b, size_t n, DType dtype, ReduceOp op,
                              int divisor) {
  if (reinterpret_cast<uintptr_t>(out) % 64 == 0) {
    const size_t item = itemsize(dtype);
    // Reduced a block at a time into a buffer that stays in L1, then streamed out: the result's
    // lines are never read for ownership, a quarter of the memory traffic of a plain reduction.
    constexpr size_t kBlockBytes = 16 << 10;
    alignas(64) char block[kBlockBytes];
    const size_t per_block = kBlockBytes / item;
    auto* to = static_cast<char*>(out);
    const auto* x = static_cast<const char*>(a);
    const auto* y = static_cast<const char*>(b);
    for (size_t start = 0; start < n; start += per_block) {
      const size_t m = std::min(per_block, n - start), bytes = m * item, offset = start * item;
      reduce_buffers(block, x + offset, y + offset, m, dtype, op);
      if (divisor != 1) divide_buffer(block, m, dtype, divisor);
      const size_t whole = bytes / 64 * 64;
      // AVX2's 32-byte streaming stores (the build's baseline), two to a line.
      for (size_t i = 0; i < whole; i += 32)
        _mm256_stream_si256(reinterpret_cast<__m256i*>(to + offset + i),
                            _mm256_load_si256(reinterpret_cast<const __m256i*>(block + i)));
      std::copy(block + whole, block + bytes, to + offset + whole);
    }
    _mm_sfence();  // the streamed lines are visible before the result is handed on
    return;
  }
  reduce_buffers(out, a, b, n, dtype, op);
  if (divisor != 1) divide_buffer(out, n, dtype, divisor);
}

void divide_buffer(void* data, size_t n, DType dtype, int divisor) {
  dispatch(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      auto* p = static_cast<T*>(data);
      for (size_t i = 0; i < n; ++i) p[i] = T(static_cast<float>(p[i]) / static_cast<float>(divisor));
    } else if constexpr (std::is_floating_point_v<T>) {
      auto* p = static_cast<T*>(data);
      const T d = static_cast<T>(divisor);
      for (size_t i = 0; i < n; ++i) p[i] /= d;
    }
  });
}

}  // namespace troupe::net::collectives
