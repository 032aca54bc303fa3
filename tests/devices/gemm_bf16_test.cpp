#include <catch2/catch.hpp>
#include <cmath>

#include "devices/cpu/gemm_bf16.h"
#include "devices/cuda/gemm_epilogue.h"
#include "devices/error.h"
#include "devices/ops.h"
#include "devices/random.h"
#include "support/close.h"

using namespace troupe;

namespace {

Tensor uniform(const Shape& shape, uint64_t seed) {
  Generator generator(seed);
  return rand_uniform(shape, -1.0, 1.0, DType::f32, generator);
}

Tensor rounded(const Tensor& t) { return t.to(DType::bf16).to(DType::f32); }

double max_abs_diff(const Tensor& a, const Tensor& b) { return max(abs(sub(a, b))).item<float>(); }

}  // namespace

// What linear_bf16 computes is linear on operands rounded to bf16: the rounding is the only
// difference from f32, the accumulation is f32 in both (only its order differs).
TEST_CASE("linear_bf16 equals linear on bf16-rounded operands, for ragged sizes, views and no bias",
          "[gemm][bf16]") {
  struct Case {
    Shape x;
    int64_t out;
    bool bias;
  };
  for (const Case& c : {Case{{1, 3}, 5, true}, Case{{7, 33}, 17, false}, Case{{2, 50, 1024}, 4096, true},
                        Case{{259, 1024}, 1024, true}, Case{{3, 4, 100}, 130, true}}) {
    INFO("x " << Shape(c.x).size() << "-d, in " << c.x.back() << ", out " << c.out);
    const Tensor x = uniform(c.x, 1), w = uniform({c.out, c.x.back()}, 2), b = uniform({c.out}, 3);
    const Tensor got = c.bias ? linear_bf16(x, w, b) : linear_bf16(x, w);
    const Tensor want = c.bias ? linear(rounded(x), rounded(w), b) : linear(rounded(x), rounded(w));
    check_close(got, want, {.rtol = 1e-5, .atol = 2e-5});
  }
  // A transposed view of x and of the weight are read as their values, not their memory order.
  const Tensor xt = uniform({64, 40}, 4).transpose(0, 1), wt = uniform({64, 24}, 5).transpose(0, 1);
  check_close(linear_bf16(xt, wt), linear(rounded(xt.contiguous()), rounded(wt.contiguous())), {.rtol = 1e-5, .atol = 2e-5});
}

TEST_CASE("linear_bf16 stays within bf16's rounding of f32 linear", "[gemm][bf16]") {
  const Tensor x = uniform({100, 1024}, 6), w = uniform({512, 1024}, 7), b = uniform({512}, 8);
  const Tensor exact = linear(x, w, b);
  const double diff = max_abs_diff(linear_bf16(x, w, b), exact);
  // Each product carries two roundings of 2^-9 relative; 1024 of them with random signs stay well
  // under 0.1 here (|values| ~ 10), and are not zero.
  CHECK(diff > 0);
  CHECK(diff < 0.1);
}

TEST_CASE("linear_bf16 fuses relu or gelu after the bias, reads bf16 rows and writes bf16", "[gemm][bf16]") {
  const Tensor x = uniform({37, 96}, 16), w = uniform({200, 96}, 17), b = uniform({200}, 18);
  const Tensor product = linear(rounded(x), rounded(w), b);
  check_close(linear_bf16(x, w, b, "relu"), relu(product), {.rtol = 1e-5, .atol = 2e-5});
  check_close(linear_bf16(x, w, b, "gelu"), gelu(product), {.rtol = 1e-4, .atol = 2e-5});
  // bf16 out: the f32 result rounded (one bf16 step at most apart, where the two roundings differ).
  const Tensor h = linear_bf16(x, w, b, "gelu", DType::bf16);
  REQUIRE(h.dtype() == DType::bf16);
  check_close(h.to(DType::f32), gelu(product), {.rtol = 8e-3, .atol = 1e-4});
  // bf16 in: read as given, the same as f32 rows that round to those values.
  check_close(linear_bf16(x.to(DType::bf16), w, b), linear_bf16(x, w, b), {.rtol = 1e-6, .atol = 1e-6});
  // The encoder's feed-forward: bf16 hidden rows straight into the second product.
  const Tensor w2 = uniform({96, 200}, 19);
  check_close(linear_bf16(h, w2), linear(h.to(DType::f32), rounded(w2)), {.rtol = 1e-5, .atol = 2e-5});
  CHECK_THROWS_WITH(linear_bf16(x, w, b, "tanh"), Catch::Contains("linear_bf16: activation must be none, relu or gelu"));
  CHECK_THROWS_AS(linear_bf16(x, w, b, "none", DType::f16), ValueError);
  CHECK_THROWS_AS(linear_bf16(x, w.to(DType::f16)), DTypeError);
}

// A model converts its weights to bf16 once (TransformerEncoder on a GPU); the op reads them as
// they are, and a bf16 bias too: the same values as from the f32 weight they were rounded from.
TEST_CASE("linear_bf16 reads a weight and bias already in bf16", "[gemm][bf16]") {
  const Tensor x = uniform({23, 64}, 21), w = uniform({48, 64}, 22), b = uniform({48}, 23);
  const Tensor w16 = w.to(DType::bf16), b16 = b.to(DType::bf16);
  check_close(linear_bf16(x, w16), linear_bf16(x, w), {.rtol = 1e-6, .atol = 1e-6});
  check_close(linear_bf16(x, w16, b16, "relu"), relu(linear(rounded(x), rounded(w), rounded(b))),
              {.rtol = 1e-5, .atol = 2e-5});
  const Tensor h = linear_bf16(x.to(DType::bf16), w16, b16, "gelu", DType::bf16);
  REQUIRE(h.dtype() == DType::bf16);
  check_close(h.to(DType::f32), gelu(linear(rounded(x), rounded(w), rounded(b))), {.rtol = 8e-3, .atol = 1e-4});
  // Against exact f32 linear: within bf16's rounding of the operands, relative to the output's scale.
  const Tensor exact = linear(x, w, b);
  CHECK(max_abs_diff(linear_bf16(x, w16, b16), exact) <= 2e-2 * max(abs(exact)).item<float>());
}

TEST_CASE("cuda linear_bf16's epilogue: bias and relu fused into cuBLASLt, gelu (erf) in a pass",
          "[gemm][bf16]") {
  using cuda::Activation;
  using cuda::LtEpilogue;
  CHECK(cuda::split_epilogue(true, Activation::none) == cuda::EpilogueSplit{LtEpilogue::bias, false, Activation::none});
  CHECK(cuda::split_epilogue(false, Activation::none) == cuda::EpilogueSplit{LtEpilogue::none, false, Activation::none});
  CHECK(cuda::split_epilogue(true, Activation::relu) == cuda::EpilogueSplit{LtEpilogue::relu_bias, false, Activation::none});
  CHECK(cuda::split_epilogue(false, Activation::relu) == cuda::EpilogueSplit{LtEpilogue::relu, false, Activation::none});
  // cuBLASLt's GELU is the tanh form: the bias is fused, the erf form runs after it.
  CHECK(cuda::split_epilogue(true, Activation::gelu) == cuda::EpilogueSplit{LtEpilogue::bias, false, Activation::gelu});
  CHECK(cuda::split_epilogue(false, Activation::gelu) == cuda::EpilogueSplit{LtEpilogue::none, false, Activation::gelu});
  CHECK_FALSE(cuda::split_epilogue(true, Activation::relu).needs_pass());
  CHECK(cuda::split_epilogue(true, Activation::gelu).needs_pass());
  // Where cuBLASLt has no fused algorithm, the pass does all of it.
  CHECK(cuda::unfused(true, Activation::relu) == cuda::EpilogueSplit{LtEpilogue::none, true, Activation::relu});
  CHECK_FALSE(cuda::unfused(false, Activation::none).needs_pass());
  CHECK(cuda::activation_named("gelu") == Activation::gelu);
  CHECK(cuda::activation_named("none") == Activation::none);
}

TEST_CASE("linear_bf16 packs a weight once and again after it changes", "[gemm][bf16]") {
  Tensor w = uniform({32, 16}, 9);
  const Tensor x = uniform({4, 16}, 10);
  const Tensor first = linear_bf16(x, w);
  const size_t cached = packed_weight_bf16_cache_bytes();
  CHECK(cached >= 32 * 16 * 2);
  check_close(linear_bf16(x, w), first);  // the cached blocks, same answer
  CHECK(packed_weight_bf16_cache_bytes() == cached);
  w.mutable_data<float>()[0] += 4.0f;  // a new version of the weight: packed again
  check_close(linear_bf16(x, w), linear(rounded(x), rounded(w)), {.rtol = 1e-5, .atol = 2e-5});
}

TEST_CASE("linear_bf16 rejects what linear rejects, naming itself", "[gemm][bf16][errors]") {
  const Tensor x = uniform({4, 16}, 11), w = uniform({8, 16}, 12);
  REQUIRE_THROWS_AS(linear_bf16(x.to(DType::f64), w.to(DType::f64)), DTypeError);
  REQUIRE_THROWS_WITH(linear_bf16(x.to(DType::f64), w.to(DType::f64)), Catch::Contains("linear_bf16: expects x, the weight and the bias in f32 or bf16") && Catch::Contains("f64[4,16]"));
  REQUIRE_THROWS_AS(linear_bf16(x, uniform({8, 15}, 13)), ShapeError);
  REQUIRE_THROWS_WITH(linear_bf16(x, uniform({8, 15}, 13)), Catch::Contains("linear_bf16: input f32[4,16]"));
  REQUIRE_THROWS_WITH(linear_bf16(x, w, uniform({7}, 14)), Catch::Contains("linear_bf16: the bias must be [8]"));
  REQUIRE_THROWS_AS(linear_bf16(uniform({}, 15), w), ShapeError);
}
