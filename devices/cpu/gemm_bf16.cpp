#include "devices/cpu/gemm_bf16.h"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <dnnl.hpp>
#include <unordered_map>
#include <vector>

#include <immintrin.h>

#include "devices/cpu/activations.h"
#include "devices/cpu/gemm_packed.h"
#include "devices/cpu/isa.h"
#include "devices/cpu/parallel_ranges.h"
#include "devices/error.h"
#include "devices/threads.h"

namespace troupe {

using dnnl::memory;
using Dt = memory::data_type;

struct PackedWeightBf16::Blocks {
  memory::desc desc;  // the weights [k, n] as the matmul reads them
  void* data = nullptr;
  // Where oneDNN has no bf16 (emulated()): the weights rounded to bf16 but kept in f32, packed for
  // Troupe's own f32 tiles (gemm_packed.h), which beat oneDNN's f32 matmul there.
  std::unique_ptr<PackedWeight> f32;
};

namespace {

dnnl::engine& engine() {
  static dnnl::engine instance(dnnl::engine::kind::cpu, 0);
  return instance;
}

void check_bf16_sizes(const char* op, int64_t n, int64_t k, int64_t ld, const char* ld_name) {
  if (n <= 0 || k <= 0 || ld < k)
    throw ValueError(std::string(op) + ": bad sizes n=" + std::to_string(n) + " k=" + std::to_string(k) + " " +
                     ld_name + "=" + std::to_string(ld));
}

// The matmul C[m, n] (row stride ldc) = epilogue(A[m, k] @ weights), the weights in `weights`, A
// in bf16.
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

// oneDNN computes in bf16 only on CPUs with AVX-512 (avx512_core; AVX512-BF16 and AMX make it
// fast). Elsewhere (AVX2: AMD Zen 3, older Intel) the product is emulated: operands rounded to
// bf16 values kept in f32, the packed f32 product, so the results are those of bf16 operands
// with f32 accumulation all the same, at f32's speed plus the rounding.
bool emulated() {
  static const bool no_bf16 = [] {
    try {
      product_desc(1, 16, 16, 16, memory::desc({16, 16}, Dt::bf16, memory::format_tag::any), {});
      return false;
    } catch (const dnnl::error&) {
      return true;
    }
  }();
  return no_bf16;
}


// One row rounded 16 at a time by the CPU's own conversion (AVX512-BF16), the same rounding.
[[gnu::target("avx512f,avx512bf16")]] void round_row_avx512_bf16(int64_t k, const float* row, uint16_t* dst) {
  int64_t j = 0;
  for (; j + 16 <= k; j += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + j), (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(row + j)));
  for (; j < k; ++j) dst[j] = BFloat16(row[j]).bits;
}

// Rounded to nearest even as BFloat16 rounds (NaN stays NaN).
void round_rows(int64_t m, int64_t k, const float* a, int64_t lda, uint16_t* out) {
  const bool converts = cpu_isa() >= CpuIsa::avx512_bf16;
  parallel_ranges(m, std::max<int64_t>(1, (int64_t{1} << 20) / k), 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* row = a + r * lda;
      uint16_t* dst = out + r * k;
      if (converts) {
        round_row_avx512_bf16(k, row, dst);
        continue;
      }
      for (int64_t j = 0; j < k; ++j) dst[j] = BFloat16(row[j]).bits;
    }
  });
}

// The same rounding, the values kept in f32 (emulated()), rows k apart in out; a may be out.
void round_in_f32(int64_t m, int64_t k, const float* a, int64_t lda, float* out) {
  parallel_ranges(m, std::max<int64_t>(1, (int64_t{1} << 20) / k), 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      for (int64_t j = 0; j < k; ++j) out[r * k + j] = float(BFloat16(a[r * lda + j]));
  });
}

}  // namespace

PackedWeightBf16::PackedWeightBf16(const float* w, int64_t n, int64_t k, int64_t ldw)
    : n_(n), k_(k), blocks_(std::make_unique<Blocks>()) {
  check_bf16_sizes("PackedWeightBf16", n, k, ldw, "ldw");
  if (emulated()) {
    std::vector<float> rounded(static_cast<size_t>(n * k));
    round_in_f32(n, k, w, ldw, rounded.data());
    blocks_->f32 = std::make_unique<PackedWeight>(rounded.data(), n, k, k);
    return;
  }
  // The layout the matmul picks for a typical row count; it is the same for every m (checked on
  // AMX and AVX512 CPUs), and gemm_bf16 names it explicitly.
  blocks_->desc = product_desc(256, n, k, n, memory::desc({k, n}, Dt::bf16, memory::format_tag::any), {}).weights_desc();
  blocks_->data = std::aligned_alloc(64, (blocks_->desc.get_size() + 63) / 64 * 64);
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

size_t PackedWeightBf16::nbytes() const { return blocks_->f32 ? blocks_->f32->nbytes() : blocks_->desc.get_size(); }

const char* gemm_bf16_path() {
  return emulated() ? "f32 products on bf16-rounded operands, no faster than f32 (oneDNN has no bf16 on this CPU: no AVX-512)"
                    : "oneDNN bf16 matmul (AMX or AVX512-BF16 make it fast; plain AVX-512 converts)";
}

namespace {

void check_product(int64_t m, int64_t lda, const PackedWeightBf16& w, int64_t ldc) {
  check_bf16_sizes("gemm_bf16", w.n(), w.k(), lda, "lda");
  if (m < 0 || ldc < w.n())
    throw ValueError("gemm_bf16: bad sizes m=" + std::to_string(m) + " n=" + std::to_string(w.n()) +
                     " ldc=" + std::to_string(ldc));
}

// A's rows already in bf16, lda apart.
void product(int64_t m, const uint16_t* a, int64_t lda, const PackedWeightBf16& w, const GemmBf16Epilogue& epilogue,
             void* c, int64_t ldc) {
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

// emulated(): the product in f32 on bf16 values by the packed f32 tiles (which add the bias), then
// the rest of the epilogue in one pass over each row (activation, rounded to bf16 when asked for).
void emulated_product(int64_t m, const float* a, int64_t lda, const PackedWeightBf16& w,
                      const GemmBf16Epilogue& epilogue, void* c, int64_t ldc) {
  const int64_t n = w.n();
  thread_local std::vector<float> f32_rows;
  if (epilogue.bf16_out) f32_rows.resize(static_cast<size_t>(m * n));
  float* out = epilogue.bf16_out ? f32_rows.data() : static_cast<float*>(c);
  const int64_t ldo = epilogue.bf16_out ? n : ldc;
  gemm_packed_f32(m, a, lda, *w.blocks().f32, 0.0f, out, ldo, epilogue.bias);
  if (epilogue.activation == GemmActivation::none && !epilogue.bf16_out) return;
  parallel_ranges(m, std::max<int64_t>(1, (int64_t{1} << 18) / n), 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* row = out + r * ldo;
      if (epilogue.activation == GemmActivation::relu)
        for (int64_t j = 0; j < n; ++j) row[j] = std::max(row[j], 0.0f);
      else if (epilogue.activation == GemmActivation::gelu)
        gelu_f32(row, row, n);
      if (epilogue.bf16_out) {
        auto* dst = reinterpret_cast<uint16_t*>(static_cast<BFloat16*>(c) + r * ldc);
        for (int64_t j = 0; j < n; ++j) dst[j] = BFloat16(row[j]).bits;
      }
    }
  });
}

}  // namespace

void gemm_bf16(int64_t m, const float* a, int64_t lda, const PackedWeightBf16& w, const GemmBf16Epilogue& epilogue,
               void* c, int64_t ldc) {
  check_product(m, lda, w, ldc);
  if (m == 0) return;
  if (w.blocks().f32) {
    thread_local std::vector<float> values;
    values.resize(static_cast<size_t>(m * w.k()));
    round_in_f32(m, w.k(), a, lda, values.data());
    return emulated_product(m, values.data(), w.k(), w, epilogue, c, ldc);
  }
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
  if (w.blocks().f32) {
    thread_local std::vector<float> values;
    values.resize(static_cast<size_t>(m * w.k()));
    const int64_t k = w.k();
    const auto* bits = reinterpret_cast<const uint16_t*>(a);
    float* to = values.data();
    parallel_ranges(m, std::max<int64_t>(1, (int64_t{1} << 20) / k), 1, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r)
        for (int64_t j = 0; j < k; ++j) to[r * k + j] = float(std::bit_cast<BFloat16>(bits[r * lda + j]));
    });
    return emulated_product(m, values.data(), w.k(), w, epilogue, c, ldc);
  }
  product(m, reinterpret_cast<const uint16_t*>(a), lda, w, epilogue, c, ldc);
}

namespace {

WeightCache<PackedWeightBf16>& bf16_cache() {
  static auto* instance = new WeightCache<PackedWeightBf16>;  // never destroyed: tasks may still run at exit
  return *instance;
}

}  // namespace

std::shared_ptr<const PackedWeightBf16> packed_weight_bf16(const Tensor& w) {
  if (!w.defined()) throw ValueError("packed_weight_bf16: the weight is undefined");
  if (w.dtype() != DType::f32 && w.dtype() != DType::bf16)
    throw DTypeError("packed_weight_bf16: expects an f32 or bf16 weight, got " + w.meta().str());
  if (w.dim() != 2) throw ShapeError("packed_weight_bf16: expects a 2-d weight [n, k], got " + w.meta().str());
  if (!w.device().is_cpu()) throw DeviceError("packed_weight_bf16: expects a host weight, got " + w.meta().str());
  const int64_t n = w.size(0), k = w.size(1);
  return bf16_cache().get(w, PackWhen::first_use, static_cast<size_t>(n * k) * 2, [&] {
    // A bf16 weight widens exactly to f32, and the packing rounds it back to the same bits.
    const Tensor wide = w.to(DType::f32);
    const Tensor rows = wide.strides()[1] == 1 && (n <= 1 || wide.strides()[0] >= k) ? wide : wide.contiguous();
    return std::make_shared<const PackedWeightBf16>(rows.data<float>(), n, k, n <= 1 ? k : rows.strides()[0]);
  });
}

size_t packed_weight_bf16_cache_bytes() { return bf16_cache().bytes(); }

}  // namespace troupe
