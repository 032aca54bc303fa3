#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "devices/ops.h"
#include "devices/registry.h"
#include "support/close.h"

using namespace troupe;

namespace {

Tensor matrix(DType dtype = DType::f32) {
  return Tensor::from_vector<double>({1, 2, 3, -1, 0, 4}, {2, 3}).to(dtype);
}

// torch.softmax / log_softmax of matrix() in float64.
const std::vector<double> kSoftmaxLast = {0.09003057317038045,  0.2447284710547976, 0.6652409557748218,
                                          0.006573263185309083, 0.0178679818703045, 0.9755587549443865};
const std::vector<double> kSoftmaxFirst = {0.8807970779778823,  0.8807970779778823,  0.2689414213699951,
                                           0.11920292202211755, 0.11920292202211755, 0.7310585786300049};
const std::vector<double> kLogSoftmaxLast = {-2.4076059644443806, -1.4076059644443804, -0.4076059644443804,
                                             -5.024744890138822,  -4.024744890138822,  -0.02474489013882259};
const std::vector<double> kLogSoftmaxFirst = {-0.1269280110429726, -0.1269280110429726, -1.3132616875182228,
                                              -2.1269280110429727, -2.1269280110429727, -0.31326168751822286};

// layer_norm reference input, weight and bias.
Tensor ln_x() { return Tensor::from_vector<float>({1, 2, 4, 7, 0.5, -0.5, 3, 1}, {2, 4}); }
Tensor ln_w() { return Tensor::from_vector<float>({1, 0.5, -2, 3}, {4}); }
Tensor ln_b() { return Tensor::from_vector<float>({0.1, 0.2, 0.3, 0.4}, {4}); }

}  // namespace

TEST_CASE("softmax and log_softmax match PyTorch", "[softmax]") {
  for (DType dt : {DType::f32, DType::f64}) {
    INFO(name(dt));
    check_values(softmax(matrix(dt)), kSoftmaxLast);
    check_values(softmax(matrix(dt), 1), kSoftmaxLast);
    check_values(softmax(matrix(dt), 0), kSoftmaxFirst);  // columns
    check_values(log_softmax(matrix(dt)), kLogSoftmaxLast);
    check_values(log_softmax(matrix(dt), -2), kLogSoftmaxFirst);
    CHECK(softmax(matrix(dt)).dtype() == dt);
  }
  // A middle dim of a [2,3,4] tensor: sin(arange(24)), softmax over dim 1 (torch, float64).
  std::vector<float> v(24);
  for (int i = 0; i < 24; ++i) v[i] = std::sin(static_cast<float>(i));
  const std::vector<double> expected = {
      0.2404613720716967,  0.5506110677935493,  0.6500233730277091,  0.3339395849548264,  0.11281586386216279,
      0.09097942975969558, 0.1980056163552405,  0.5593786890211223,  0.6467227640661406,  0.3584095024467552,
      0.1519710106170504,  0.1066817260240513,  0.1528262340017567,  0.3612962187032304,  0.6479540225355108,
      0.5463906749589875,  0.19597187456651005, 0.09075228424606244, 0.11354794135030201, 0.33126664042696363,
      0.6512018914317332,  0.5479514970507072,  0.2384980361141873,  0.12234268461404876};
  check_values(softmax(Tensor::from_vector<float>(v, {2, 3, 4}), 1), expected);
}

TEST_CASE("softmax is stable and handles strides, dtypes and edges", "[softmax]") {
  // Large logits would overflow exp without subtracting the maximum.
  Tensor big = Tensor::from_vector<float>({1000, 1001, 1002, -1000, -1001, -1002}, {2, 3});
  check_values(softmax(big), {0.09003057317038045, 0.2447284710547976, 0.6652409557748218, 0.6652409557748218,
                              0.2447284710547976, 0.09003057317038045});
  check_values(log_softmax(big, 1), {-2.4076059644443806, -1.4076059644443804, -0.4076059644443804,
                                     -0.4076059644443804, -1.4076059644443804, -2.4076059644443806});
  // Rows sum to one across a long row (vectorised exp plus tail).
  Tensor wide = Tensor::arange(3 * 1000, DType::f32).reshape({3, 1000});
  Tensor p = softmax(mul(wide, 0.01));
  check_values(sum(p, {1}), {1, 1, 1}, 1e-5);
  // Strided inputs: the transpose's softmax over dim 0 is the matrix's over dim 1.
  Tensor t = matrix().transpose(0, 1);
  Tensor st = softmax(t, 0);
  CHECK(st.shape() == Shape{3, 2});
  check_values(st.transpose(0, 1), kSoftmaxLast);
  // f16 / bf16 compute in f32 and keep their dtype.
  Tensor h = softmax(matrix(DType::f16));
  CHECK(h.dtype() == DType::f16);
  check_values(h, kSoftmaxLast, 2e-3);
  Tensor bf = log_softmax(matrix(DType::bf16), 0);
  CHECK(bf.dtype() == DType::bf16);
  check_values(bf, kLogSoftmaxFirst, 1e-2);
  // 0-d: a single element normalises to 1 (log 0); size-0 dims give empty results; NaN spreads in its row.
  CHECK(softmax(Tensor::scalar<float>(3)).item<float>() == 1.0f);
  CHECK(log_softmax(Tensor::scalar<float>(3), 0).item<float>() == 0.0f);
  CHECK(softmax(Tensor::zeros({0, 4})).shape() == Shape{0, 4});
  CHECK(softmax(Tensor::zeros({2, 0}), 1).shape() == Shape{2, 0});
  Tensor with_nan = softmax(Tensor::from_vector<float>({1, NAN, 2, 1, 2, 3}, {2, 3}));
  const auto values = with_nan.to_vector<float>();
  CHECK(std::isnan(values[0]));
  CHECK(std::isnan(values[2]));
  CHECK(values[5] == Approx(0.6652409557748218));
}

TEST_CASE("softmax errors name the op", "[softmax][errors]") {
  Tensor ints = Tensor::arange(4, DType::i64);
  CHECK_THROWS_AS(softmax(ints), DTypeError);
  CHECK_THROWS_WITH(softmax(ints), Catch::Contains("softmax") && Catch::Contains("i64[4]"));
  CHECK_THROWS_AS(log_softmax(Tensor::ones({2}, DType::boolean)), DTypeError);
  CHECK_THROWS_WITH(log_softmax(Tensor::ones({2}, DType::boolean)), Catch::Contains("log_softmax"));
  CHECK_THROWS_AS(softmax(matrix(), 2), IndexError);
  CHECK_THROWS_WITH(softmax(matrix(), 2), Catch::Contains("softmax") && Catch::Contains("2"));
  CHECK_THROWS_AS(log_softmax(matrix(), -3), IndexError);
}

TEST_CASE("layer_norm matches PyTorch", "[layer_norm]") {
  // torch.nn.functional.layer_norm in float64, eps 1e-5.
  const std::vector<double> plain = {-1.0910884120486357,  -0.6546530472291815, 0.21821768240972705, 1.5275237768680898,
                                     -0.39223106341341424, -1.1766931902402427, 1.568924253653657,   0.0};
  const std::vector<double> scaled = {-1.0910884120486357,  -0.32732652361459075, -0.4364353648194541,
                                      4.582571330604269,    -0.39223106341341424, -0.5883465951201213,
                                      -3.137848507307314,   0.0};
  const std::vector<double> affine = {-0.9910884120486357, -0.12732652361459074, -0.13643536481945412,
                                      4.982571330604269,   -0.2922310634134142,  -0.3883465951201213,
                                      -2.837848507307314,  0.4};
  const std::vector<double> two_dims = {-0.5590164353587915, -0.11180328707175824, 0.7826230095023083,
                                        2.124262454363408,   -0.7826230095023081,  -1.2298361577893415,
                                        0.33540986121527505, -0.5590164353587915};
  check_values(layer_norm(ln_x(), {4}), plain, 1e-5, 1e-6);
  check_values(layer_norm(ln_x(), {4}, ln_w()), scaled, 1e-5, 1e-6);
  check_values(layer_norm(ln_x(), {4}, ln_w(), ln_b()), affine, 1e-5, 1e-6);
  check_values(layer_norm(ln_x(), {2, 4}), two_dims, 1e-5, 1e-6);
  check_values(layer_norm(ln_x().to(DType::f64), {4}, ln_w().to(DType::f64),
                          Tensor::from_vector<double>({0.1, 0.2, 0.3, 0.4}, {4})),
               affine, 1e-12, 1e-12);
  // Strided input: the transpose of the transpose.
  check_values(layer_norm(ln_x().transpose(0, 1).contiguous().transpose(0, 1), {4}), plain, 1e-5, 1e-6);
  // A large mean does not cost precision (the variance is taken of the centred row).
  check_values(layer_norm(add(ln_x(), 10000.0), {4}), plain, 1e-3, 1e-3);
  // eps matters for a constant row: (x - mean) = 0 everywhere, bias passes through.
  check_values(layer_norm(Tensor::full({1, 3}, 5.0), {3}, Tensor::ones({3}), ln_b().slice(0, 0, 3)), {0.1, 0.2, 0.3});
  // A long row (vectorised sums and tails), f16 and bf16 in f32, 0-row batches.
  Tensor row = Tensor::arange(1001, DType::f32).reshape({1, 1001});
  Tensor normed = layer_norm(row, {1001}, {}, {}, 0.0);
  check_values(mean(normed), {0}, 0, 1e-5);
  check_values(mean(mul(normed, normed)), {1}, 1e-5);
  Tensor h = layer_norm(ln_x().to(DType::f16), {4}, ln_w().to(DType::f16), ln_b().to(DType::f16));
  CHECK(h.dtype() == DType::f16);
  check_values(h, affine, 2e-3, 2e-3);
  CHECK(layer_norm(ln_x().to(DType::bf16), {4}).dtype() == DType::bf16);
  check_values(layer_norm(ln_x().to(DType::bf16), {4}), plain, 1e-2, 1e-2);
  CHECK(layer_norm(Tensor::zeros({0, 4}), {4}).shape() == Shape{0, 4});
  CHECK(layer_norm(Tensor::zeros({2, 3, 4}), {3, 4}).shape() == Shape{2, 3, 4});
}

TEST_CASE("layer_norm errors name the op", "[layer_norm][errors]") {
  Tensor x = ln_x();
  CHECK_THROWS_AS(layer_norm(x, {3}), ShapeError);
  CHECK_THROWS_WITH(layer_norm(x, {3}), Catch::Contains("layer_norm") && Catch::Contains("f32[2,4]") &&
                                            Catch::Contains("[3]"));
  CHECK_THROWS_AS(layer_norm(x, {3, 2, 4}), ShapeError);
  CHECK_THROWS_AS(layer_norm(x, {}), ValueError);
  CHECK_THROWS_AS(layer_norm(x, {4}, Tensor::ones({3})), ShapeError);
  CHECK_THROWS_WITH(layer_norm(x, {4}, Tensor::ones({3})), Catch::Contains("weight") && Catch::Contains("f32[3]"));
  CHECK_THROWS_AS(layer_norm(x, {4}, ln_w(), Tensor::ones({2, 4})), ShapeError);
  CHECK_THROWS_WITH(layer_norm(x, {4}, ln_w(), Tensor::ones({2, 4})), Catch::Contains("bias"));
  CHECK_THROWS_AS(layer_norm(x, {4}, Tensor::ones({4}, DType::i32)), DTypeError);
  CHECK_THROWS_AS(layer_norm(Tensor::arange(4, DType::i32), {4}), DTypeError);
  CHECK_THROWS_WITH(layer_norm(Tensor::arange(4, DType::i32), {4}), Catch::Contains("layer_norm"));
  CHECK_THROWS_AS(layer_norm(x, {4}, {}, {}, -1.0), ValueError);
  CHECK_THROWS_AS(layer_norm(x, {4}, {}, {}, std::nan("")), ValueError);
  CHECK_THROWS_AS(call_op("layer_norm", {x}), ValueError);  // normalized_shape is required
  CHECK_THROWS_AS(call_op("layer_norm", {x, ln_w(), ln_b(), ln_b()}, {{"normalized_shape", Shape{4}}}), ValueError);
}
