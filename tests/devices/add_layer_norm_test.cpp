// add_layer_norm on the CPU against add followed by layer_norm (its definition), in f32, f64 and
// bf16, with and without the sum returned; its errors; and its refusal of inputs that need grad.
#include <catch2/catch.hpp>

#include "devices/autograd/grad_mode.h"
#include "devices/error.h"
#include "devices/ops.h"
#include "devices/random.h"
#include "support/close.h"

using namespace troupe;

namespace {

Tensor uniform(const Shape& shape, uint64_t seed, double scale = 1.0) {
  Generator generator(seed);
  return rand_uniform(shape, -scale, scale, DType::f32, generator);
}

}  // namespace

TEST_CASE("add_layer_norm equals add then layer_norm", "[layer_norm][add_layer_norm]") {
  // Rows of 1024 (the XLM-R width, whole packs), 37 (a tail), and one row of one.
  for (const Shape& shape : {Shape{5, 1024}, Shape{2, 3, 37}, Shape{1, 1}}) {
    INFO(to_string(shape));
    const int64_t d = shape.back();
    const Tensor x = uniform(shape, 1, 2.0), r = uniform(shape, 2), w = uniform({d}, 3), b = uniform({d}, 4);
    const Tensor sum = add(x, r);
    check_close(add_layer_norm(x, r, w, b), layer_norm(sum, {d}, w, b), {.rtol = 1e-5, .atol = 2e-6});
    check_close(add_layer_norm(x, r), layer_norm(sum, {d}), {.rtol = 1e-5, .atol = 2e-6});
    check_close(add_layer_norm(x, r, w, {}, 1e-3), layer_norm(sum, {d}, w, {}, 1e-3), {.rtol = 1e-5, .atol = 2e-6});
    const auto [normed, kept] = add_layer_norm_with_sum(x, r, w, b);
    check_close(normed, layer_norm(sum, {d}, w, b), {.rtol = 1e-5, .atol = 2e-6});
    check_close(kept, sum);
    // f64 rows normalise in f64.
    check_close(add_layer_norm(x.to(DType::f64), r.to(DType::f64), w, b),
                layer_norm(add(x.to(DType::f64), r.to(DType::f64)), {d}, w.to(DType::f64), b.to(DType::f64)),
                {.rtol = 1e-12, .atol = 1e-12});
  }
}

TEST_CASE("add_layer_norm in bf16: rows read and written in bf16, the sum normalised before rounding",
          "[layer_norm][add_layer_norm][bf16]") {
  const Tensor x = uniform({6, 256}, 5, 3.0).to(DType::bf16), r = uniform({6, 256}, 6).to(DType::bf16);
  const Tensor w = uniform({256}, 7), b = uniform({256}, 8);
  const Tensor y = add_layer_norm(x, r, w, b);
  REQUIRE(y.dtype() == DType::bf16);
  // The exact answer from the same bf16 inputs: the result is it rounded once (half a bf16 step).
  const Tensor exact = layer_norm(add(x.to(DType::f32), r.to(DType::f32)), {256}, w, b);
  check_close(y.to(DType::f32), exact, {.rtol = 1.0 / 256, .atol = 1e-6});
  // add then layer_norm in bf16 rounds the sum first: the two agree to a bf16 step or two of the
  // output's scale (|y| is a few units here).
  const Tensor unfused = layer_norm(add(x, r), {256}, w.to(DType::bf16), b.to(DType::bf16));
  CHECK(relative_error(y.to(DType::f32), unfused.to(DType::f32)) < 2e-2);
  const auto [normed, kept] = add_layer_norm_with_sum(x, r, w, b);
  CHECK(kept.dtype() == DType::bf16);
  check_close(kept, add(x, r));
  check_close(normed, y);
}

TEST_CASE("add_layer_norm errors name the op and the operands", "[layer_norm][add_layer_norm][errors]") {
  const Tensor x = uniform({2, 4}, 9), w = uniform({4}, 10);
  CHECK_THROWS_AS(add_layer_norm(x, uniform({2, 3}, 11)), ShapeError);
  CHECK_THROWS_WITH(add_layer_norm(x, uniform({2, 3}, 11)),
                    Catch::Contains("add_layer_norm") && Catch::Contains("f32[2,4] + f32[2,3]"));
  CHECK_THROWS_AS(add_layer_norm(x, x.to(DType::bf16)), ShapeError);
  CHECK_THROWS_AS(add_layer_norm(x, x, uniform({3}, 12)), ShapeError);
  CHECK_THROWS_WITH(add_layer_norm(x, x, w, uniform({3}, 12)), Catch::Contains("bias") && Catch::Contains("[4]"));
  CHECK_THROWS_AS(add_layer_norm(x.to(DType::i32), x.to(DType::i32)), DTypeError);
  CHECK_THROWS_AS(add_layer_norm(x, x, w, {}, -1.0), ValueError);
  CHECK_THROWS_AS(add_layer_norm(x, x, {}, w), ValueError);  // a bias without a weight
  CHECK_THROWS_AS(add_layer_norm(uniform({}, 13), uniform({}, 13)), ShapeError);
  CHECK(add_layer_norm(Tensor::zeros({0, 4}), Tensor::zeros({0, 4}), w).shape() == Shape{0, 4});
}

TEST_CASE("add_layer_norm is inference only: inputs that need grad are refused while grad mode is on",
          "[layer_norm][add_layer_norm][errors]") {
  Tensor w = uniform({4}, 14);
  w.set_requires_grad();
  const Tensor x = uniform({2, 4}, 15);
  CHECK_THROWS_AS(add_layer_norm(x, x, w), ValueError);
  CHECK_THROWS_WITH(add_layer_norm(x, x, w), Catch::Contains("add_layer_norm: inference only") &&
                                                 Catch::Contains("use add and layer_norm to train"));
  NoGradGuard no_grad;  // the encoder's fastpath: parameters need grad, grad mode is off
  check_close(add_layer_norm(x, x, w), layer_norm(add(x, x), {4}, w.detach()), {.rtol = 1e-5, .atol = 2e-6});
}
