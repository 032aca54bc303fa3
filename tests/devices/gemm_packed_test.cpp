#include <catch2/catch.hpp>
#include <cmath>
#include <random>

#include "devices/backend.h"
#include "devices/cpu/gemm_bf16.h"
#include "devices/cpu/gemm_packed.h"
#include "devices/error.h"
#include "devices/ops.h"
#include "devices/threads.h"
#include "support/close.h"
#include "support/skip.h"

using namespace troupe;

namespace {

std::vector<float> random_values(size_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(count);
  for (auto& x : v) x = dist(rng);
  return v;
}

// C[m, n] = A[m, k] @ W[n, k]^T + beta * C, in double.
std::vector<float> reference(int64_t m, int64_t n, int64_t k, const std::vector<float>& a, int64_t lda,
                             const std::vector<float>& w, int64_t ldw, float beta, const std::vector<float>& c,
                             int64_t ldc) {
  std::vector<float> out = c;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double sum = beta == 0.0f ? 0.0 : double(beta) * c[i * ldc + j];
      for (int64_t p = 0; p < k; ++p) sum += double(a[i * lda + p]) * w[j * ldw + p];
      out[i * ldc + j] = static_cast<float>(sum);
    }
  return out;
}

}  // namespace

TEST_CASE("packed GEMM matches the naive product for ragged sizes, strides and beta", "[gemm][packed]") {
  // m not a multiple of the 6-row tile, n not a multiple of the 64-column panel, k past one block.
  struct Case {
    int64_t m, n, k, lda, ldw, ldc;
    float beta;
  };
  for (const Case& cs : {Case{1, 1, 1, 1, 1, 1, 0.0f}, Case{5, 17, 9, 9, 9, 17, 1.0f}, Case{13, 64, 32, 40, 33, 70, 0.5f},
                         Case{50, 130, 70, 70, 70, 130, 1.0f}, Case{101, 65, 1030, 1030, 1031, 65, 0.0f},
                         Case{7, 200, 3, 5, 3, 256, -2.0f}}) {
    auto a = random_values(cs.m * cs.lda, 1), w = random_values(cs.n * cs.ldw, 2), c = random_values(cs.m * cs.ldc, 3);
    const auto expected = reference(cs.m, cs.n, cs.k, a, cs.lda, w, cs.ldw, cs.beta, c, cs.ldc);
    PackedWeight packed(w.data(), cs.n, cs.k, cs.ldw);
    CHECK(packed.n() == cs.n);
    CHECK(packed.k() == cs.k);
    CHECK(packed.panels() == (cs.n + packed.panel_width() - 1) / packed.panel_width());
    gemm_packed_f32(cs.m, a.data(), cs.lda, packed, cs.beta, c.data(), cs.ldc);
    INFO("m=" << cs.m << " n=" << cs.n << " k=" << cs.k);
    CHECK(max_abs_diff(c, expected) < 1e-5 * std::sqrt(double(cs.k)) + 1e-6);  // also: padding columns untouched
  }
}

TEST_CASE("packed GEMM: every register tile this CPU has gives the naive product, its bias added", "[gemm][packed][isa]") {
  // The AVX2 tile on an AVX-512 machine too, in one process: a build runs the narrower kernels
  // wherever it runs (TROUPE_CPU_ISA forces them for a whole run).
  struct Case {
    int64_t m, n, k;
    float beta;
  };
  for (int level = 0; level <= static_cast<int>(cpu_isa_detected()); ++level) {
    const CpuIsa isa = static_cast<CpuIsa>(level);
    for (const Case& cs : {Case{1, 16, 1, 0.0f}, Case{6, 16, 257, 1.0f}, Case{7, 33, 300, 0.5f},
                           Case{50, 4 * 64 + 16, 1024 + 3, 0.0f}, Case{145, 48, 520, -1.0f}}) {
      auto a = random_values(cs.m * cs.k, 11), w = random_values(cs.n * cs.k, 12), c = random_values(cs.m * cs.n, 13);
      const auto bias = random_values(cs.n, 14);
      auto expected = reference(cs.m, cs.n, cs.k, a, cs.k, w, cs.k, cs.beta, c, cs.n);
      for (int64_t i = 0; i < cs.m; ++i)
        for (int64_t j = 0; j < cs.n; ++j) expected[i * cs.n + j] += bias[j];
      const PackedWeight packed(w.data(), cs.n, cs.k, cs.k, isa);
      CHECK(packed.isa() == isa);
      CHECK(packed.panel_width() == (isa >= CpuIsa::avx512 ? 64 : 16));
      gemm_packed_f32(cs.m, a.data(), cs.k, packed, cs.beta, c.data(), cs.n, bias.data());  // + bias, as linear
      INFO(cpu_isa_name(isa) << " m=" << cs.m << " n=" << cs.n << " k=" << cs.k);
      CHECK(max_abs_diff(c, expected) < 1e-5 * std::sqrt(double(cs.k)) + 1e-6);
    }
  }
}

TEST_CASE("packed GEMM reading A in place gives the packed product, on every tile this CPU has", "[gemm][packed][isa]") {
  // Every tile height and, on AVX-512, panels of 1 to 4 filled vectors (n 5, 20, 40, 64 + 50);
  // k across a block; lda past k.
  struct Case {
    int64_t m, n, k, lda;
  };
  for (int level = 0; level <= static_cast<int>(cpu_isa_detected()); ++level) {
    const CpuIsa isa = static_cast<CpuIsa>(level);
    for (const Case& cs : {Case{1, 5, 64, 64}, Case{6, 20, 64, 192}, Case{11, 40, 250, 250}, Case{250, 114, 64, 3072},
                           Case{50, 64, 1030, 1040}}) {
      const auto a = random_values(cs.m * cs.lda, 21), w = random_values(cs.n * cs.k, 22), bias = random_values(cs.n, 23);
      const PackedWeight packed(w.data(), cs.n, cs.k, cs.k, isa);
      std::vector<float> in_place(cs.m * cs.n, 1.0f), packed_first(cs.m * cs.n, 1.0f);
      gemm_packed_f32(cs.m, a.data(), cs.lda, packed, 0.5f, in_place.data(), cs.n, bias.data(), ARead::in_place);
      gemm_packed_f32(cs.m, a.data(), cs.lda, packed, 0.5f, packed_first.data(), cs.n, bias.data());
      INFO(cpu_isa_name(isa) << " m=" << cs.m << " n=" << cs.n << " k=" << cs.k);
      CHECK(in_place == packed_first);  // the same products summed in the same order
      auto expected = reference(cs.m, cs.n, cs.k, a, cs.lda, w, cs.k, 0.5f, std::vector<float>(cs.m * cs.n, 1.0f), cs.n);
      for (int64_t i = 0; i < cs.m; ++i)
        for (int64_t j = 0; j < cs.n; ++j) expected[i * cs.n + j] += bias[j];
      CHECK(max_abs_diff(in_place, expected) < 1e-5 * std::sqrt(double(cs.k)) + 1e-6);
    }
  }
}

TEST_CASE("packed GEMM: beta 0 never reads C, k 0 scales C, results do not depend on threads", "[gemm][packed]") {
  const int64_t m = 30, n = 300, k = 300;  // 5.4 MFLOP: enough to go parallel
  auto a = random_values(m * k, 4), w = random_values(n * k, 5);
  PackedWeight packed(w.data(), n, k, k);
  std::vector<float> c(m * n, std::nanf(""));
  gemm_packed_f32(m, a.data(), k, packed, 0.0f, c.data(), n);
  CHECK(max_abs_diff(c, reference(m, n, k, a, k, w, k, 0.0f, c, n)) < 1e-4);

  // Each C column is computed by one thread in the same order: bit-identical on 1 and 2 threads.
  const int before = thread_intra_op_threads();
  std::vector<float> one(m * n), two(m * n);
  set_thread_intra_op_threads(1);
  gemm_packed_f32(m, a.data(), k, packed, 0.0f, one.data(), n);
  set_thread_intra_op_threads(2);
  gemm_packed_f32(m, a.data(), k, packed, 0.0f, two.data(), n);
  set_thread_intra_op_threads(before);
  CHECK(one == two);

  PackedWeight empty_k(w.data(), 2, 0, 1);
  std::vector<float> d = {1, 2, 3, 4};
  gemm_packed_f32(2, a.data(), 1, empty_k, 0.5f, d.data(), 2);
  CHECK(d == std::vector<float>{0.5f, 1, 1.5f, 2});
  gemm_packed_f32(0, a.data(), 1, empty_k, 0.5f, d.data(), 2);  // m == 0: nothing to do
  CHECK(d == std::vector<float>{0.5f, 1, 1.5f, 2});
}

TEST_CASE("packed GEMM errors name the entry point and the sizes", "[gemm][packed][errors]") {
  std::vector<float> w(64, 1.0f), c(64);
  CHECK_THROWS_AS(PackedWeight(w.data(), 4, 8, 7), ValueError);
  CHECK_THROWS_WITH(PackedWeight(w.data(), -1, 8, 8), Catch::Contains("PackedWeight") && Catch::Contains("n=-1"));
  PackedWeight packed(w.data(), 4, 8, 8);
  CHECK_THROWS_WITH(gemm_packed_f32(2, w.data(), 7, packed, 0.0f, c.data(), 4),
                    Catch::Contains("gemm_packed_f32") && Catch::Contains("lda=7"));
  CHECK_THROWS_WITH(gemm_packed_f32(2, w.data(), 8, packed, 0.0f, c.data(), 3), Catch::Contains("ldc=3"));
  CHECK_THROWS_AS(gemm_packed_f32(-1, w.data(), 8, packed, 0.0f, c.data(), 4), ValueError);
}

// W[column, kk] as the packed form holds it.
float packed_at(const PackedWeight& p, int64_t column, int64_t kk) {
  const int64_t width = p.panel_width();
  return p.panel(column / width)[kk * width + column % width];
}

TEST_CASE("packed weights are cached per weight and repacked when it changes", "[gemm][packed][cache]") {
  clear_packed_weight_cache();
  Tensor w = Tensor::from_vector(random_values(70 * 20, 6), {70, 20});
  auto first = packed_weight(w);
  CHECK(packed_weight(w) == first);  // same storage, view and version: the same packed form
  CHECK(packed_weight_cache_bytes() == first->nbytes());
  const Tensor copy = w;  // another handle on the same bytes: still a hit
  CHECK(packed_weight(copy) == first);

  // A write through mutable_data bumps the storage's version: packed again, with the new values.
  w.mutable_data<float>()[0] = 100.0f;  // w copies first (copy shares the bytes), so the old stays valid
  CHECK(packed_weight(copy) == first);
  auto second = packed_weight(w);
  CHECK(second != first);
  CHECK(second->panel(0)[0] == 100.0f);
  Tensor sole = Tensor::from_vector(random_values(8 * 4, 7), {8, 4});
  auto before_write = packed_weight(sole);
  const uint64_t sole_version = sole.storage()->version();
  sole.mutable_data<float>()[1] = -5.0f;  // the only handle: written in place, same storage
  CHECK(sole.storage()->version() == sole_version + 1);
  auto after_write = packed_weight(sole);
  CHECK(after_write != before_write);
  CHECK(packed_at(*after_write, 0, 1) == -5.0f);  // k index 1 of output column 0

  // A view packs what it shows: W^T of a [20, 70] tensor, and a column slice.
  Tensor wt = Tensor::from_vector(random_values(20 * 70, 8), {20, 70});
  auto from_view = packed_weight(wt.transpose(0, 1));
  const auto values = wt.to_vector<float>();
  CHECK(from_view->n() == 70);
  CHECK(packed_at(*from_view, 69, 3) == values[3 * 70 + 69]);  // W[69, 3] = wt[3, 69]
  auto sliced = packed_weight(wt.slice(1, 10, 20));
  CHECK(packed_at(*sliced, 1, 2) == values[1 * 70 + 12]);  // W[1, 2] = wt[1, 12]

  // Entries of weights that died are dropped at the next insertion.
  const size_t with_all = packed_weight_cache_bytes();
  packed_weight(Tensor::ones({64, 64}));  // the temporary dies here, its entry stays for now
  CHECK(packed_weight_cache_bytes() == with_all + 64 * 64 * sizeof(float));
  packed_weight(Tensor::from_vector(random_values(4 * 4, 9), {4, 4}));
  CHECK(packed_weight_cache_bytes() == with_all + 4 * first->panel_width() * sizeof(float));
  clear_packed_weight_cache();
  CHECK(packed_weight_cache_bytes() == 0);

  CHECK_THROWS_AS(packed_weight(Tensor::zeros({4, 4}, DType::f64)), DTypeError);
  CHECK_THROWS_WITH(packed_weight(Tensor::zeros({4})), Catch::Contains("packed_weight") && Catch::Contains("f32[4]"));
  CHECK_THROWS_AS(packed_weight(Tensor()), ValueError);
}

TEST_CASE("second_use packs a weight the second time it is seen, and linear then uses it", "[gemm][packed][cache]") {
  clear_packed_weight_cache();
  Tensor w = Tensor::from_vector(random_values(130 * 40, 10), {130, 40});
  CHECK(packed_weight(w, PackWhen::second_use) == nullptr);  // seen once: a marker, no bytes
  CHECK(packed_weight_cache_bytes() == 0);
  auto packed = packed_weight(w, PackWhen::second_use);
  REQUIRE(packed != nullptr);
  CHECK(packed_weight(w) == packed);
  w.mutable_data<float>()[0] = 3.0f;  // a new version: seen once again
  CHECK(packed_weight(w, PackWhen::second_use) == nullptr);

  // linear on the weight seen before: packed from its first call here, with and without bias,
  // for rows that are a strided view.
  const Tensor x = Tensor::from_vector(random_values(9 * 50, 11), {9, 50}).slice(1, 5, 45);
  const Tensor bias = Tensor::from_vector(random_values(130, 12), {130});
  const auto xs = x.to_vector<float>(), ws = w.to_vector<float>(), bs = bias.to_vector<float>();
  for (bool with_bias : {true, false}) {
    std::vector<float> expected(9 * 130);
    for (int64_t i = 0; i < 9; ++i)
      for (int64_t j = 0; j < 130; ++j) {
        double sum = with_bias ? bs[j] : 0.0;
        for (int64_t p = 0; p < 40; ++p) sum += double(xs[i * 40 + p]) * ws[j * 40 + p];
        expected[i * 130 + j] = static_cast<float>(sum);
      }
    for (int call = 0; call < 3; ++call) {
      const Tensor y = with_bias ? linear(x, w, bias) : linear(x, w);
      INFO("bias " << with_bias << " call " << call);
      CHECK(y.shape() == Shape{9, 130});
      CHECK(max_abs_diff(y.to_vector<float>(), expected) < 1e-5);
    }
  }
  CHECK(packed_weight_cache_bytes() == packed->nbytes());  // linear packed the current version
}

TEST_CASE("packed weights: a weight on another device is a DeviceError naming it", "[gemm]") {
  if (!has_backend(DeviceType::cuda)) SKIP_TEST("no GPU here: " << cuda_unavailable_reason());
  const Tensor w = Tensor::ones({4, 8}).to(Device::cuda(0));
  CHECK_THROWS_AS(packed_weight(w), DeviceError);
  CHECK_THROWS_WITH(packed_weight(w), Catch::Contains("packed_weight: expects a host weight") && Catch::Contains("cuda"));
  CHECK_THROWS_AS(packed_weight_bf16(w), DeviceError);
  CHECK_THROWS_WITH(packed_weight_bf16(w), Catch::Contains("packed_weight_bf16: expects a host weight"));
}
