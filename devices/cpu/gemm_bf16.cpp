#include "devices/cpu/gemm_bf16.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <dnnl.hpp>
#include <unordered_map>
#include <vector>

#if defined(__AVX512BF16__)
#include <immintrin.h>
#endif

#include "devices/cpu/gemm.h"
#include "devices/cpu/parallel_ranges.h"
#include "devices/error.h"
#include "devices/threads.h"

namespace troupe {

using dnnl::memory;
using Dt = memory::data_type;

// Native: the weights [k, n] blocked as oneDNN's bf16 matmul reads them. Without a bf16 matmul
// on this CPU: W [n, k] rounded to bf16 and held widened to f32, for the f32 GEMM.
struct PackedWeightBf16::Blocks {
  memory::desc desc;
  void* data = nullptr;
  size_t nbytes = 0;
};

namespace {

dnnl::engine& engine() {
  static dnnl::engine instance(dnnl::engine::kind::cpu, 0);
  return instance;
}

void check_sizes(const char* op, int64_t n, int64_t k, int64_t ld, const char* ld_name) {
  if (n <= 0 || k <= 0 || ld < k)
    throw ValueError(std::string(op) + ": bad sizes n=" + std::to_string(n) + " k=" + std::to_string(k) + " " +
                     ld_name + "=" + std::to_string(ld));
}

// The matmul C[m, n] (row stride ldc) = epilogue(A_bf16[m, k] @ weights), the weights in `weights`.
dnnl::matmul::primitive_desc product_desc(int64_t m, int64_t n, int64_t k, int64_t ldc, const memory::desc& weights,
                                          const GemmBf16Epilogue& epilogue) {
  const memory::desc a({m, k}, Dt::bf16, memory::format_tag::ab);
  const memory::desc c({m, n}, epilogue.bf16_out ? Dt::bf16 : Dt::f32, memory::dims{ldc, 1});
  dnnl::primitive_attr attr;
  if (epilogue.activation != GemmActivation::none) {
    dnnl::post_ops ops;
    ops.append_eltwise(1.0f,
                       epilogue.activation == GemmActivation::gelu ? dnnl::algorithm::eltwise_gelu_erf
                                                                   : dnnl::algorithm::eltwise_relu,
                       0.0f, 0.0f);
    attr.set_post_ops(ops);
  }
  if (!epilogue.bias) return {dnnl::matmul::desc(a, weights, c), attr, engine()};
  return {dnnl::matmul::desc(a, weights, memory::desc({1, n}, Dt::f32, memory::format_tag::ab), c), attr, engine()};
}

// Whether oneDNN has a bf16 matmul on this CPU (AVX512-BF16 or AMX; not on AVX2-only CPUs such
// as AMD Zen 3). Without it the products run as f32 GEMMs on operands rounded to bf16: the same
// values up to the order of the f32 accumulation, at f32 speed.
bool native_bf16() {
  static const bool native = [] {
    try {
      product_desc(16, 16, 16, 16, memory::desc({16, 16}, Dt::bf16, memory::format_tag::any), {});
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return native;
}

// Rounded to nearest even as BFloat16 rounds (NaN stays NaN), 16 at a time where the CPU converts.
void round_rows(int64_t m, int64_t k, const float* a, int64_t lda, uint16_t* out) {
  parallel_ranges(m, std::max<int64_t>(1, (int64_t{1} << 20) / k), 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* row = a + r * lda;
      uint16_t* dst = out + r * k;
      int64_t j = 0;
#if defined(__AVX512BF16__)
      for (; j + 16 <= k; j += 16)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + j), (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(row + j)));
#endif
      for (; j < k; ++j) dst[j] = BFloat16(row[j]).bits;
    }
  });
}

}  // namespace

PackedWeightBf16::PackedWeightBf16(const float* w, int64_t n, int64_t k, int64_t ldw)
    : n_(n), k_(k), blocks_(std::make_unique<Blocks>()) {
  check_sizes("PackedWeightBf16", n, k, ldw, "ldw");
  if (!native_bf16()) {
    blocks_->nbytes = static_cast<size_t>(n * k) * sizeof(float);
    auto* rounded = static_cast<float*>(std::aligned_alloc(64, (blocks_->nbytes + 63) / 64 * 64));
    if (!rounded) throw ValueError("PackedWeightBf16: out of memory for " + std::to_string(n) + "x" + std::to_string(k));
    for (int64_t r = 0; r < n; ++r)
      for (int64_t j = 0; j < k; ++j) rounded[r * k + j] = static_cast<float>(BFloat16(w[r * ldw + j]));
    blocks_->data = rounded;
    return;
  }
  // The layout the matmul picks for a typical row count; it is the same for every m (checked on
  // AMX and AVX512 CPUs), and gemm_bf16 names it explicitly.
  blocks_->desc =
      product_desc(256, n, k, n, memory::desc({k, n}, Dt::bf16, memory::format_tag::any), {}).weights_desc();
  blocks_->nbytes = blocks_->desc.get_size();
  blocks_->data = std::aligned_alloc(64, (blocks_->nbytes + 63) / 64 * 64);
  if (!blocks_->data) throw ValueError("PackedWeightBf16: out of memory for " + std::to_string(n) + "x" + std::to_string(k));
  // W^T [k, n] read in place (strides 1 and ldw), rounded and blocked by one reorder.
  memory source(memory::desc({k, n}, Dt::f32, memory::dims{1, ldw}), engine(), const_cast<float*>(w));
  memory target(blocks_->desc, engine(), blocks_->data);
  dnnl::stream stream(engine());
  apply_intra_op_threads();
  dnnl::reorder(source, target).execute(stream, source, target);
  stream.wait();
}

PackedWeightBf16::~PackedWeightBf16() { std::free(blocks_->data); }

size_t PackedWeightBf16::nbytes() const { return blocks_->nbytes; }

const char* gemm_bf16_path() {
  return native_bf16() ? "oneDNN bf16 matmul (AVX512-BF16 or AMX)"
                       : "f32 GEMM on bf16-rounded operands (this CPU has no bf16 matmul in oneDNN)";
}

namespace {

void check_product(int64_t m, int64_t lda, const PackedWeightBf16& w, int64_t ldc) {
  check_sizes("gemm_bf16", w.n(), w.k(), lda, "lda");
  if (m < 0 || ldc < w.n())
    throw ValueError("gemm_bf16: bad sizes m=" + std::to_string(m) + " n=" + std::to_string(w.n()) +
                     " ldc=" + std::to_string(ldc));
}

// The f32 form of product() for CPUs without a bf16 matmul: A widened, one f32 GEMM, then the epilogue.
void product_f32(int64_t m, const uint16_t* a, int64_t lda, const PackedWeightBf16& w,
                 const GemmBf16Epilogue& epilogue, void* c, int64_t ldc) {
  const int64_t n = w.n(), k = w.k();
  thread_local std::vector<float> wide, out;
  wide.resize(static_cast<size_t>(m * k));
  for (int64_t r = 0; r < m; ++r)
    for (int64_t j = 0; j < k; ++j) {
      const uint32_t bits = static_cast<uint32_t>(a[r * lda + j]) << 16;  // bf16 is f32's upper half
      std::memcpy(&wide[r * k + j], &bits, sizeof(float));
    }
  out.resize(static_cast<size_t>(m * n));
  gemm_f32(false, true, m, n, k, 1.0f, wide.data(), k, static_cast<const float*>(w.blocks().data), k, 0.0f, out.data(),
           n);
  for (int64_t r = 0; r < m; ++r)
    for (int64_t j = 0; j < n; ++j) {
      float v = out[r * n + j] + (epilogue.bias ? epilogue.bias[j] : 0.0f);
      if (epilogue.activation == GemmActivation::relu) v = std::max(v, 0.0f);
      if (epilogue.activation == GemmActivation::gelu)
        v = static_cast<float>(0.5 * v * std::erfc(-static_cast<double>(v) * 0.70710678118654752440));
      if (epilogue.bf16_out)
        static_cast<BFloat16*>(c)[r * ldc + j] = BFloat16(v);
      else
        static_cast<float*>(c)[r * ldc + j] = v;
    }
}

// A's rows already in bf16, lda apart.
void product(int64_t m, const uint16_t* a, int64_t lda, const PackedWeightBf16& w, const GemmBf16Epilogue& epilogue,
             void* c, int64_t ldc) {
  if (!native_bf16()) return product_f32(m, a, lda, w, epilogue, c, ldc);
  apply_intra_op_threads();
  // oneDNN's primitive cache makes the descriptor and primitive for a seen shape cheap (~10 us).
  const auto desc = product_desc(m, w.n(), w.k(), ldc, w.blocks().desc, epilogue);
  thread_local dnnl::stream stream(engine());
  memory src(memory::desc({m, w.k()}, Dt::bf16, memory::dims{lda, 1}), engine(), const_cast<uint16_t*>(a));
  memory weights(w.blocks().desc, engine(), w.blocks().data);
  memory dst(desc.dst_desc(), engine(), c);
  std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}};
  if (epilogue.bias)
    args.emplace(DNNL_ARG_BIAS, memory(desc.bias_desc(), engine(), const_cast<float*>(epilogue.bias)));
  dnnl::matmul(desc).execute(stream, args);
  stream.wait();
}

}  // namespace

void gemm_bf16(int64_t m, const float* a, int64_t lda, const PackedWeightBf16& w, const GemmBf16Epilogue& epilogue,
               void* c, int64_t ldc) {
  check_product(m, lda, w, ldc);
  if (m == 0) return;
  thread_local std::vector<uint16_t> rounded;
  rounded.resize(static_cast<size_t>(m * w.k()));
  round_rows(m, w.k(), a, lda, rounded.data());
  product(m, rounded.data(), w.k(), w, epilogue, c, ldc);
}

void gemm_bf16(int64_t m, const BFloat16* a, int64_t lda, const PackedWeightBf16& w, const GemmBf16Epilogue& epilogue,
               void* c, int64_t ldc) {
  check_product(m, lda, w, ldc);
  if (m == 0) return;
  static_assert(sizeof(BFloat16) == sizeof(uint16_t));
  product(m, reinterpret_cast<const uint16_t*>(a), lda, w, epilogue, c, ldc);
}

namespace {

WeightCache<PackedWeightBf16>& cache() {
  static auto* instance = new WeightCache<PackedWeightBf16>;  // never destroyed: tasks may still run at exit
  return *instance;
}

}  // namespace

std::shared_ptr<const PackedWeightBf16> packed_weight_bf16(const Tensor& w) {
  if (!w.defined()) throw ValueError("packed_weight_bf16: the weight is undefined");
  if (w.dtype() != DType::f32) throw DTypeError("packed_weight_bf16: expects an f32 weight, got " + w.meta().str());
  if (w.dim() != 2) throw ShapeError("packed_weight_bf16: expects a 2-d weight [n, k], got " + w.meta().str());
  if (!w.device().is_cpu()) throw ValueError("packed_weight_bf16: expects a host weight, got " + w.meta().str());
  const int64_t n = w.size(0), k = w.size(1);
  return cache().get(w, PackWhen::first_use, static_cast<size_t>(n * k) * 2, [&] {
    const Tensor rows = w.strides()[1] == 1 && (n <= 1 || w.strides()[0] >= k) ? w : w.contiguous();
    return std::make_shared<const PackedWeightBf16>(rows.data<float>(), n, k, n <= 1 ? k : rows.strides()[0]);
  });
}

size_t packed_weight_bf16_cache_bytes() { return cache().bytes(); }

}  // namespace troupe
