#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "devices/ops.h"
#include "devices/registry.h"
#include "support/close.h"

using namespace troupe;

namespace {

void check_relative(const Tensor& t, const std::vector<double>& expected, double rel = 1e-6) {
  const std::vector<double> got = t.to_vector<double>();
  REQUIRE(got.size() == expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << " of " << t.meta().str() << ": got " << got[i] << ", expected " << expected[i]);
    if (std::isnan(expected[i])) CHECK(std::isnan(got[i]));
    else CHECK(std::fabs(got[i] - expected[i]) <= rel * std::fabs(expected[i]));
  }
}

// arange(24) as [2,3,4]: x[i][j][k] = 12i + 4j + k.
Tensor cube(DType dtype = DType::f32) { return Tensor::arange(24, dtype).reshape({2, 3, 4}); }

}  // namespace

TEST_CASE("sum and mean over dims", "[reduce]") {
  Tensor x = cube();
  Tensor all = sum(x);
  CHECK(all.shape() == Shape{});
  CHECK(all.item<float>() == 276);
  check_relative(sum(x, {1}), {12, 15, 18, 21, 48, 51, 54, 57});     // columns (inner 4)
  check_relative(sum(x, {-1}), {6, 22, 38, 54, 70, 86});               // rows
  check_relative(sum(x, {0, 2}), {60, 92, 124});                       // not adjacent: permuted
  check_relative(sum(x, {2, 0}), {60, 92, 124});
  check_relative(sum(x, {1, 2}), {66, 210});
  check_relative(mean(x, {0, 2}), {7.5, 11.5, 15.5});
  check_relative(mean(x), {11.5});
  CHECK(sum(x, {1}, true).shape() == Shape{2, 1, 4});
  CHECK(sum(x, {0, 2}, true).shape() == Shape{1, 3, 1});
  CHECK(sum(x, {}, true).shape() == Shape{1, 1, 1});
  CHECK(mean(x, {-2}, true).shape() == Shape{2, 1, 4});
  // A kept size-1 dim between reduced ones does not break up the reduced block.
  Tensor split = x.reshape({2, 3, 1, 4});
  CHECK(sum(split, {1, 3}).shape() == Shape{2, 1});
  check_relative(sum(split, {1, 3}), {66, 210});
  // Long rows and columns (vectorised paths and their tails).
  check_relative(sum(Tensor::ones({300, 37}), {0}), std::vector<double>(37, 300));
  check_relative(sum(Tensor::ones({37, 300}), {1}), std::vector<double>(37, 300));
  // Floating sums accumulate in f64: a million 0.1f add up to 1e5 (a running f32 sum drifts ~1%).
  CHECK(sum(Tensor::full({1000000}, 0.1)).item<float>() == Approx(100000.0).epsilon(1e-7));
  check_relative(mean(Tensor::from_vector<double>({1, 2, 3}, {3})), {2}, 0);
}

TEST_CASE("reduction dtypes", "[reduce][dtype]") {
  Tensor flags = Tensor::from_vector<bool>({true, false, true, true}, {2, 2});
  Tensor count = sum(flags);
  CHECK(count.dtype() == DType::i64);
  CHECK(count.item<int64_t>() == 3);
  CHECK(sum(flags, {0}).to_vector<int64_t>() == std::vector<int64_t>{2, 1});
  Tensor bytes = Tensor::from_vector<uint8_t>({200, 200, 100}, {3});
  CHECK(sum(bytes).dtype() == DType::i64);
  CHECK(sum(bytes).item<int64_t>() == 500);  // no u8 overflow
  Tensor ints = Tensor::from_vector<int32_t>({2000000000, 2000000000, -5}, {3});
  CHECK(sum(ints).item<int64_t>() == 3999999995);
  CHECK(sum(Tensor::from_vector<int64_t>({-4, 9}, {2})).item<int64_t>() == 5);
  CHECK(max(ints).dtype() == DType::i32);
  CHECK(max(ints).item<int32_t>() == 2000000000);
  CHECK(min(ints).item<int32_t>() == -5);
  CHECK(max(flags).to_vector<bool>() == std::vector<bool>{true});
  CHECK(min(flags, {1}).to_vector<bool>() == std::vector<bool>{false, true});
  // f16/bf16 keep their dtype, computed wider.
  Tensor h = Tensor::from_vector<float>({0.5f, 1.5f, 2.0f, -1.0f}, {4}).to(DType::f16);
  CHECK(sum(h).dtype() == DType::f16);
  CHECK(sum(h).item<float>() == 3.0f);
  CHECK(mean(h).item<float>() == 0.75f);
  CHECK(max(h).item<float>() == 2.0f);
  Tensor bf = Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2}).to(DType::bf16);
  CHECK(mean(bf, {0}).dtype() == DType::bf16);
  check_relative(mean(bf, {0}), {2, 3});
  check_relative(sum(cube(DType::f64), {1}), {12, 15, 18, 21, 48, 51, 54, 57}, 0);
}

TEST_CASE("max, min and argmax", "[reduce]") {
  Tensor x = cube();
  check_relative(max(x, {1}), {8, 9, 10, 11, 20, 21, 22, 23});
  check_relative(min(x, {0}), {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  check_relative(max(x, {0, 2}), {15, 19, 23});
  CHECK(max(x).item<float>() == 23);
  CHECK(min(x, {2}, true).shape() == Shape{2, 3, 1});
  Tensor m = Tensor::from_vector<float>({1, 5, 5, 7, 2, 7}, {2, 3});
  CHECK(argmax(m).dtype() == DType::i64);
  CHECK(argmax(m).shape() == Shape{});
  CHECK(argmax(m).item<int64_t>() == 3);  // first of the two 7s, flattened
  CHECK(argmax(m, 1).to_vector<int64_t>() == std::vector<int64_t>{1, 0});  // first maximum
  CHECK(argmax(m, 0).to_vector<int64_t>() == std::vector<int64_t>{1, 0, 1});
  CHECK(argmax(m, -1, true).shape() == Shape{2, 1});
  CHECK(argmax(m, std::nullopt, true).shape() == Shape{1, 1});  // PyTorch's keepdim without a dim
  CHECK(argmax(m.transpose(0, 1), 1).to_vector<int64_t>() == std::vector<int64_t>{1, 0, 1});
  CHECK(argmax(Tensor::from_vector<bool>({false, true, true}, {3})).item<int64_t>() == 1);
  CHECK(argmax(Tensor::from_vector<int32_t>({-3, -1, -2}, {3})).item<int64_t>() == 1);
  CHECK(argmax(Tensor::scalar<float>(4)).item<int64_t>() == 0);
  CHECK(argmax(Tensor::scalar<float>(4), 0).item<int64_t>() == 0);
}

TEST_CASE("reductions propagate NaN", "[reduce]") {
  Tensor small = Tensor::from_vector<float>({1, NAN, 3, NAN}, {4});
  check_relative(max(small), {kNaN});
  check_relative(min(small), {kNaN});
  check_relative(sum(small), {kNaN});
  CHECK(argmax(small).item<int64_t>() == 1);  // NaN counts as the maximum; the first one wins
  std::vector<float> long_row(100, 1.0f);
  long_row[57] = NAN;  // inside the lane-parallel part of the row loop
  Tensor row = Tensor::from_vector<float>(long_row, {100});
  check_relative(max(row), {kNaN});
  check_relative(min(row), {kNaN});
  CHECK(argmax(row).item<int64_t>() == 57);
  check_relative(max(Tensor::from_vector<float>(long_row, {4, 25}), {1}), {1, 1, kNaN, 1});
  check_relative(max(Tensor::from_vector<float>(long_row, {25, 4}), {0}), {1, kNaN, 1, 1});  // columns
}

TEST_CASE("strided, 0-d and size-0 reductions", "[reduce][strided]") {
  Tensor x = cube();
  Tensor t = x.permute({2, 0, 1});  // [4,2,3]: t[k][i][j] = x[i][j][k]
  check_relative(sum(t, {0}), {6, 22, 38, 54, 70, 86});
  check_relative(max(t, {2}), {8, 20, 9, 21, 10, 22, 11, 23});
  check_relative(sum(x.slice(2, 0, 4, 2), {2}), {2, 10, 18, 26, 34, 42});  // k = 0, 2
  Tensor s = Tensor::scalar<float>(2.5f);
  CHECK(sum(s).item<float>() == 2.5f);
  CHECK(sum(s, {0}).shape() == Shape{});
  CHECK(mean(s, {-1}, true).item<float>() == 2.5f);
  CHECK(max(s).item<float>() == 2.5f);
  // Sums over nothing are 0, means NaN (PyTorch); kept dims of size 0 give empty results.
  check_relative(sum(Tensor::zeros({3, 0}), {1}), {0, 0, 0});
  check_relative(mean(Tensor::zeros({3, 0}), {1}), {kNaN, kNaN, kNaN});
  CHECK(sum(Tensor::zeros({0, 3}), {1}).shape() == Shape{0});
  CHECK(max(Tensor::zeros({0, 3}), {1}).shape() == Shape{0});
  CHECK(sum(Tensor::zeros({0})).item<float>() == 0);
}

TEST_CASE("reduction errors name the op", "[reduce][errors]") {
  Tensor x = cube();
  CHECK_THROWS_AS(sum(x, {3}), IndexError);
  CHECK_THROWS_WITH(sum(x, {3}), Catch::Contains("sum") && Catch::Contains("3"));
  CHECK_THROWS_AS(sum(x, {-4}), IndexError);
  CHECK_THROWS_AS(mean(x, {0, -3}), ValueError);  // the same dim twice
  CHECK_THROWS_WITH(mean(x, {0, -3}), Catch::Contains("mean") && Catch::Contains("f32[2,3,4]"));
  CHECK_THROWS_AS(max(x, {1, 1}), ValueError);
  CHECK_THROWS_AS(sum(Tensor::scalar<float>(1), {1}), IndexError);
  Tensor ints = Tensor::arange(4, DType::i32);
  CHECK_THROWS_AS(mean(ints), DTypeError);
  CHECK_THROWS_WITH(mean(ints), Catch::Contains("mean") && Catch::Contains("i32[4]"));
  CHECK_THROWS_AS(mean(Tensor::ones({2}, DType::boolean)), DTypeError);
  Tensor empty = Tensor::zeros({3, 0});
  CHECK_THROWS_AS(max(empty), ShapeError);
  CHECK_THROWS_WITH(max(empty, {1}), Catch::Contains("max") && Catch::Contains("f32[3,0]"));
  CHECK_THROWS_AS(min(empty, {1}), ShapeError);
  CHECK_THROWS_AS(argmax(empty), ShapeError);
  CHECK_THROWS_WITH(argmax(empty, 1), Catch::Contains("argmax"));
  CHECK_THROWS_AS(call_op("argmax", {x}, {{"dims", std::vector<int64_t>{0, 1}}}), ValueError);
  CHECK_THROWS_WITH(call_op("argmax", {x}, {{"dims", std::vector<int64_t>{0, 1}}}), Catch::Contains("argmax"));
  CHECK_THROWS_AS(argmax(x, 5), IndexError);
  CHECK_THROWS_AS(call_op("sum", {x}, {{"keepdim", int64_t{1}}}), ValueError);  // wrong attribute type
}
