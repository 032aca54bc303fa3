#pragma once
// Products in bf16 with f32 accumulation, for inference: C = bf16(A) @ bf16(W)^T + bias, W [n, k]
// laid out as linear's weights. The weight is rounded to bf16 once and stored in the blocked
// layout oneDNN's matmul reads (AMX tiles on CPUs with AMX-BF16, AVX512-BF16 dot products
// below that); the rows of A are rounded on each call, which costs m*k conversions against the
// product's 2*m*n*k operations. Results differ from f32 by bf16's rounding of the operands
// (8 bits of mantissa), not by the accumulation. On CPUs without AVX-512, where oneDNN has no
// bf16, the same values come from the packed f32 product of the rounded operands (gemm_packed.h),
// no faster than f32.
//
//   std::shared_ptr<const PackedWeightBf16> w16 = packed_weight_bf16(w);   // cached per weight tensor
//   gemm_bf16(m, a, k, *w16, {.bias = b}, c, n);                             // f32 in, f32 out
//   gemm_bf16(m, a, k, *w16, {.bias = b, .activation = GemmActivation::gelu, .bf16_out = true}, h, n);
#include <cstdint>
#include <memory>

#include "devices/cpu/weight_cache.h"
#include "devices/tensor.h"

namespace troupe {

class PackedWeightBf16 {
 public:
  // W [n, k] f32 row-major with leading dimension ldw >= k. ValueError for bad sizes.
  PackedWeightBf16(const float* w, int64_t n, int64_t k, int64_t ldw);
  ~PackedWeightBf16();
  PackedWeightBf16(const PackedWeightBf16&) = delete;
  PackedWeightBf16& operator=(const PackedWeightBf16&) = delete;

  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  size_t nbytes() const;
  struct Blocks;  // oneDNN's memory descriptor and bytes (gemm_bf16.cpp)
  const Blocks& blocks() const { return *blocks_; }

 private:
  int64_t n_, k_;
  std::unique_ptr<Blocks> blocks_;
};

// What the product's epilogue does to each output element before it is stored (fused into the
// same primitive: no extra pass): + bias[n], then the activation, then the store, in f32 or
// rounded to bf16 (for a next GEMM that reads bf16 anyway).
enum class GemmActivation { none, relu, gelu };  // gelu: the erf form
struct GemmBf16Epilogue {
  const float* bias = nullptr;
  GemmActivation activation = GemmActivation::none;
  bool bf16_out = false;  // c holds BFloat16, else float
};

// Row-major C[m, n] = epilogue(A[m, k] @ W^T) with A's rows rounded to bf16 on the way (or given
// in bf16), accumulated in f32. Uses the calling thread's intra-op thread budget. ValueError for
// bad sizes.
void gemm_bf16(int64_t m, const float* a, int64_t lda, const PackedWeightBf16& w, const GemmBf16Epilogue& epilogue,
               void* c, int64_t ldc);
void gemm_bf16(int64_t m, const BFloat16* a, int64_t lda, const PackedWeightBf16& w, const GemmBf16Epilogue& epilogue,
               void* c, int64_t ldc);

// The bf16 form of a 2-d f32 or bf16 weight [n, k] (any strides), made on first use and kept while the
// weight's bytes live and are unchanged (weight_cache.h). DTypeError/ShapeError for other weights.
std::shared_ptr<const PackedWeightBf16> packed_weight_bf16(const Tensor& w);
size_t packed_weight_bf16_cache_bytes();
// How bf16 products run on this CPU, for `troupe info`: oneDNN's bf16 matmul, or (no AVX-512) an
// f32 matmul on the rounded operands, with the same values.
const char* gemm_bf16_path();

}  // namespace troupe
