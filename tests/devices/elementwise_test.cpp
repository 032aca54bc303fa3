#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "devices/cpu/activations.h"
#include "devices/ops.h"
#include "devices/registry.h"
#include "support/close.h"

using namespace troupe;

namespace {

Tensor f32(const std::vector<float>& v, const Shape& s) { return Tensor::from_vector<float>(v, s); }

}  // namespace

TEST_CASE("binary arithmetic values", "[elementwise]") {
  Tensor a = f32({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = f32({10, 20, 30, 40, 50, 60}, {2, 3});
  check_values(add(a, b), {11, 22, 33, 44, 55, 66});
  check_values(sub(a, b), {-9, -18, -27, -36, -45, -54});
  check_values(mul(a, b), {10, 40, 90, 160, 250, 360});
  check_values(div(a, b), {0.1, 0.1, 0.1, 0.1, 0.1, 0.1});
  check_values(maximum(a, f32({3, 3, 3, 3, 3, 3}, {2, 3})), {3, 3, 3, 4, 5, 6});
  check_values(minimum(a, f32({3, 3, 3, 3, 3, 3}, {2, 3})), {1, 2, 3, 3, 3, 3});
  check_values(div(f32({1, -1, 0}, {3}), f32({0, 0, 0}, {3})), {INFINITY, -INFINITY, kNaN});
  // A long contiguous run (the vectorised loop and its tail).
  Tensor long_a = Tensor::arange(1000, DType::f32), long_b = Tensor::full({1000}, 0.5);
  std::vector<double> expected(1000);
  for (int i = 0; i < 1000; ++i) expected[i] = i * 0.5;
  check_values(mul(long_a, long_b), expected);
}

TEST_CASE("broadcasting, 0-d and size-0 dims", "[elementwise][broadcast]") {
  Tensor m = f32({1, 2, 3, 4, 5, 6}, {2, 3});
  check_values(add(m, f32({10, 20, 30}, {3})), {11, 22, 33, 14, 25, 36});
  check_values(add(m, f32({100, 200}, {2, 1})), {101, 102, 103, 204, 205, 206});
  Tensor outer = sub(f32({1, 2}, {2, 1}), f32({10, 20, 30}, {1, 3}));
  CHECK(outer.shape() == Shape{2, 3});
  check_values(outer, {-9, -19, -29, -8, -18, -28});
  // The front's scalar overloads make a 0-d tensor of x's dtype.
  check_values(add(m, 1.0), {2, 3, 4, 5, 6, 7});
  check_values(mul(m, -2.0), {-2, -4, -6, -8, -10, -12});
  Tensor s = Tensor::scalar<float>(3);
  check_values(sub(s, m), {2, 1, 0, -1, -2, -3});
  Tensor ss = add(s, Tensor::scalar<float>(4));
  CHECK(ss.shape() == Shape{});
  CHECK(ss.item<float>() == 7);
  // Size-0 dims broadcast like any other; a size-1 dim stretches to 0.
  CHECK(add(Tensor::zeros({0, 3}), f32({1, 2, 3}, {3})).shape() == Shape{0, 3});
  CHECK(mul(Tensor::zeros({2, 0}), Tensor::zeros({2, 1})).shape() == Shape{2, 0});
  CHECK(gt(Tensor::zeros({0}), Tensor::scalar<float>(1)).shape() == Shape{0});
  CHECK(add(Tensor::zeros({4, 1, 2}), Tensor::zeros({3, 1})).shape() == Shape{4, 3, 2});
}

TEST_CASE("strided operands: transposed, sliced, expanded", "[elementwise][strided]") {
  Tensor a = f32({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {3, 4});
  Tensor t = a.transpose(0, 1);  // [4,3]: 0 4 8 / 1 5 9 / 2 6 10 / 3 7 11
  check_values(add(t, t.contiguous()), {0, 8, 16, 2, 10, 18, 4, 12, 20, 6, 14, 22});
  check_values(sub(t, f32({1, 2, 3}, {3})), {-1, 2, 5, 0, 3, 6, 1, 4, 7, 2, 5, 8});
  Tensor sl = a.slice(1, 1, 4, 2);  // [3,2]: 1 3 / 5 7 / 9 11
  check_values(mul(sl, sl), {1, 9, 25, 49, 81, 121});
  check_values(add(a.select(1, 2), a.select(0, 0).slice(0, 0, 3)), {2, 7, 12});
  Tensor e = f32({1, 2}, {2, 1}).expand({2, 3});
  check_values(mul(e, f32({1, 2, 3, 4, 5, 6}, {2, 3})), {1, 2, 3, 8, 10, 12});
  check_values(neg(t), {0, -4, -8, -1, -5, -9, -2, -6, -10, -3, -7, -11});
  check_values(relu(add(sl, -6.0)), {0, 0, 0, 1, 3, 5});
  check_values(exp(t.slice(0, 0, 1)), {1, std::exp(4.0), std::exp(8.0)});
  // Inputs are never written.
  CHECK(a.to_vector<float>()[1] == 1);
}

TEST_CASE("type promotion table", "[elementwise][dtype]") {
  auto result = [](DType x, DType y) { return add(Tensor::ones({2}, x), Tensor::ones({2}, y)).dtype(); };
  CHECK(result(DType::i32, DType::f32) == DType::f32);
  CHECK(result(DType::u8, DType::i32) == DType::i32);
  CHECK(result(DType::boolean, DType::u8) == DType::u8);
  CHECK(result(DType::i32, DType::i64) == DType::i64);
  CHECK(result(DType::i64, DType::f16) == DType::f16);
  CHECK(result(DType::f16, DType::bf16) == DType::f32);
  CHECK(result(DType::f32, DType::f64) == DType::f64);
  CHECK(result(DType::boolean, DType::boolean) == DType::boolean);
  // Mixed operands compute in the promoted type: 2.5 + 3 (i64) = 5.5.
  check_values(add(Tensor::full({2}, 2.5, DType::f32), Tensor::full({2}, 3, DType::i64)), {5.5, 5.5});
  check_values(mul(Tensor::full({1}, 200, DType::u8), Tensor::full({1}, 2, DType::i32)), {400});
  // True division: integers and bools give f32.
  Tensor q = div(Tensor::from_vector<int32_t>({7, -7, 1}, {3}), Tensor::from_vector<int32_t>({2, 2, 0}, {3}));
  CHECK(q.dtype() == DType::f32);
  check_values(q, {3.5, -3.5, INFINITY});
  CHECK(div(Tensor::ones({1}, DType::boolean), Tensor::ones({1}, DType::boolean)).dtype() == DType::f32);
  CHECK(div(Tensor::ones({1}, DType::f64), Tensor::ones({1}, DType::i32)).dtype() == DType::f64);
  CHECK(div(Tensor::ones({1}, DType::bf16), Tensor::ones({1}, DType::u8)).dtype() == DType::bf16);
  // Comparisons give bool and compare in the promoted type: i64 3 vs f32 2.5.
  Tensor c = gt(Tensor::full({1}, 3, DType::i64), Tensor::full({1}, 2.5, DType::f32));
  CHECK(c.dtype() == DType::boolean);
  CHECK(c.to_vector<bool>() == std::vector<bool>{true});
  CHECK(eq(Tensor::full({1}, 2, DType::i32), Tensor::full({1}, 2.5, DType::f32)).to_vector<bool>() ==
        std::vector<bool>{false});
  // Transcendentals turn integers into f32 and keep floating dtypes.
  CHECK(exp(Tensor::ones({1}, DType::i64)).dtype() == DType::f32);
  CHECK(sigmoid(Tensor::ones({1}, DType::boolean)).dtype() == DType::f32);
  CHECK(tanh(Tensor::ones({1}, DType::f64)).dtype() == DType::f64);
  CHECK(gelu(Tensor::ones({1}, DType::bf16)).dtype() == DType::bf16);
  CHECK(neg(Tensor::ones({1}, DType::i32)).dtype() == DType::i32);
  CHECK(relu(Tensor::ones({1}, DType::u8)).dtype() == DType::u8);
}

TEST_CASE("integer and bool arithmetic", "[elementwise][dtype]") {
  const int32_t big = std::numeric_limits<int32_t>::max(), small = std::numeric_limits<int32_t>::min();
  // Overflow wraps like PyTorch's.
  CHECK(add(Tensor::from_vector<int32_t>({big}, {1}), Tensor::from_vector<int32_t>({1}, {1})).to_vector<int32_t>() ==
        std::vector<int32_t>{small});
  CHECK(neg(Tensor::from_vector<int32_t>({small, 5}, {2})).to_vector<int32_t>() == std::vector<int32_t>{small, -5});
  CHECK(abs(Tensor::from_vector<int32_t>({small, -5, 3}, {3})).to_vector<int32_t>() ==
        std::vector<int32_t>{small, 5, 3});
  CHECK(neg(Tensor::from_vector<uint8_t>({200, 0}, {2})).to_vector<uint8_t>() == std::vector<uint8_t>{56, 0});
  CHECK(add(Tensor::from_vector<uint8_t>({250}, {1}), Tensor::from_vector<uint8_t>({10}, {1})).to_vector<uint8_t>() ==
        std::vector<uint8_t>{4});
  CHECK(mul(Tensor::from_vector<int64_t>({-3, 4}, {2}), Tensor::from_vector<int64_t>({5, -6}, {2}))
            .to_vector<int64_t>() == std::vector<int64_t>{-15, -24});
  CHECK(relu(Tensor::from_vector<int64_t>({-3, 0, 4}, {3})).to_vector<int64_t>() == std::vector<int64_t>{0, 0, 4});
  CHECK(maximum(Tensor::from_vector<int32_t>({-3, 7}, {2}), Tensor::from_vector<int32_t>({2, 1}, {2}))
            .to_vector<int32_t>() == std::vector<int32_t>{2, 7});
  // bool: add is or, mul is and (PyTorch).
  Tensor t = Tensor::from_vector<bool>({true, true, false, false}, {4});
  Tensor f = Tensor::from_vector<bool>({true, false, true, false}, {4});
  CHECK(add(t, f).to_vector<bool>() == std::vector<bool>{true, true, true, false});
  CHECK(mul(t, f).to_vector<bool>() == std::vector<bool>{true, false, false, false});
  CHECK(minimum(t, f).to_vector<bool>() == std::vector<bool>{true, false, false, false});
  CHECK(ne(t, f).to_vector<bool>() == std::vector<bool>{false, true, true, false});
}

TEST_CASE("comparisons and NaN", "[elementwise]") {
  Tensor a = f32({1, 2, 3, NAN}, {4});
  Tensor b = f32({2, 2, 2, 2}, {4});
  CHECK(eq(a, b).to_vector<bool>() == std::vector<bool>{false, true, false, false});
  CHECK(ne(a, b).to_vector<bool>() == std::vector<bool>{true, false, true, true});
  CHECK(lt(a, b).to_vector<bool>() == std::vector<bool>{true, false, false, false});
  CHECK(le(a, b).to_vector<bool>() == std::vector<bool>{true, true, false, false});
  CHECK(gt(a, b).to_vector<bool>() == std::vector<bool>{false, false, true, false});
  CHECK(ge(a, b).to_vector<bool>() == std::vector<bool>{false, true, true, false});
  CHECK(gt(a, Tensor::scalar<float>(1.5f)).to_vector<bool>() == std::vector<bool>{false, true, true, false});
  // maximum/minimum propagate NaN from either side (PyTorch).
  check_values(maximum(a, b), {2, 2, 3, kNaN});
  check_values(minimum(b, a), {1, 2, 2, kNaN});
  check_values(relu(f32({NAN, -1, 2}, {3})), {kNaN, 0, 2});
}

TEST_CASE("f16 and bf16 compute in f32", "[elementwise][dtype]") {
  Tensor h = Tensor::from_vector<float>({1.5f, -2.0f, 0.25f}, {3}).to(DType::f16);
  Tensor sum = add(h, h);
  CHECK(sum.dtype() == DType::f16);
  check_values(sum, {3, -4, 0.5});
  Tensor bf = Tensor::from_vector<float>({1.0f, 2.0f, 4.0f}, {3}).to(DType::bf16);
  check_values(mul(bf, bf), {1, 4, 16});
  check_values(exp(bf), {2.71875, 7.375, 54.5}, 0, 0);  // exp rounded to bf16's 8 bits
  check_values(tanh(h), {0.905148, -0.964028, 0.244919}, 1e-3);
  check_values(neg(h), {-1.5, 2, -0.25});
  CHECK(lt(h, bf).to_vector<bool>() == std::vector<bool>{false, true, true});
  CHECK(maximum(h, bf).dtype() == DType::f32);
}

TEST_CASE("unary transcendentals match PyTorch", "[elementwise][activations]") {
  const std::vector<double> xs = {-3.0, -1.0, -0.5, 0.0, 0.25, 1.0, 2.5};
  std::vector<float> xf(xs.begin(), xs.end());
  // torch.nn.functional / torch in float64 on these inputs.
  const std::vector<double> gelu_erf = {-0.00404969409489031, -0.15865525393145702, -0.15426876936299344, 0.0,
                                        0.14967658142073093,  0.841344746068543,    2.4844758366855597};
  const std::vector<double> gelu_tanh = {-0.0036373920817729943, -0.15880800939172324, -0.15428599017485606, 0.0,
                                         0.149675350701685,      0.8411919906082768,   2.484915733910001};
  const std::vector<double> sig = {0.04742587317756678, 0.2689414213699951, 0.3775406687981454, 0.5,
                                   0.5621765008857981,  0.7310585786300049, 0.9241418199787566};
  const std::vector<double> tnh = {-0.9950547536867305, -0.7615941559557649, -0.46211715726000974, 0.0,
                                   0.24491866240370913, 0.7615941559557649,  0.9866142981514303};
  const std::vector<double> ex = {0.049787068367863944, 0.36787944117144233, 0.6065306597126334, 1.0,
                                  1.2840254166877414,   2.718281828459045,   12.182493960703473};
  for (DType dt : {DType::f32, DType::f64}) {
    INFO(name(dt));
    Tensor x = Tensor::from_vector<double>(xs, {7}).to(dt);
    check_values(gelu(x), gelu_erf, 1e-6);
    check_values(gelu(x, true), gelu_tanh, 1e-6);
    check_values(sigmoid(x), sig, 1e-6);
    check_values(tanh(x), tnh, 1e-6);
    check_values(exp(x), ex, 1e-6);
  }
  check_values(log(f32({1, std::exp(2.0f), 0, -1}, {4})), {0, 2, -INFINITY, kNaN});
  check_values(sqrt(Tensor::from_vector<int32_t>({4, 9, 2}, {3})), {2, 3, std::sqrt(2.0)});
  check_values(abs(f32({-2.5, 0, 3}, {3})), {2.5, 0, 3});
  check_values(exp(f32({-INFINITY, INFINITY, NAN, 100, -200}, {5})), {0, INFINITY, kNaN, INFINITY, 0});
  check_values(tanh(f32({-INFINITY, INFINITY, NAN, 1e-20f}, {4})), {-1, 1, kNaN, 1e-20}, 1e-6, 0);
  check_values(sigmoid(f32({-INFINITY, INFINITY, NAN}, {3})), {0, 1, kNaN});
  check_values(gelu(f32({INFINITY, NAN, -10}, {3})), {INFINITY, kNaN, -7.6198530241605269e-23}, 1e-5, 0);
}

TEST_CASE("f32 activations over a dense range", "[elementwise][activations]") {
  // Against libm in double, relative 1e-6 where the result is a normal float, in and out of place.
  std::vector<float> x;
  for (int i = -40000; i <= 40000; ++i) x.push_back(static_cast<float>(i) * 0.0021f);  // [-84, 84]
  for (float v = 1e-30f; v < 1; v *= 3.7f) x.push_back(-v), x.push_back(v);
  std::vector<float> y(x.size()), z(x.size());
  auto check = [&](void (*fn)(const float*, float*, int64_t), double (*ref)(double), const char* what) {
    INFO(what);
    fn(x.data(), y.data(), static_cast<int64_t>(x.size()));
    z = x;
    fn(z.data(), z.data(), static_cast<int64_t>(z.size()));
    double worst = 0;
    size_t in_place_differs = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      in_place_differs += y[i] != z[i];
      const double r = ref(x[i]);
      if (std::fabs(r) < 1e-30 || std::fabs(r) > 1e38) continue;
      worst = std::max(worst, std::fabs(y[i] - r) / std::fabs(r));
    }
    CHECK(in_place_differs == 0);
    CHECK(worst < 1e-6);
  };
  check(exp_f32, [](double v) { return std::exp(v); }, "exp");
  check(tanh_f32, [](double v) { return std::tanh(v); }, "tanh");
  check(sigmoid_f32, [](double v) { return 1 / (1 + std::exp(-v)); }, "sigmoid");
  check(gelu_f32, [](double v) { return 0.5 * v * std::erfc(-v / std::sqrt(2.0)); }, "gelu");
}

TEST_CASE("elementwise errors name the op", "[elementwise][errors]") {
  Tensor a = Tensor::zeros({2, 3}), b = Tensor::zeros({4});
  CHECK_THROWS_AS(add(a, b), ShapeError);
  CHECK_THROWS_WITH(add(a, b), Catch::Contains("add") && Catch::Contains("[2,3]") && Catch::Contains("[4]"));
  CHECK_THROWS_AS(lt(a, b), ShapeError);
  CHECK_THROWS_WITH(lt(a, b), Catch::Contains("lt"));
  Tensor flags = Tensor::ones({2}, DType::boolean);
  CHECK_THROWS_AS(sub(flags, flags), DTypeError);
  CHECK_THROWS_WITH(sub(flags, flags), Catch::Contains("sub") && Catch::Contains("bool[2]"));
  CHECK_THROWS_AS(neg(flags), DTypeError);
  CHECK_THROWS_WITH(neg(flags), Catch::Contains("neg") && Catch::Contains("bool[2]"));
  CHECK_THROWS_AS(abs(flags), DTypeError);
  CHECK_THROWS_WITH(abs(flags), Catch::Contains("abs"));
  CHECK_THROWS_AS(relu(flags), DTypeError);
  CHECK_THROWS_WITH(relu(flags), Catch::Contains("relu"));
  CHECK_THROWS_AS(call_op("gelu", {a}, {{"approximate", std::string("fast")}}), ValueError);
  CHECK_THROWS_WITH(call_op("gelu", {a}, {{"approximate", std::string("fast")}}),
                    Catch::Contains("gelu") && Catch::Contains("fast"));
  CHECK_THROWS_AS(call_op("add", {a}), ValueError);  // arity
  CHECK_THROWS_AS(add(a, Tensor()), ValueError);     // undefined operand
}
