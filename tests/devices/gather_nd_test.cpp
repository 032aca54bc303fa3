// gather_nd: the ONNX GatherND spec examples, a PyTorch reference for the benchmark's pattern,
// every dtype path, strided inputs and every error.
#include <catch2/catch.hpp>

#include "devices/ops.h"
#include "devices/registry.h"
#include "support/tensors.h"

using namespace troupe;

namespace {

using F = std::vector<float>;

Tensor cube222() { return Tensor::from_vector<float>({0, 1, 2, 3, 4, 5, 6, 7}, {2, 2, 2}); }

}  // namespace

TEST_CASE("gather_nd matches the ONNX GatherND examples", "[ops][gather_nd]") {
  Tensor square = Tensor::from_vector<int32_t>({0, 1, 2, 3}, {2, 2});
  SECTION("example 1: elements") {
    Tensor out = gather_nd(square, i64({0, 0, 1, 1}, {2, 2}));
    CHECK(out.shape() == Shape{2});
    CHECK(out.to_vector<int32_t>() == std::vector<int32_t>{0, 3});
  }
  SECTION("example 2: rows") {
    Tensor out = gather_nd(square, i64({1, 0}, {2, 1}));
    CHECK(out.shape() == Shape{2, 2});
    CHECK(out.to_vector<int32_t>() == std::vector<int32_t>{2, 3, 0, 1});
  }
  SECTION("example 3: rows of a cube") {
    Tensor out = gather_nd(cube222(), i64({0, 1, 1, 0}, {2, 2}));
    CHECK(out.shape() == Shape{2, 2});
    CHECK(out.to_vector<float>() == F{2, 3, 4, 5});
  }
  SECTION("example 4: leading index dims") {
    Tensor out = gather_nd(cube222(), i64({0, 1, 1, 0}, {2, 1, 2}));
    CHECK(out.shape() == Shape{2, 1, 2});
    CHECK(out.to_vector<float>() == F{2, 3, 4, 5});
  }
  SECTION("example 5: batch_dims = 1") {
    Tensor out = gather_nd(cube222(), i64({1, 0}, {2, 1}), 1);
    CHECK(out.shape() == Shape{2, 2});
    CHECK(out.to_vector<float>() == F{2, 3, 4, 5});
  }
  SECTION("batch_dims = 1 down to elements") {
    // batch 0 reads data[0][0][1], batch 1 reads data[1][1][1].
    Tensor out = gather_nd(cube222(), i64({0, 1, 1, 1}, {2, 1, 2}), 1);
    CHECK(out.shape() == Shape{2, 1});
    CHECK(out.to_vector<float>() == F{1, 7});
  }
  SECTION("batch_dims = 1 on a matrix") {
    Tensor out = gather_nd(square, i64({0, 1}, {2, 1}), 1);  // square[0][0], square[1][1]
    CHECK(out.shape() == Shape{2});
    CHECK(out.to_vector<int32_t>() == std::vector<int32_t>{0, 3});
  }
  SECTION("batch_dims = 2") {
    // out[i, j] = data[i, j, indices[i, j, 0]] with data[i, j, k] = 12 i + 4 j + k.
    Tensor data = Tensor::arange(24, DType::i64).reshape({2, 3, 4});
    Tensor out = gather_nd(data, i64({3, 0, -1, 1, 2, -4}, {2, 3, 1}), 2);
    CHECK(out.shape() == Shape{2, 3});
    CHECK(out.to_vector<int64_t>() == std::vector<int64_t>{3, 4, 11, 13, 18, 20});
  }
}

TEST_CASE("gather_nd matches PyTorch on the benchmark's pattern", "[ops][gather_nd]") {
  // torch.manual_seed(0); data = torch.randint(0, 1000, (4, 5, 3)).float() / 8;
  // indices = stack([randint(-4, 4, (8,)), randint(-5, 5, (8,))], -1); reference = data[indices.T]
  Tensor data = Tensor::from_vector<float>(
      {5.5,     29.875, 116.625, 95.0,    120.375, 47.375, 53.375,  62.875,  62.125, 85.375, 12.625, 108.25,
       94.5,    49.875, 109.75,  47.0,    7.0,     108.5,  99.25,   4.125,   15.75,  14.875, 48.875, 31.75,
       103.0,   105.125, 33.625, 121.125, 68.625,  60.0,   60.125,  1.5,     45.375, 45.0,   124.375, 10.625,
       102.75,  124.875, 88.875, 36.0,    97.25,   5.375,  112.0,   61.125,  96.375, 94.625, 35.375, 49.375,
       97.75,   83.875, 105.0,   121.125, 84.125,  55.125, 13.875,  35.0,    62.875, 88.25,  59.5,   40.875},
      {4, 5, 3});
  Tensor indices = i64({-1, 3, 2, -3, -1, 2, -2, 0, 3, -5, 0, -5, -2, 3, -4, -4}, {8, 2});
  const F reference{13.875, 35.0,   62.875, 102.75, 124.875, 88.875, 121.125, 84.125,
                    55.125, 60.125, 1.5,    45.375, 94.625,  35.375, 49.375,  5.5,
                    29.875, 116.625, 36.0,  97.25,  5.375,   95.0,   120.375, 47.375};
  Tensor out = gather_nd(data, indices);
  CHECK(out.shape() == Shape{8, 3});
  CHECK(out.to_vector<float>() == reference);
  CHECK(gather_nd(data, indices.to(DType::i32)).to_vector<float>() == reference);
  // The naive loop the benchmark compares against gives the same rows.
  std::vector<Tensor> rows;
  for (int64_t r = 0; r < 8; ++r)
    rows.push_back(data.select(0, indices.select(0, r).select(0, 0).item<int64_t>())
                       .select(0, indices.select(0, r).select(0, 1).item<int64_t>()));
  CHECK(stack(rows).to_vector<float>() == reference);
}

TEST_CASE("gather_nd copies large outputs on several threads with streaming stores, row for row", "[ops][gather_nd]") {
  // 4096 rows of 256 floats (4 MiB: threads and streaming stores), and rows of 100 floats (not
  // whole cache lines: plain copies), each row checked against select().
  const Tensor data = Tensor::arange(64 * 128 * 256).reshape({64, 128, 256}).to(DType::f32);
  std::vector<int64_t> coordinates;
  for (int64_t r = 0; r < 4096; ++r) coordinates.insert(coordinates.end(), {(r * 37) % 64, (r * 101) % 128 - (r % 2) * 128});
  const Tensor indices = i64(coordinates, {4096, 2});
  for (const Tensor& source : {data, data.slice(2, 0, 100).contiguous()}) {
    const Tensor out = gather_nd(source, indices);
    REQUIRE(out.shape() == Shape{4096, source.size(2)});
    for (int64_t r : {int64_t{0}, int64_t{1}, int64_t{2047}, int64_t{2048}, int64_t{4095}}) {
      const Tensor row = source.select(0, coordinates[r * 2]).select(0, (coordinates[r * 2 + 1] + 128) % 128);
      CHECK(out.select(0, r).to_vector<float>() == row.to_vector<float>());
    }
    // Every element: the sum of out equals the sum over the addressed rows.
    double want = 0;
    for (int64_t r = 0; r < 4096; ++r) {
      const double first = double((coordinates[r * 2] * 128 + (coordinates[r * 2 + 1] + 128) % 128) * 256);
      const int64_t width = source.size(2);
      want += width * first + width * (width - 1) / 2.0;
    }
    CHECK(sum(out.to(DType::f64)).item<double>() == want);
  }
}

TEST_CASE("gather_nd handles every dtype, strided inputs and empty indices", "[ops][gather_nd]") {
  Tensor square = Tensor::from_vector<float>({0, 1, 2, 3}, {2, 2});
  Tensor corners = i64({0, 0, 1, 1, -1, 0}, {3, 2});
  // One element per row takes the fixed-size path for 1, 2, 4 and 8 byte elements.
  for (DType t : {DType::u8, DType::boolean, DType::f16, DType::bf16, DType::i32, DType::f32, DType::i64, DType::f64})
    CHECK(gather_nd(square.to(t), corners).to_vector<float>() == (t == DType::boolean ? F{0, 1, 1} : F{0, 3, 2}));
  CHECK(gather_nd(square.to(DType::i64), i64({1}, {1, 1})).to_vector<int64_t>() == std::vector<int64_t>{2, 3});

  // Strided data: t[i, k, j] = x[i, j, k] = 12 i + 4 j + k, so a slice t[i, k, :] has stride 4.
  Tensor t = Tensor::arange(24).reshape({2, 3, 4}).transpose(1, 2);
  CHECK(gather_nd(t, i64({1, 2, 0, 0}, {2, 2})).to_vector<float>() == F{14, 18, 22, 0, 4, 8});
  // A view with an offset whose slices are still dense: rows 1..2 of a [4,3] matrix.
  Tensor rows = Tensor::arange(12).reshape({4, 3}).slice(0, 1, 3);
  CHECK(gather_nd(rows, i64({1, 0}, {2, 1})).to_vector<float>() == F{6, 7, 8, 3, 4, 5});
  // Strided indices: the transpose of [[0, 1], [0, 1]] is [[0, 0], [1, 1]].
  Tensor columns = i64({0, 1, 0, 1}, {2, 2}).transpose(0, 1);
  CHECK(gather_nd(square, columns).to_vector<float>() == F{0, 3});

  CHECK(gather_nd(square, i64({}, {0, 2})).shape() == Shape{0});
  CHECK(gather_nd(cube222(), i64({}, {0, 3, 1})).shape() == Shape{0, 3, 2, 2});
  CHECK(gather_nd(Tensor::zeros({2, 0}), i64({1}, {1, 1})).shape() == Shape{1, 0});
  // Inference alone gives the ONNX output shape: indices.shape[:-1] + data.shape[b + m:].
  CHECK(OpRegistry::global().infer("gather_nd", {TensorMeta{DType::f32, {64, 128, 256}, Device::cpu()}, TensorMeta{DType::i64, {4096, 2}, Device::cpu()}})[0] ==
        TensorMeta{DType::f32, {4096, 256}, Device::cpu()});
  CHECK(OpRegistry::global()
            .infer("gather_nd", {TensorMeta{DType::f16, {5, 6, 7, 8}, Device::cpu()}, TensorMeta{DType::i32, {5, 3, 1}, Device::cpu()}},
                   {{"batch_dims", int64_t{1}}})[0] == TensorMeta{DType::f16, {5, 3, 7, 8}, Device::cpu()});
}

TEST_CASE("gather_nd errors name the index, its position and the dim size", "[ops][gather_nd][errors]") {
  Tensor square = Tensor::from_vector<float>({0, 1, 2, 3}, {2, 2});
  CHECK_THROWS_AS(gather_nd(square, i64({0, 0, 1, 2}, {2, 2})), IndexError);
  CHECK_THROWS_WITH(gather_nd(square, i64({0, 0, 1, 2}, {2, 2})),
                    Catch::Contains("gather_nd") && Catch::Contains("index 2") && Catch::Contains("indices[1,1]") &&
                        Catch::Contains("size 2"));
  CHECK_THROWS_WITH(gather_nd(square, i64({-3, 0}, {1, 2})),
                    Catch::Contains("index -3") && Catch::Contains("indices[0,0]"));
  CHECK_THROWS_WITH(gather_nd(cube222(), i64({0, 1, 0, 5}, {2, 1, 2}), 1),
                    Catch::Contains("index 5") && Catch::Contains("indices[1,0,1]") && Catch::Contains("dim 2"));
  CHECK_THROWS_AS(gather_nd(Tensor::zeros({0, 2}), i64({0}, {1, 1})), IndexError);

  CHECK_THROWS_AS(gather_nd(square, Tensor::zeros({1, 2})), DTypeError);
  CHECK_THROWS_WITH(gather_nd(square, Tensor::zeros({1, 2})),
                    Catch::Contains("gather_nd") && Catch::Contains("f32[1,2]") && Catch::Contains("f32[2,2]"));
  CHECK_THROWS_AS(gather_nd(square, i64({0, 0, 0}, {1, 3})), ShapeError);
  CHECK_THROWS_WITH(gather_nd(square, i64({0, 0, 0}, {1, 3})),
                    Catch::Contains("gather_nd") && Catch::Contains("i64[1,3]"));
  CHECK_THROWS_AS(gather_nd(square, i64({}, {1, 0})), ShapeError);
  CHECK_THROWS_AS(gather_nd(Tensor::scalar<float>(1), i64({0}, {1})), ShapeError);
  CHECK_THROWS_AS(gather_nd(square, Tensor::scalar<int64_t>(0)), ShapeError);
  CHECK_THROWS_AS(gather_nd(square, i64({0, 1}, {2, 1}), -1), ValueError);
  CHECK_THROWS_WITH(gather_nd(square, i64({0, 1}, {2, 1}), -1), Catch::Contains("gather_nd"));
  CHECK_THROWS_AS(gather_nd(square, i64({0, 1}, {2, 1}), 2), ShapeError);
  CHECK_THROWS_AS(gather_nd(cube222(), i64({0, 1, 0}, {3, 1}), 1), ShapeError);
  CHECK_THROWS_WITH(gather_nd(cube222(), i64({0, 1, 0}, {3, 1}), 1),
                    Catch::Contains("batch dim 0") && Catch::Contains("f32[2,2,2]") && Catch::Contains("i64[3,1]"));
}
