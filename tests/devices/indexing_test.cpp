// index_select, embedding and where.
#include <catch2/catch.hpp>

#include "devices/ops.h"
#include "support/tensors.h"

using namespace troupe;

namespace {

using F = std::vector<float>;

}  // namespace

TEST_CASE("index_select picks entries along a dim", "[ops][index_select]") {
  Tensor x = Tensor::arange(12).reshape({3, 4});
  Tensor rows = index_select(x, 0, i64({2, 0, 2}, {3}));
  CHECK(rows.shape() == Shape{3, 4});
  CHECK(rows.to_vector<float>() == F{8, 9, 10, 11, 0, 1, 2, 3, 8, 9, 10, 11});
  Tensor cols = index_select(x, -1, Tensor::from_vector<int32_t>({3, 1}, {2}));
  CHECK(cols.shape() == Shape{3, 2});
  CHECK(cols.to_vector<float>() == F{3, 1, 7, 5, 11, 9});
  CHECK(index_select(x, 0, i64({}, {0})).shape() == Shape{0, 4});
  // Strided x (x^T is [4,3]) and a strided index (every other element of {1, 9, 0, 9}).
  CHECK(index_select(x.transpose(0, 1), 0, i64({1, 9, 0, 9}, {4}).slice(0, 0, 4, 2)).to_vector<float>() ==
        F{1, 5, 9, 0, 4, 8});
  Tensor cube = Tensor::arange(24, DType::i64).reshape({2, 3, 4});
  CHECK(index_select(cube, 1, i64({2}, {1})).to_vector<int64_t>() == std::vector<int64_t>{8, 9, 10, 11, 20, 21, 22, 23});
  CHECK(index_select(Tensor::from_vector<bool>({true, false}, {2}), 0, i64({1, 1, 0}, {3})).to_vector<bool>() ==
        std::vector<bool>{false, false, true});
}

TEST_CASE("index_select errors", "[ops][index_select][errors]") {
  Tensor x = Tensor::arange(12).reshape({3, 4});
  CHECK_THROWS_AS(index_select(x, 0, i64({0, 3}, {2})), IndexError);
  CHECK_THROWS_WITH(index_select(x, 0, i64({0, 3}, {2})),
                    Catch::Contains("index_select") && Catch::Contains("index 3") && Catch::Contains("position 1") &&
                        Catch::Contains("f32[3,4]"));
  CHECK_THROWS_AS(index_select(x, 1, i64({-1}, {1})), IndexError);
  CHECK_THROWS_AS(index_select(x, 0, Tensor::from_vector<float>({0}, {1})), DTypeError);
  CHECK_THROWS_WITH(index_select(x, 0, Tensor::from_vector<float>({0}, {1})),
                    Catch::Contains("index_select") && Catch::Contains("f32[1]"));
  CHECK_THROWS_AS(index_select(x, 0, i64({0, 1}, {1, 2})), ShapeError);
  CHECK_THROWS_WITH(index_select(x, 0, i64({0, 1}, {1, 2})),
                    Catch::Contains("index_select") && Catch::Contains("i64[1,2]"));
  CHECK_THROWS_AS(index_select(x, 2, i64({0}, {1})), IndexError);
  CHECK_THROWS_AS(index_select(Tensor::scalar<float>(1), 0, i64({0}, {1})), ShapeError);
}

TEST_CASE("embedding picks weight rows by indices of any shape", "[ops][embedding]") {
  Tensor weight = Tensor::from_vector<float>({0, 1, 10, 11, 20, 21, 30, 31}, {4, 2});
  Tensor e = embedding(i64({3, 0, 1, 1}, {2, 2}), weight);
  CHECK(e.shape() == Shape{2, 2, 2});
  CHECK(e.to_vector<float>() == F{30, 31, 0, 1, 10, 11, 10, 11});
  CHECK(embedding(Tensor::scalar<int32_t>(2), weight).to_vector<float>() == F{20, 21});
  CHECK(embedding(i64({}, {0, 5}), weight).shape() == Shape{0, 5, 2});
  // A strided (transposed) weight and f16 values.
  Tensor wt = Tensor::from_vector<float>({0, 10, 20, 1, 11, 21}, {2, 3}).transpose(0, 1).to(DType::f16);
  Tensor h = embedding(Tensor::from_vector<int32_t>({2, 0}, {2}), wt);
  CHECK(h.dtype() == DType::f16);
  CHECK(h.to_vector<float>() == F{20, 21, 0, 1});

  CHECK_THROWS_AS(embedding(i64({0, 4}, {2}), weight), IndexError);
  CHECK_THROWS_WITH(embedding(i64({0, 4}, {2}), weight),
                    Catch::Contains("embedding") && Catch::Contains("index 4") && Catch::Contains("f32[4,2]"));
  CHECK_THROWS_AS(embedding(i64({-1}, {1}), weight), IndexError);
  CHECK_THROWS_AS(embedding(i64({0}, {1}), Tensor::zeros({4})), ShapeError);
  CHECK_THROWS_WITH(embedding(i64({0}, {1}), Tensor::zeros({4})), Catch::Contains("embedding") && Catch::Contains("f32[4]"));
  CHECK_THROWS_AS(embedding(Tensor::zeros({2}), weight), DTypeError);
  CHECK_THROWS_WITH(embedding(Tensor::zeros({2}), weight), Catch::Contains("embedding") && Catch::Contains("f32[2]"));
}

TEST_CASE("where selects, broadcasting all three and promoting x and y", "[ops][where]") {
  Tensor cond = Tensor::from_vector<bool>({true, false, true, false, false, true}, {2, 3});
  Tensor x = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(where(cond, x, Tensor::scalar<float>(-1)).to_vector<float>() == F{1, -1, 3, -1, -1, 6});
  // [3] with [2,1] with [1,3] -> [2,3].
  Tensor row_cond = Tensor::from_vector<bool>({true, false, true}, {3});
  Tensor col = Tensor::from_vector<float>({10, 20}, {2, 1});
  Tensor row = Tensor::from_vector<float>({-1, -2, -3}, {1, 3});
  Tensor w = where(row_cond, col, row);
  CHECK(w.shape() == Shape{2, 3});
  CHECK(w.to_vector<float>() == F{10, -2, 10, 20, -2, 20});
  // i32 with f64 promotes to f64.
  Tensor p = where(row_cond, Tensor::from_vector<int32_t>({1, 2, 3}, {3}), Tensor::scalar<double>(0.5));
  CHECK(p.dtype() == DType::f64);
  CHECK(p.to_vector<double>() == std::vector<double>{1, 0.5, 3});
  // Strided inputs: transposed condition and x.
  Tensor t = where(cond.transpose(0, 1), x.transpose(0, 1), Tensor::zeros({3, 2}));
  CHECK(t.to_vector<float>() == F{1, 0, 0, 0, 3, 6});
  CHECK(where(Tensor::scalar<bool>(false), Tensor::scalar<int64_t>(1), Tensor::scalar<int64_t>(2)).item<int64_t>() == 2);
  CHECK(where(cond, Tensor::ones({2, 3}, DType::boolean), Tensor::zeros({1}, DType::boolean)).to_vector<bool>() ==
        cond.to_vector<bool>());
  CHECK(where(row_cond, Tensor::zeros({0, 3}), Tensor::ones({3})).shape() == Shape{0, 3});

  CHECK_THROWS_AS(where(x, x, x), DTypeError);
  CHECK_THROWS_WITH(where(x, x, x), Catch::Contains("where") && Catch::Contains("f32[2,3]"));
  CHECK_THROWS_AS(where(cond, x, Tensor::zeros({2})), ShapeError);
  CHECK_THROWS_WITH(where(cond, x, Tensor::zeros({2})), Catch::Contains("where") && Catch::Contains("[2]"));
}
