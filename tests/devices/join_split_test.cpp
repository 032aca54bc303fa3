// cat, stack, split, chunk, flip and the view ops run through the registry.
#include <catch2/catch.hpp>

#include "devices/ops.h"
#include "devices/registry.h"

using namespace troupe;

namespace {

using F = std::vector<float>;

Tensor matrix23() { return Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}); }

}  // namespace

TEST_CASE("cat joins along an existing dim", "[ops][cat]") {
  Tensor a = matrix23();
  Tensor b = Tensor::from_vector<float>({7, 8}, {2, 1});
  Tensor c = cat({a, b}, 1);
  CHECK(c.shape() == Shape{2, 4});
  CHECK(c.to_vector<float>() == F{1, 2, 3, 7, 4, 5, 6, 8});
  CHECK(cat({a, b}, -1).to_vector<float>() == c.to_vector<float>());
  CHECK(cat({a, a}).shape() == Shape{4, 3});
  CHECK(cat({a, a}).to_vector<float>() == F{1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6});
  CHECK(cat({a}).to_vector<float>() == a.to_vector<float>());
  CHECK(cat({a, Tensor::zeros({2, 0})}, 1).to_vector<float>() == a.to_vector<float>());
  // Strided inputs: a transposed is [[1,4],[2,5],[3,6]].
  Tensor t = a.transpose(0, 1);
  CHECK(cat({t, t.slice(0, 0, 1)}).to_vector<float>() == F{1, 4, 2, 5, 3, 6, 1, 4});
  // A middle dim of a 3-d tensor: each piece lands in its own range.
  Tensor x = Tensor::arange(24).reshape({2, 3, 4});
  Tensor y = Tensor::full({2, 1, 4}, -1.0);
  Tensor xy = cat({x, y}, 1);
  CHECK(xy.shape() == Shape{2, 4, 4});
  CHECK(xy.slice(1, 0, 3).to_vector<float>() == x.to_vector<float>());
  CHECK(xy.slice(1, 3, 4).to_vector<float>() == F(8, -1.0f));
  // Any dtype: elements move as bytes.
  CHECK(cat({Tensor::from_vector<int64_t>({1, 2}, {2}), Tensor::from_vector<int64_t>({3}, {1})})
            .to_vector<int64_t>() == std::vector<int64_t>{1, 2, 3});
  CHECK(cat({Tensor::from_vector<bool>({true}, {1}), Tensor::from_vector<bool>({false, true}, {2})})
            .to_vector<bool>() == std::vector<bool>{true, false, true});
  CHECK(cat({a.to(DType::bf16), b.to(DType::bf16)}, 1).to_vector<float>() == F{1, 2, 3, 7, 4, 5, 6, 8});
}

TEST_CASE("cat errors name the op, the inputs and their shapes", "[ops][cat][errors]") {
  Tensor a = matrix23();
  Tensor b = Tensor::from_vector<float>({7, 8}, {2, 1});
  CHECK_THROWS_AS(cat({a, b.to(DType::f64)}, 1), DTypeError);
  CHECK_THROWS_WITH(cat({a, b.to(DType::f64)}, 1),
                    Catch::Contains("cat") && Catch::Contains("f32[2,3]") && Catch::Contains("f64[2,1]"));
  CHECK_THROWS_AS(cat({a, b}, 0), ShapeError);
  CHECK_THROWS_WITH(cat({a, b}, 0), Catch::Contains("cat") && Catch::Contains("input 1") &&
                                        Catch::Contains("f32[2,1]") && Catch::Contains("f32[2,3]"));
  CHECK_THROWS_AS(cat({a, Tensor::zeros({3})}), ShapeError);
  CHECK_THROWS_AS(cat({a}, 2), IndexError);
  CHECK_THROWS_WITH(cat({a}, 2), Catch::Contains("cat"));
  CHECK_THROWS_AS(cat({Tensor::scalar<float>(1)}), ShapeError);
  CHECK_THROWS_AS(cat({}), ValueError);
  CHECK_THROWS_WITH(cat({}), Catch::Contains("cat"));
}

TEST_CASE("stack joins along a new dim", "[ops][stack]") {
  Tensor p = Tensor::from_vector<float>({1, 2}, {2});
  Tensor q = Tensor::from_vector<float>({3, 4}, {2});
  CHECK(stack({p, q}).shape() == Shape{2, 2});
  CHECK(stack({p, q}).to_vector<float>() == F{1, 2, 3, 4});
  CHECK(stack({p, q}, 1).to_vector<float>() == F{1, 3, 2, 4});
  CHECK(stack({p, q}, -1).to_vector<float>() == F{1, 3, 2, 4});
  CHECK(stack({Tensor::scalar<int32_t>(5), Tensor::scalar<int32_t>(6)}).to_vector<int32_t>() ==
        std::vector<int32_t>{5, 6});
  Tensor a = matrix23();
  Tensor s = stack({a, a.transpose(0, 1).transpose(0, 1), a}, 1);  // a strided view in the middle
  CHECK(s.shape() == Shape{2, 3, 3});
  CHECK(s.to_vector<float>() == F{1, 2, 3, 1, 2, 3, 1, 2, 3, 4, 5, 6, 4, 5, 6, 4, 5, 6});

  CHECK_THROWS_AS(stack({p, Tensor::zeros({3})}), ShapeError);
  CHECK_THROWS_WITH(stack({p, Tensor::zeros({3})}),
                    Catch::Contains("stack") && Catch::Contains("input 1") && Catch::Contains("f32[3]"));
  CHECK_THROWS_AS(stack({p, q.to(DType::i64)}), DTypeError);
  CHECK_THROWS_WITH(stack({p, q.to(DType::i64)}), Catch::Contains("stack") && Catch::Contains("i64[2]"));
  CHECK_THROWS_AS(stack({p, q}, 2), IndexError);
}

TEST_CASE("split cuts into views of a size or of given sizes", "[ops][split]") {
  Tensor x = Tensor::arange(10);
  auto pieces = split(x, 4);
  REQUIRE(pieces.size() == 3);
  CHECK(pieces[0].to_vector<float>() == F{0, 1, 2, 3});
  CHECK(pieces[1].to_vector<float>() == F{4, 5, 6, 7});
  CHECK(pieces[2].to_vector<float>() == F{8, 9});
  for (auto& p : pieces) CHECK(p.shares_storage_with(x));
  // Writing to a piece copies it first: x is untouched.
  pieces[0].mutable_data<float>()[0] = 100;
  CHECK(x.to_vector<float>()[0] == 0);

  auto uneven = split(x, std::vector<int64_t>{3, 0, 7});
  REQUIRE(uneven.size() == 3);
  CHECK(uneven[0].to_vector<float>() == F{0, 1, 2});
  CHECK(uneven[1].shape() == Shape{0});
  CHECK(uneven[2].to_vector<float>() == F{3, 4, 5, 6, 7, 8, 9});

  auto columns = split(matrix23(), 2, -1);
  REQUIRE(columns.size() == 2);
  CHECK(columns[0].to_vector<float>() == F{1, 2, 4, 5});
  CHECK(columns[1].shape() == Shape{2, 1});
  CHECK(columns[1].to_vector<float>() == F{3, 6});
  auto rows = split(matrix23().transpose(0, 1), std::vector<int64_t>{1, 2});  // strided input
  CHECK(rows[0].to_vector<float>() == F{1, 4});
  CHECK(rows[1].to_vector<float>() == F{2, 5, 3, 6});
  CHECK(split(Tensor::zeros({0}), 3).size() == 1);
}

TEST_CASE("chunk follows torch.chunk", "[ops][split]") {
  auto a = chunk(Tensor::arange(10), 3);  // ceil(10/3) = 4: 4, 4, 2
  REQUIRE(a.size() == 3);
  CHECK(a[2].to_vector<float>() == F{8, 9});
  auto b = chunk(Tensor::arange(6, DType::i64), 4);  // ceil(6/4) = 2: only three pieces
  REQUIRE(b.size() == 3);
  CHECK(b[1].to_vector<int64_t>() == std::vector<int64_t>{2, 3});
  auto c = chunk(matrix23(), 2, 1);
  REQUIRE(c.size() == 2);
  CHECK(c[0].to_vector<float>() == F{1, 2, 4, 5});
  auto empty = chunk(Tensor::zeros({0, 2}), 3);
  CHECK(empty.size() == 3);
  CHECK(empty[2].shape() == Shape{0, 2});
}

TEST_CASE("split and chunk errors", "[ops][split][errors]") {
  Tensor x = Tensor::arange(10);
  auto& registry = OpRegistry::global();
  CHECK_THROWS_AS(registry.call("split", {x}), ValueError);  // neither size nor sizes
  CHECK_THROWS_WITH(registry.call("split", {x}), Catch::Contains("split"));
  CHECK_THROWS_AS(registry.call("split", {x}, {{"size", int64_t{2}}, {"sizes", std::vector<int64_t>{5, 5}}}),
                  ValueError);
  CHECK_THROWS_AS(split(x, std::vector<int64_t>{3, 4}), ShapeError);
  CHECK_THROWS_WITH(split(x, std::vector<int64_t>{3, 4}),
                    Catch::Contains("split") && Catch::Contains("sum to 7") && Catch::Contains("f32[10]"));
  CHECK_THROWS_AS(split(x, std::vector<int64_t>{12, -2}), ValueError);
  CHECK_THROWS_AS(split(x, -2), ValueError);
  CHECK_THROWS_AS(split(x, 2, 1), IndexError);
  CHECK_THROWS_AS(split(Tensor::scalar<float>(1), 1), ShapeError);
  CHECK_THROWS_AS(chunk(x, 0), ValueError);
  CHECK_THROWS_WITH(chunk(x, 0), Catch::Contains("chunk"));
  CHECK_THROWS_AS(chunk(Tensor::scalar<float>(1), 2), ShapeError);
  CHECK_THROWS_AS(registry.call("chunk", {x}), ValueError);  // chunks is required
}

TEST_CASE("flip reverses the given dims", "[ops][flip]") {
  Tensor a = matrix23();
  CHECK(flip(a, {0}).to_vector<float>() == F{4, 5, 6, 1, 2, 3});
  CHECK(flip(a, {1}).to_vector<float>() == F{3, 2, 1, 6, 5, 4});
  CHECK(flip(a, {-1}).to_vector<float>() == F{3, 2, 1, 6, 5, 4});
  CHECK(flip(a, {0, 1}).to_vector<float>() == F{6, 5, 4, 3, 2, 1});
  CHECK(flip(a, {}).to_vector<float>() == a.to_vector<float>());
  Tensor f = flip(a, {1});
  CHECK(f.is_contiguous());
  CHECK_FALSE(f.shares_storage_with(a));
  // Strided input: a transposed is [[1,4],[2,5],[3,6]].
  CHECK(flip(a.transpose(0, 1), {0}).to_vector<float>() == F{3, 6, 2, 5, 1, 4});
  CHECK(flip(Tensor::arange(24).reshape({2, 3, 4}), {1}).select(0, 1).select(0, 0).to_vector<float>() ==
        F{20, 21, 22, 23});
  CHECK(flip(Tensor::from_vector<bool>({true, false, false}, {3}), {0}).to_vector<bool>() ==
        std::vector<bool>{false, false, true});
  CHECK(flip(Tensor::arange(3, DType::i64), {0}).to_vector<int64_t>() == std::vector<int64_t>{2, 1, 0});
  CHECK(flip(Tensor::scalar<float>(7), {0}).item<float>() == 7);

  CHECK_THROWS_AS(flip(a, {0, -2}), ShapeError);
  CHECK_THROWS_WITH(flip(a, {0, -2}), Catch::Contains("flip") && Catch::Contains("f32[2,3]"));
  CHECK_THROWS_AS(flip(a, {2}), IndexError);
  CHECK_THROWS_WITH(flip(a, {2}), Catch::Contains("flip"));
  CHECK_THROWS_AS(OpRegistry::global().call("flip", {a}), ValueError);  // dims is required
}

TEST_CASE("view ops and cast run through the registry", "[ops][views]") {
  auto& registry = OpRegistry::global();
  Tensor a = matrix23();
  Tensor r = registry.call("reshape", {a}, {{"shape", std::vector<int64_t>{3, -1}}})[0];
  CHECK(r.shape() == Shape{3, 2});
  CHECK(r.shares_storage_with(a));
  CHECK(registry.infer("reshape", {a.meta()}, {{"shape", std::vector<int64_t>{-1}}})[0] == TensorMeta{DType::f32, {6}, Device::cpu()});
  Tensor t = registry.call("transpose", {a}, {{"dim0", int64_t{0}}, {"dim1", int64_t{-1}}})[0];
  CHECK(t.to_vector<float>() == F{1, 4, 2, 5, 3, 6});
  Tensor p = registry.call("permute", {Tensor::zeros({2, 3, 4})}, {{"dims", std::vector<int64_t>{2, 0, 1}}})[0];
  CHECK(p.shape() == Shape{4, 2, 3});
  CHECK(registry.call("squeeze", {Tensor::zeros({2, 1})}, {{"dim", int64_t{1}}})[0].shape() == Shape{2});
  CHECK(registry.call("unsqueeze", {a}, {{"dim", int64_t{0}}})[0].shape() == Shape{1, 2, 3});
  Tensor c = registry.call("contiguous", {t})[0];
  CHECK(c.is_contiguous());
  CHECK(c.to_vector<float>() == F{1, 4, 2, 5, 3, 6});
  Tensor i = registry.call("cast", {a}, {{"dtype", std::string("int64")}})[0];
  CHECK(i.dtype() == DType::i64);
  CHECK(i.to_vector<int64_t>() == std::vector<int64_t>{1, 2, 3, 4, 5, 6});
  CHECK(registry.infer("cast", {a.meta()}, {{"dtype", std::string("bf16")}})[0] == TensorMeta{DType::bf16, {2, 3}, Device::cpu()});
  CHECK(registry.call("cast", {t}, {{"dtype", std::string("f16")}})[0].to_vector<float>() == F{1, 4, 2, 5, 3, 6});

  CHECK_THROWS_AS(registry.call("reshape", {a}, {{"shape", std::vector<int64_t>{4, 2}}}), ShapeError);
  CHECK_THROWS_WITH(registry.call("reshape", {a}, {{"shape", std::vector<int64_t>{4, 2}}}),
                    Catch::Contains("reshape") && Catch::Contains("[2,3]") && Catch::Contains("[4,2]"));
  CHECK_THROWS_AS(registry.infer("reshape", {a.meta()}, {{"shape", std::vector<int64_t>{-1, -1}}}), ShapeError);
  CHECK_THROWS_AS(registry.call("transpose", {a}, {{"dim0", int64_t{0}}, {"dim1", int64_t{2}}}), IndexError);
  CHECK_THROWS_WITH(registry.call("transpose", {a}, {{"dim0", int64_t{0}}, {"dim1", int64_t{2}}}),
                    Catch::Contains("transpose"));
  CHECK_THROWS_AS(registry.call("permute", {a}, {{"dims", std::vector<int64_t>{1, 1}}}), ShapeError);
  CHECK_THROWS_WITH(registry.call("permute", {a}, {{"dims", std::vector<int64_t>{0}}}),
                    Catch::Contains("permute") && Catch::Contains("f32[2,3]"));
  CHECK_THROWS_AS(registry.call("unsqueeze", {a}, {{"dim", int64_t{5}}}), IndexError);
  CHECK_THROWS_AS(registry.call("squeeze", {a}), ValueError);  // dim is required
  CHECK_THROWS_AS(registry.call("cast", {a}, {{"dtype", std::string("float128")}}), DTypeError);
  CHECK_THROWS_WITH(registry.call("cast", {a}, {{"dtype", std::string("float128")}}),
                    Catch::Contains("cast") && Catch::Contains("float128") && Catch::Contains("f32[2,3]"));
}
