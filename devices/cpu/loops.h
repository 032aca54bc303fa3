#pragma once
// Loops shared by the CPU elementwise, reduction and normalisation kernels: walking strided
// operands over one output shape in row-major order (a broadcast operand has stride 0 there), and
// sums and maxima of contiguous rows written so that the compiler vectorises them.
//
//   Strides sa = broadcast_strides(a, out_shape), sb = broadcast_strides(b, out_shape);
//   int64_t k = 0;   // the output is contiguous: runs arrive in its order
//   for_each_run<2>(out_shape, {sa, sb}, [&](const auto& at, const auto& step, int64_t n) {
//     for (int64_t i = 0; i < n; ++i, ++k) out[k] = pa[at[0] + i * step[0]] + pb[at[1] + i * step[1]];
//   });
//   float total = sum_row<float>(row, n), top = fold_row<float>(row, n, NanMax{});
#include <array>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "devices/tensor.h"

namespace troupe {

// The type arithmetic on T happens in: float for the 16-bit floats, T itself otherwise.
template <class T>
using compute_t = std::conditional_t<std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>, float, T>;

// t's strides seen from out_shape (which t broadcasts to): 0 for new and size-1-expanded dims.
inline Strides broadcast_strides(const Tensor& t, const Shape& out_shape) {
  Strides out(out_shape.size(), 0);
  const size_t lead = out_shape.size() - t.shape().size();
  for (size_t i = 0; i < t.shape().size(); ++i)
    if (t.shape()[i] != 1) out[lead + i] = t.strides()[i];
  return out;
}

// Calls run(at, step, n) for each innermost run of the row-major walk over shape: operand k's
// elements are at[k] + i * step[k] for i < n. Size-1 dims are dropped and dims that every operand
// walks with one stride are merged, so contiguous operands give one long run with step 1.
template <size_t N, class Run>
void for_each_run(const Shape& shape, const std::array<Strides, N>& strides, Run&& run) {
  std::vector<int64_t> sizes;                   // outermost first
  std::vector<std::array<int64_t, N>> steps;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 0) return;
    if (shape[d] == 1) continue;
    std::array<int64_t, N> s;
    for (size_t k = 0; k < N; ++k) s[k] = strides[k][d];
    bool merges = !sizes.empty();
    for (size_t k = 0; k < N && merges; ++k) merges = steps.back()[k] == s[k] * shape[d];
    if (merges) {
      sizes.back() *= shape[d];
      steps.back() = s;
    } else {
      sizes.push_back(shape[d]);
      steps.push_back(s);
    }
  }
  std::array<int64_t, N> at{};
  if (sizes.empty()) {  // a single element
    run(at, at, int64_t{1});
    return;
  }
  const size_t rank = sizes.size();
  const int64_t inner = sizes[rank - 1];
  const std::array<int64_t, N> inner_step = steps[rank - 1];
  std::vector<int64_t> index(rank, 0);
  while (true) {
    run(at, inner_step, inner);
    size_t d = rank - 1;  // odometer over the outer dims
    while (true) {
      if (d == 0) return;
      --d;
      for (size_t k = 0; k < N; ++k) at[k] += steps[d][k];
      if (++index[d] < sizes[d]) break;
      for (size_t k = 0; k < N; ++k) at[k] -= steps[d][k] * sizes[d];
      index[d] = 0;
    }
  }
}

// Sum of x[0..n) in Acc, over 16 independent lanes (vectorised, and more accurate than one
// running sum).
template <class Acc, class T>
Acc sum_row(const T* x, int64_t n) {
  constexpr int64_t kLanes = 16;
  Acc lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t j = 0; j < kLanes; ++j) lanes[j] += static_cast<Acc>(x[i + j]);
  Acc total = 0;
  for (; i < n; ++i) total += static_cast<Acc>(x[i]);
  for (int64_t j = 0; j < kLanes; ++j) total += lanes[j];
  return total;
}

// The larger (smaller) of a and b, NaN if either is NaN (PyTorch's max and maximum). Function
// objects so that they inline into fold_row, and `|`, not `||`: no branch, so loops vectorise.
struct NanMax {
  template <class T> T operator()(T a, T b) const { return ((b > a) | (b != b)) ? b : a; }
};
struct NanMin {
  template <class T> T operator()(T a, T b) const { return ((b < a) | (b != b)) ? b : a; }
};

// pick(best, x[i]) folded over x[0..n), n >= 1, in Acc over 64 lanes (vectorised):
// fold_row<float>(x, n, NanMax{}) is the maximum of a row. 64, not 16: GCC unrolls a 16-trip
// lane loop completely and then cannot vectorise pick's select. pick must be a selection (it
// returns one of its arguments, as NanMax and NanMin do): the last block overlaps the one before
// instead of leaving a scalar tail, and the lanes fold in halves, so elements meet in another
// order than left to right.
template <class Acc, class T, class Pick>
Acc fold_row(const T* x, int64_t n, Pick pick) {
  constexpr int64_t kLanes = 64;
  if (n < kLanes) {
    Acc best = static_cast<Acc>(x[0]);
    for (int64_t i = 1; i < n; ++i) best = pick(best, static_cast<Acc>(x[i]));
    return best;
  }
  Acc lanes[kLanes];
  for (int64_t j = 0; j < kLanes; ++j) lanes[j] = static_cast<Acc>(x[j]);
  int64_t i = kLanes;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t j = 0; j < kLanes; ++j) lanes[j] = pick(lanes[j], static_cast<Acc>(x[i + j]));
  if (i < n)
    for (int64_t j = 0; j < kLanes; ++j) lanes[j] = pick(lanes[j], static_cast<Acc>(x[n - kLanes + j]));
  for (int64_t half = kLanes / 2; half >= 1; half /= 2)
    for (int64_t j = 0; j < half; ++j) lanes[j] = pick(lanes[j], lanes[j + half]);
  return lanes[0];
}

}  // namespace troupe
