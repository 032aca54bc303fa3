#pragma once
// Weights packed once for many products with them: C = A @ W^T (+ beta * C), W [n, k] laid out
// as linear's and lstm's weights. The packed form cuts W into panels of output columns, each
// stored k-major, so a product streams it in order and never re-packs it. oneDNN's sgemm re-packs
// B on every call: on the LSTM's 50-row recurrent products that was half the time.
//
// The panel's width is the register tile's: 16 columns (two AVX2 registers) or 64 (four AVX-512
// registers), chosen by the CPU's instruction set (cpu/isa.h) when the weight is packed.
//
//   PackedWeight packed(w.data<float>(), 4096, 1024, 1024);         // W [4096, 1024]
//   gemm_packed_f32(50, h, 1024, packed, 1.0f, gates, 4096);         // gates += h @ W^T
//   std::shared_ptr<const PackedWeight> same = packed_weight(w);     // cached per weight tensor
#include <cstdint>
#include <memory>

#include "devices/cpu/isa.h"
#include "devices/cpu/weight_cache.h"
#include "devices/tensor.h"

namespace troupe {

class PackedWeight {
 public:
  // W [n, k] row-major with leading dimension ldw >= k, packed for the kernels of `isa` (which
  // this CPU must have). ValueError for bad sizes.
  PackedWeight(const float* w, int64_t n, int64_t k, int64_t ldw, CpuIsa isa = cpu_isa());
  // The same from W^T, wt [k, n] row-major with ldwt >= n (attention's values: C = P @ V packs V).
  static PackedWeight from_transposed(const float* wt, int64_t n, int64_t k, int64_t ldwt, CpuIsa isa = cpu_isa());

  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  CpuIsa isa() const { return isa_; }
  int64_t panel_width() const { return width_; }
  int64_t panels() const { return panels_; }
  // Panel p: k rows of panel_width() floats (columns past n are zero).
  const float* panel(int64_t p) const { return data_.data<float>() + p * k_ * width_; }
  size_t nbytes() const { return data_.nbytes(); }

 private:
  PackedWeight(int64_t n, int64_t k, CpuIsa isa);  // checks the sizes and the ISA; panels unset
  int64_t n_, k_;
  CpuIsa isa_;
  int64_t width_, panels_;
  Tensor data_;
};

// How gemm_packed_f32 reads A. Packed first (the default): a tile then reads its rows' next
// values from one line, where rows a power of two apart would share the same few L1 sets.
// In place: for products whose A rows are few and short (attention's per-head products, k = 64
// or a sequence's keys), where packing cost more than it saved.
enum class ARead { packed, in_place };

// Row-major C[m, n] = A[m, k] @ W^T + beta * C (+ bias[n] when given; beta 0 never reads C),
// with the kernels the weight was packed for: the bias is added as the tiles store, not in a pass
// of its own. Uses the calling thread's intra-op thread budget. ValueError for bad sizes or
// leading dimensions.
void gemm_packed_f32(int64_t m, const float* a, int64_t lda, const PackedWeight& w, float beta, float* c,
                     int64_t ldc, const float* bias = nullptr, ARead read = ARead::packed);

// "avx2 6x16" or "avx512 6x64": the register tile products use on this CPU, for `troupe info`.
const char* gemm_packed_kernel();

// The packed form of a 2-d f32 weight [n, k] (any strides), kept while the weight's bytes live
// and are unchanged (devices/cpu/weight_cache.h: keyed by storage, view and version; bounded by
// TROUPE_PACKED_CACHE_MB). DTypeError/ShapeError for other weights.
std::shared_ptr<const PackedWeight> packed_weight(const Tensor& w, PackWhen when = PackWhen::first_use);
size_t packed_weight_cache_bytes();
void clear_packed_weight_cache();

}  // namespace troupe
