// conv2d, max_pool2d, dropout, dropout2d, nll_loss, cross_entropy and lstm: forward values and
// gradients against PyTorch (tests/fixtures/autograd/make_autograd_fixtures.py), gradient checks
// in f64 against central finite differences, and every error path.
#include <catch2/catch.hpp>

#include <map>

#include "devices/io/safetensors.h"
#include "devices/registry.h"
#include "support/close.h"
#include "tests/devices/gradcheck.h"

using namespace troupe;
using testing::check_gradients;
using testing::random_f64;

using Inputs = std::vector<Tensor>;

namespace {

const std::map<std::string, Tensor>& nn_fixture() {
  static const auto fixture = read_safetensors(std::string(TROUPE_FIXTURES) + "/autograd/nn.safetensors");
  return fixture;
}

const Tensor& fx(const std::string& name) {
  INFO("fixture tensor " << name);
  REQUIRE(nn_fixture().count(name));
  return nn_fixture().at(name);
}

// Runs fn on the fixture's inputs (leaves requiring grad where PyTorch recorded a gradient),
// backpropagates the fixture's gy and compares output and gradients.
void check_against_torch(const std::string& prefix, size_t inputs,
                         const std::function<Tensor(const Inputs&)>& fn) {
  INFO("case " << prefix);
  Inputs in;
  for (size_t i = 0; i < inputs; ++i) {
    Tensor t = fx(prefix + ".in" + std::to_string(i)).clone();
    if (nn_fixture().count(prefix + ".grad" + std::to_string(i))) t.set_requires_grad();
    in.push_back(t);
  }
  const Tensor y = fn(in);
  check_close(y, fx(prefix + ".out"), {.rtol = 1e-4, .atol = 1e-4});
  y.backward(fx(prefix + ".gy"));
  for (size_t i = 0; i < inputs; ++i)
    if (in[i].requires_grad()) check_close(in[i].grad(), fx(prefix + ".grad" + std::to_string(i)), {.rtol = 1e-4, .atol = 1e-4});
}

}  // namespace

TEST_CASE("conv2d matches PyTorch forward and backward (stride, padding, dilation, groups)") {
  check_against_torch("conv_strided", 3, [](const Inputs& x) {
    return conv2d(x[0], x[1], x[2], {.stride = {2, 1}, .padding = {1, 0}, .dilation = {1, 2}});
  });
  check_against_torch("conv_groups", 2,
                      [](const Inputs& x) { return conv2d(x[0], x[1], {}, {.padding = {1}, .groups = 2}); });
}

TEST_CASE("conv2d gradient checks in f64") {
  check_gradients([](const Inputs& x) { return conv2d(x[0], x[1], x[2]); },
                  {random_f64({2, 2, 5, 4}, 1), random_f64({3, 2, 3, 2}, 2), random_f64({3}, 3)});
  check_gradients([](const Inputs& x) {
    return conv2d(x[0], x[1], {}, {.stride = {2}, .padding = {1, 2}, .dilation = {2, 1}, .groups = 2});
  }, {random_f64({1, 4, 6, 5}, 4), random_f64({2, 2, 2, 3}, 5)});
  // f32 (oneDNN) and f64 (loops) agree.
  const Tensor x = random_f64({2, 3, 9, 8}, 6), w = random_f64({4, 3, 3, 3}, 7), b = random_f64({4}, 8);
  const Conv2dOptions o{.stride = {1, 2}, .padding = {1}, .dilation = {2}};
  check_close(conv2d(x.to(DType::f32), w.to(DType::f32), b.to(DType::f32), o).to(DType::f64), conv2d(x, w, b, o),
              {.rtol = 1e-4, .atol = 1e-4});
}

TEST_CASE("conv2d errors name the op, shapes and dtypes") {
  const Tensor x = Tensor::zeros({1, 3, 8, 8}), w = Tensor::zeros({4, 3, 3, 3});
  CHECK_THROWS_WITH(conv2d(x, Tensor::zeros({4, 2, 3, 3})),
                    Catch::Contains("conv2d") && Catch::Contains("f32[1,3,8,8]") && Catch::Contains("f32[4,2,3,3]"));
  CHECK_THROWS_AS(conv2d(x, Tensor::zeros({4, 2, 3, 3})), ShapeError);
  CHECK_THROWS_AS(conv2d(Tensor::zeros({3, 8, 8}), w), ShapeError);
  CHECK_THROWS_AS(conv2d(x, w, Tensor::zeros({3})), ShapeError);
  CHECK_THROWS_AS(conv2d(x, Tensor::zeros({4, 3, 9, 9})), ShapeError);       // kernel larger than the input
  CHECK_THROWS_AS(conv2d(x, w.to(DType::f64)), DTypeError);
  CHECK_THROWS_AS(conv2d(x.to(DType::i64), w.to(DType::i64)), DTypeError);
  CHECK_THROWS_AS(conv2d(x, w, {}, {.groups = 2}), ShapeError);             // 3 channels into 2 groups
  CHECK_THROWS_AS(conv2d(x, w, {}, {.stride = {0}}), ValueError);
  CHECK_THROWS_AS(conv2d(x, w, {}, {.padding = {1, 1, 1}}), ValueError);
  CHECK_THROWS_WITH(conv2d_backward_input(Tensor::zeros({1, 4, 5, 5}), w, {1, 3, 8, 8}),
                    Catch::Contains("conv2d_backward_input") && Catch::Contains("[1,4,6,6]"));
  CHECK_THROWS_AS(conv2d_backward_weight(Tensor::zeros({1, 4, 6, 6}), x, {4, 3, 3}, true), ShapeError);
}

TEST_CASE("max_pool2d matches PyTorch values, indices and gradients") {
  check_against_torch("pool_k3s2p1", 1, [](const Inputs& x) { return max_pool2d(x[0], {3}, {2}, {1}); });
  check_against_torch("pool_k2", 1, [](const Inputs& x) { return max_pool2d(x[0], {2}); });
  auto [values, indices] = max_pool2d_with_indices(fx("pool_k3s2p1.in0"), {3}, {2}, {1});
  CHECK(indices.to_vector<int64_t>() == fx("pool_k3s2p1.indices").to_vector<int64_t>());
  CHECK_FALSE(indices.requires_grad());
}

TEST_CASE("max_pool2d gradient checks, ties and NaN") {
  check_gradients([](const Inputs& x) { return max_pool2d(x[0], {2, 3}, {1, 2}, {1, 1}); }, {random_f64({2, 2, 5, 7}, 9)});
  // Ties: the first maximum in window order wins; NaN wins over numbers.
  const Tensor x = Tensor::from_vector<float>({1, 1, 1, 1, 0, NAN, 2, 3}, {1, 2, 2, 2});
  auto [values, indices] = max_pool2d_with_indices(x, {2});
  CHECK(indices.to_vector<int64_t>() == std::vector<int64_t>{0, 1});
  CHECK(values.to_vector<float>()[0] == 1);
  CHECK(std::isnan(values.to_vector<float>()[1]));
}

TEST_CASE("max_pool2d errors") {
  const Tensor x = Tensor::zeros({1, 1, 4, 4});
  CHECK_THROWS_WITH(max_pool2d(Tensor::zeros({4, 4}), {2}), Catch::Contains("max_pool2d") && Catch::Contains("f32[4,4]"));
  CHECK_THROWS_AS(max_pool2d(x, {5}), ShapeError);
  CHECK_THROWS_AS(max_pool2d(x, {2}, {2}, {2}), ValueError);  // padding over half the kernel
  CHECK_THROWS_AS(max_pool2d(x, {}), ValueError);
  CHECK_THROWS_AS(max_pool2d(x.to(DType::i32), {2}), DTypeError);
  CHECK_THROWS_AS(max_pool2d_backward(Tensor::zeros({1, 1, 2, 2}), Tensor::zeros({1, 1, 2, 2}), {1, 1, 4, 4}),
                  DTypeError);  // f32 indices
  CHECK_THROWS_AS(max_pool2d_backward(Tensor::zeros({1, 1, 2, 2}), Tensor::full({1, 1, 2, 2}, 99, DType::i64),
                                      {1, 1, 4, 4}),
                  IndexError);
}

TEST_CASE("dropout: seeded masks, scaling, channels for dropout2d, identity in eval") {
  manual_seed(42);
  const Tensor x = Tensor::ones({200, 50});
  const Tensor y = dropout(x, 0.3);
  const auto v = y.to_vector<float>();
  int64_t kept = 0;
  for (float e : v) {
    CHECK((e == 0.0f || e == Approx(1 / 0.7)));
    kept += e != 0.0f;
  }
  CHECK(kept > 6500);  // about 7000 of 10000
  CHECK(kept < 7500);
  manual_seed(42);
  CHECK(dropout(x, 0.3).to_vector<float>() == v);  // the same seed, the same mask
  CHECK(dropout(x, 0.3, false).shares_storage_with(x));
  CHECK(dropout(x, 0.0).to_vector<float>() == x.to_vector<float>());
  CHECK(dropout(x, 1.0).to_vector<float>() == std::vector<float>(10000, 0.0f));
  const auto c = dropout2d(Tensor::ones({4, 8, 3, 3}), 0.5).to_vector<float>();
  for (size_t channel = 0; channel < 32; ++channel)
    for (size_t i = 1; i < 9; ++i) CHECK(c[channel * 9 + i] == c[channel * 9]);
  CHECK_THROWS_AS(dropout(x, 1.5), ValueError);
  CHECK_THROWS_AS(dropout2d(Tensor::ones({4, 8}), 0.5), ShapeError);
  CHECK_THROWS_AS(dropout(Tensor::ones({4}, DType::i64), 0.5), DTypeError);
}

TEST_CASE("dropout gradient checks (the same seed for every evaluation)") {
  check_gradients([](const Inputs& x) { manual_seed(3); return dropout(x[0], 0.4); }, {random_f64({4, 6}, 10)});
  check_gradients([](const Inputs& x) { manual_seed(4); return dropout2d(x[0], 0.5); }, {random_f64({2, 3, 2, 2}, 11)});
  check_gradients([](const Inputs& x) { return dropout(x[0], 0.4, false); }, {random_f64({4, 6}, 10)});
}

TEST_CASE("nll_loss and cross_entropy match PyTorch (weights, ignore_index, every reduction)") {
  for (const std::string reduction : {"mean", "sum", "none"}) {
    check_against_torch("nll_" + reduction, 3,
                        [&](const Inputs& x) { return nll_loss(x[0], x[1], x[2], reduction, 2); });
    check_against_torch("ce_" + reduction, 3,
                        [&](const Inputs& x) { return cross_entropy(x[0], x[1], x[2], reduction, 2); });
  }
  check_against_torch("ce_plain", 2, [](const Inputs& x) { return cross_entropy(x[0], x[1]); });
}

TEST_CASE("nll_loss and cross_entropy gradient checks") {
  const Tensor target = Tensor::from_vector<int64_t>({2, 0, 1, 2, 3}, {5});
  const Tensor weight = Tensor::from_vector<double>({0.5, 1, 2, 1.5}, {4});
  for (const std::string reduction : {"mean", "sum", "none"}) {
    check_gradients([&](const Inputs& x) { return nll_loss(x[0], target, weight, reduction, 1); }, {random_f64({5, 4}, 12)});
    check_gradients([&](const Inputs& x) { return cross_entropy(x[0], target, {}, reduction); }, {random_f64({5, 4}, 13)});
    check_gradients([&](const Inputs& x) { return cross_entropy(x[0], target, weight, reduction, 0); },
                    {random_f64({5, 4}, 14)});
  }
  // cross_entropy is nll_loss of log_softmax.
  const Tensor logits = random_f64({5, 4}, 15);
  CHECK(cross_entropy(logits, target).item<double>() == Approx(nll_loss(log_softmax(logits, 1), target).item<double>()));
}

TEST_CASE("loss errors") {
  const Tensor x = Tensor::zeros({3, 4});
  const Tensor t = Tensor::from_vector<int64_t>({0, 1, 2}, {3});
  CHECK_THROWS_WITH(nll_loss(x, Tensor::from_vector<int64_t>({0, 1}, {2})),
                    Catch::Contains("nll_loss") && Catch::Contains("f32[3,4]") && Catch::Contains("i64[2]"));
  CHECK_THROWS_AS(nll_loss(x, Tensor::from_vector<int64_t>({0, 1}, {2})), ShapeError);
  CHECK_THROWS_WITH(nll_loss(x, Tensor::from_vector<int64_t>({0, 4, 1}, {3})),
                    Catch::Contains("nll_loss") && Catch::Contains("target 4"));
  CHECK_THROWS_AS(cross_entropy(x, Tensor::from_vector<int64_t>({0, -1, 1}, {3})), IndexError);
  CHECK_THROWS_AS(nll_loss(x, t.to(DType::f32)), DTypeError);
  CHECK_THROWS_AS(nll_loss(x.to(DType::i64), t), DTypeError);
  CHECK_THROWS_AS(nll_loss(Tensor::zeros({3}), t), ShapeError);
  CHECK_THROWS_AS(cross_entropy(x, t, Tensor::ones({3})), ShapeError);
  CHECK_THROWS_AS(cross_entropy(x, t, Tensor::ones({4}, DType::f64)), DTypeError);
  CHECK_THROWS_AS(cross_entropy(x, t, {}, "average"), ValueError);
  // The ignored targets need not be classes; a mean over nothing is NaN, like PyTorch.
  CHECK(std::isnan(nll_loss(x, Tensor::full({3}, -100, DType::i64)).item<float>()));
}

TEST_CASE("lstm backward matches PyTorch") {
  check_against_torch("lstm", 7, [](const Inputs& x) {
    auto out = call_op("lstm", x);
    return cat({out[0].reshape({-1}), mul(out[1].reshape({-1}), 2.0), mul(out[2].reshape({-1}), 3.0)});
  });
}

TEST_CASE("lstm backward matches the tape through the same recurrence built from ops (f64)") {
  const int64_t T = 3, B = 2, C = 3, H = 4;
  Inputs in{random_f64({T, B, C}, 20), random_f64({4 * H, C}, 21), random_f64({4 * H, H}, 22), random_f64({4 * H}, 23),
            random_f64({4 * H}, 24), random_f64({B, H}, 25), random_f64({B, H}, 26)};
  // The composite reference: its ops are gradient-checked above.
  auto composite = [&](const Inputs& x) {
    Tensor h = x[5], c = x[6];
    std::vector<Tensor> outputs;
    for (int64_t t = 0; t < T; ++t) {
      const Tensor gates = add(linear(x[0].select(0, t), x[1], x[3]), linear(h, x[2], x[4]));
      auto g = chunk(gates, 4, 1);
      c = add(mul(sigmoid(g[1]), c), mul(sigmoid(g[0]), tanh(g[2])));
      h = mul(sigmoid(g[3]), tanh(c));
      outputs.push_back(h);
    }
    return cat({stack(outputs).reshape({-1}), mul(h.reshape({-1}), 2.0), mul(c.reshape({-1}), 3.0)});
  };
  check_gradients(composite, in);
  Inputs f32, f64;
  for (const Tensor& t : in) {
    f32.push_back(t.to(DType::f32).set_requires_grad());
    f64.push_back(t.detach().clone().set_requires_grad());
  }
  const Tensor gy = random_f64({T * B * H + 2 * B * H}, 27);
  auto out = call_op("lstm", f32);
  cat({out[0].reshape({-1}), mul(out[1].reshape({-1}), 2.0), mul(out[2].reshape({-1}), 3.0)}).backward(gy.to(DType::f32));
  composite(f64).backward(gy);
  for (size_t i = 0; i < in.size(); ++i) {
    INFO("input " << i);
    check_close(f32[i].grad().to(DType::f64), f64[i].grad(), {.rtol = 1e-4, .atol = 1e-4});
  }
  // Without h0 and c0 (zeros), only some outputs used.
  Tensor x = in[0].to(DType::f32).set_requires_grad();
  auto partial = call_op("lstm", {x, f32[1], f32[2], f32[3], f32[4]});
  sum(partial[0]).backward();
  CHECK(x.grad().shape() == Shape{T, B, C});
  CHECK_THROWS_AS(lstm_backward({in[0].to(DType::f32)}, Tensor(), Tensor(), Tensor()), ValueError);
}
