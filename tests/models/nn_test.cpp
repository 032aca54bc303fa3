// models/nn: the distributed tutorial's Net against PyTorch (same weights, same input: log-probabilities, loss and
// every parameter gradient), modules (names, train/eval, state dicts, save/load, errors),
// optimizers against hand-computed steps and PyTorch trajectories, flat gradients, and a short
// training run on a separable problem whose loss must fall.
#include <catch2/catch.hpp>

#include <filesystem>
#include <map>

#include "devices/autograd/grad_mode.h"
#include "devices/io/safetensors.h"
#include "devices/ops.h"
#include "devices/random.h"
#include "devices/threads.h"
#include "models/nn/net.h"
#include "models/nn/optimizer.h"
#include "support/close.h"

using namespace troupe;
using namespace troupe::models;

namespace {

std::map<std::string, Tensor> fixture(const std::string& name) {
  return read_safetensors(std::string(TROUPE_FIXTURES) + "/autograd/" + name);
}

// Within tolerance of each element's size, or of 1% of the largest (PyTorch's near-zero values are noise).
void check_like_torch(const Tensor& got, const Tensor& want, double tolerance) {
  const Tensor size = abs(want);
  check_close(got, want, {.rtol = tolerance, .scale = maximum(size, mul(max(size), 1e-2))});
}

}  // namespace

TEST_CASE("Net: PyTorch's parameter names, shapes and count") {
  manual_seed(1);
  Net net;
  std::vector<std::string> names;
  for (auto& [name, p] : net.named_parameters()) names.push_back(name);
  CHECK(names == std::vector<std::string>{"conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias", "fc1.weight",
                                          "fc1.bias", "fc2.weight", "fc2.bias"});
  CHECK(net.parameter_count() == 21840);
  CHECK(net.conv2.weight.shape() == Shape{20, 10, 5, 5});
  for (Tensor* p : net.parameters()) CHECK(p->requires_grad());
  // PyTorch's default initialisation: uniform within +-1/sqrt(fan_in).
  for (double v : net.fc1.weight.to_vector<double>()) CHECK(std::abs(v) <= 1 / std::sqrt(320.0));
  for (double v : net.conv1.bias.to_vector<double>()) CHECK(std::abs(v) <= 1 / std::sqrt(25.0));
  CHECK_THROWS_AS(net(Tensor::zeros({2, 1, 32, 32})), ShapeError);
}

TEST_CASE("Net: forward and backward match PyTorch with the same weights (dropout off)") {
  auto data = fixture("net.safetensors");
  Net net;
  std::map<std::string, Tensor> state;
  for (auto& [name, p] : net.named_parameters()) state[name] = data.at(name);
  net.load(state);
  net.eval();
  const Tensor log_probs = net(data.at("input"));
  check_like_torch(log_probs, data.at("log_probs"), 1e-4);
  const Tensor loss = nll_loss(log_probs, data.at("target"));
  check_like_torch(loss, data.at("loss"), 1e-4);
  loss.backward();
  for (auto& [name, p] : net.named_parameters()) {
    INFO("gradient of " << name);
    check_like_torch(p->grad(), data.at("grad." + name), 1e-4);
  }
  net.zero_grad();
  for (Tensor* p : net.parameters()) CHECK_FALSE(p->grad().defined());
}

TEST_CASE("Module: train/eval reach sub-modules, state_dict, save and load round-trip") {
  manual_seed(2);
  Net a;
  CHECK(a.conv2_drop.is_training());
  a.eval();
  CHECK_FALSE(a.conv2_drop.is_training());
  CHECK_FALSE(a.fc1.is_training());
  a.train();
  CHECK(a.fc2.is_training());
  const auto path = (std::filesystem::temp_directory_path() / "troupe_nn_test_net.safetensors").string();
  a.save(path);
  manual_seed(3);
  Net b;
  CHECK(b.fc1.weight.to_vector<float>() != a.fc1.weight.to_vector<float>());
  b.load(path);
  std::filesystem::remove(path);
  for (auto& [name, t] : a.state_dict()) CHECK(b.state_dict().at(name).to_vector<float>() == t.to_vector<float>());
  // Loading copies: the state stays apart from the module.
  auto state = a.state_dict();
  Tensor w = state.at("fc2.bias");
  b.load(state);
  b.fc2.bias.mutable_data<float>()[0] = 42;
  CHECK(w.to_vector<float>()[0] != 42);
  // Errors name what is missing, unexpected or mis-shaped.
  state.erase("conv1.bias");
  state["extra.weight"] = Tensor::zeros({1});
  CHECK_THROWS_WITH(b.load(state), Catch::Contains("missing: conv1.bias") && Catch::Contains("unexpected: extra.weight"));
  state = a.state_dict();
  state["fc2.bias"] = Tensor::zeros({11});
  CHECK_THROWS_WITH(b.load(state), Catch::Contains("fc2.bias") && Catch::Contains("f32[11]"));
  CHECK_THROWS_AS(Linear(0, 3), ValueError);
  CHECK_THROWS_AS(Conv2d(3, 4, 3, {.groups = 2}), ValueError);
}

TEST_CASE("SGD: hand-computed steps with momentum, dampening, weight decay and nesterov") {
  Tensor p = Tensor::from_vector<double>({1.0, -2.0}, {2}).set_requires_grad();
  SGD sgd({&p}, {.lr = 0.1, .momentum = 0.9, .dampening = 0.5, .weight_decay = 0.1});
  p.set_grad(Tensor::from_vector<double>({0.5, 1.0}, {2}));
  sgd.step();  // d = g + 0.1 p = (0.6, 0.8); buf = d; p -= 0.1 d
  CHECK(p.to_vector<double>()[0] == Approx(0.94));
  CHECK(p.to_vector<double>()[1] == Approx(-2.08));
  sgd.step();  // d = (0.5 + 0.094, 1 - 0.208); buf = 0.9 buf + 0.5 d; p -= 0.1 buf
  CHECK(p.to_vector<double>()[0] == Approx(0.94 - 0.1 * (0.9 * 0.6 + 0.5 * 0.594)));
  CHECK(p.to_vector<double>()[1] == Approx(-2.08 - 0.1 * (0.9 * 0.8 + 0.5 * 0.792)));
  Tensor q = Tensor::from_vector<double>({1.0}, {1}).set_requires_grad();
  SGD nesterov({&q}, {.lr = 0.5, .momentum = 0.5, .nesterov = true});
  q.set_grad(Tensor::from_vector<double>({2.0}, {1}));
  nesterov.step();  // buf = 2; p -= 0.5 (2 + 0.5 * 2)
  CHECK(q.item<double>() == Approx(-0.5));
  Tensor untouched = Tensor::from_vector<double>({3.0}, {1}).set_requires_grad();
  SGD skip({&untouched}, {.lr = 1});
  skip.step();  // no grad: no step
  CHECK(untouched.item<double>() == 3.0);
  CHECK_THROWS_AS(SGD({&q}, {.lr = 0.1, .nesterov = true}), ValueError);
  CHECK_THROWS_AS(SGD({&q}, {.lr = -1}), ValueError);
}

TEST_CASE("Adam: a hand-computed first step, and bias correction") {
  Tensor p = Tensor::from_vector<double>({1.0, -1.0}, {2}).set_requires_grad();
  Adam adam({&p}, {.lr = 0.1});
  p.set_grad(Tensor::from_vector<double>({0.5, -2.0}, {2}));
  adam.step();  // first step: m_hat = g, v_hat = g^2, so p -= lr * g / (|g| + eps)
  CHECK(p.to_vector<double>()[0] == Approx(1.0 - 0.1 * 0.5 / (0.5 + 1e-8)));
  CHECK(p.to_vector<double>()[1] == Approx(-1.0 + 0.1 * 2.0 / (2.0 + 1e-8)));
  CHECK_THROWS_AS(Adam({&p}, {.beta1 = 1.0}), ValueError);
  Tensor ints = Tensor::from_vector<double>({1.0}, {1});
  CHECK_THROWS_AS(Adam({nullptr}, {}), ValueError);
}

TEST_CASE("SGD and Adam variants follow PyTorch's trajectories") {
  auto data = fixture("optim.safetensors");
  auto run = [&](const std::string& name, auto make) {
    INFO("optimizer " << name);
    Tensor p = data.at("p0").clone().set_requires_grad();
    auto opt = make(std::vector<Tensor*>{&p});
    for (int i = 0; i < 4; ++i) {
      p.set_grad(data.at("grad" + std::to_string(i)));
      opt.step();
      check_like_torch(p, data.at(name + ".step" + std::to_string(i)), 1e-10);
    }
  };
  run("sgd_plain", [](auto params) { return SGD(params, {.lr = 0.1}); });
  run("sgd_momentum", [](auto params) {
    return SGD(params, {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01});
  });
  run("sgd_nesterov",
      [](auto params) { return SGD(params, {.lr = 0.1, .momentum = 0.5, .weight_decay = 0.1, .nesterov = true}); });
  run("adam", [](auto params) { return Adam(params, {.lr = 0.01}); });
  run("adam_wd_amsgrad", [](auto params) {
    return Adam(params, {.lr = 0.05, .beta1 = 0.8, .beta2 = 0.9, .eps = 1e-6, .weight_decay = 0.1, .amsgrad = true});
  });
}

TEST_CASE("flat gradients: one tensor for an all_reduce, and back") {
  Tensor a = Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2}).set_requires_grad();
  Tensor b = Tensor::from_vector<float>({5}, {1}).set_requires_grad();
  Tensor c = Tensor::from_vector<float>({6, 7}, {2}).set_requires_grad();
  sum(mul(a, 2.0)).backward();
  c.set_grad(Tensor::from_vector<float>({-1, -2}, {2}));
  const std::vector<Tensor*> params{&a, &b, &c};
  const Tensor flat = flatten_grads(params);  // b has no grad: zeros
  CHECK(flat.to_vector<float>() == std::vector<float>{2, 2, 2, 2, 0, -1, -2});
  assign_flat_grads(params, mul(flat, 0.5));
  CHECK(a.grad().to_vector<float>() == std::vector<float>{1, 1, 1, 1});
  CHECK(b.grad().to_vector<float>() == std::vector<float>{0});
  CHECK(c.grad().shape() == Shape{2});
  CHECK_THROWS_AS(assign_flat_grads(params, Tensor::zeros({6})), ShapeError);
  Tensor d = Tensor::zeros({1}, DType::f64).set_requires_grad();
  CHECK_THROWS_AS(flatten_grads({&a, &d}), DTypeError);
}

TEST_CASE("Net trains: the loss on a separable synthetic problem falls") {
  // Ten classes, each a bright 7x5 patch at its own place on a noisy image. One intra-op thread:
  // small kernels on a shared 2-core machine lose more to OpenMP barriers than they gain.
  set_thread_intra_op_threads(1);
  manual_seed(7);
  const int64_t n = 30;
  Tensor images = rand_uniform({n, 1, 28, 28}, -0.3, 0.3);
  std::vector<int64_t> labels(n);
  float* px = images.mutable_data<float>();
  for (int64_t i = 0; i < n; ++i) {
    labels[i] = i % 10;
    const int64_t top = (labels[i] / 5) * 14 + 3, left = (labels[i] % 5) * 5;
    for (int64_t y = top; y < top + 7; ++y)
      for (int64_t x = left; x < left + 5; ++x) px[i * 784 + y * 28 + x] += 2.0f;
  }
  const Tensor target = Tensor::from_vector<int64_t>(labels, {n});
  Net net;
  SGD sgd(net.parameters(), {.lr = 0.05, .momentum = 0.5});
  auto eval_loss = [&] {
    NoGradGuard no_grad;
    net.eval();
    const double loss = nll_loss(net(images), target).item<float>();
    net.train();
    return loss;
  };
  const double before = eval_loss();
  for (int step = 0; step < 25; ++step) {
    sgd.zero_grad();
    nll_loss(net(images), target).backward();
    sgd.step();
  }
  const double after = eval_loss();
  set_thread_intra_op_threads(0);
  INFO("loss before " << before << ", after " << after);
  CHECK(before > 2.0);
  CHECK(after < 0.5 * before);
}
