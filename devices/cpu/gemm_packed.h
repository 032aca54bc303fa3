#pragma once
// Weights packed once for many products with them: C = A @ W^T (+ beta * C), W [n, k] laid out
// as linear's and lstm's weights. The packed form cuts W into panels of 64 output columns, each
// stored k-major, so a product streams it in order and never re-packs it. oneDNN's sgemm re-packs
// B on every call: on the LSTM's 50-row recurrent products that was half the time.
//
//   PackedWeight packed(w.data<float>(), 4096, 1024, 1024);         // W [4096, 1024]
//   gemm_packed_f32(50, h, 1024, packed, 1.0f, gates, 4096);         // gates += h @ W^T
//   std::shared_ptr<const PackedWeight> same = packed_weight(w);     // cached per weight tensor
#include <cstdint>
#include <memory>

#include "devices/cpu/weight_cache.h"
#include "devices/tensor.h"

namespace troupe {

class PackedWeight {
 public:
  static constexpr int64_t kPanelWidth = 64;  // output columns per panel: four AVX-512 registers

  // W [n, k] row-major with leading dimension ldw >= k. ValueError for bad sizes.
  PackedWeight(const float* w, int64_t n, int64_t k, int64_t ldw);

  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  int64_t panels() const { return panels_; }
  // Panel p: k rows of kPanelWidth floats (columns past n are zero).
  const float* panel(int64_t p) const { return data_.data<float>() + p * k_ * kPanelWidth; }
  size_t nbytes() const { return data_.nbytes(); }

 private:
  int64_t n_, k_, panels_;
  Tensor data_;
};

// Row-major C[m, n] = A[m, k] @ W^T + beta * C (beta 0 never reads C). Uses the calling thread's
// intra-op thread budget. ValueError for bad sizes or leading dimensions.
void gemm_packed_f32(int64_t m, const float* a, int64_t lda, const PackedWeight& w, float beta, float* c,
                     int64_t ldc);

// The packed form of a 2-d f32 weight [n, k] (any strides), kept while the weight's bytes live
// and are unchanged (devices/cpu/weight_cache.h: keyed by storage, view and version; bounded by
// TROUPE_PACKED_CACHE_MB). DTypeError/ShapeError for other weights.
std::shared_ptr<const PackedWeight> packed_weight(const Tensor& w, PackWhen when = PackWhen::first_use);
size_t packed_weight_cache_bytes();
void clear_packed_weight_cache();

}  // namespace troupe
