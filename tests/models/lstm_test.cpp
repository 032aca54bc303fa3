#include <catch2/catch.hpp>
#include <cmath>
#include <random>

#include "actors/runtime.h"
#include "devices/io/safetensors.h"
#include "devices/ops.h"
#include "models/lstm.h"
#include "support/close.h"
#include "support/two_workers.h"

using namespace troupe;

namespace {

const std::map<std::string, Tensor>& fixture() {
  static auto tensors = read_safetensors(std::string(TROUPE_FIXTURES) + "/lstm/lstm_small.safetensors");
  return tensors;
}

}  // namespace

TEST_CASE("LSTM matches PyTorch's nn.LSTM on the same weights", "[lstm]") {
  auto& f = fixture();
  models::LSTM lstm(6, 4);
  lstm.load(models::sub_state(f, "cell_f."));
  auto out = lstm.forward(f.at("x"));
  CHECK(relative_error(out.output, f.at("out_f")) < 1e-4);
  CHECK(relative_error(out.h_n, f.at("h_n_f")) < 1e-4);
  CHECK(relative_error(out.c_n, f.at("c_n_f")) < 1e-4);
  auto with_state = lstm.forward(f.at("x"), f.at("h0"), f.at("c0"));
  CHECK(relative_error(with_state.output, f.at("out_f_with_state")) < 1e-4);
  CHECK(relative_error(with_state.h_n, f.at("h_n_with_state")) < 1e-4);
  CHECK(relative_error(with_state.c_n, f.at("c_n_with_state")) < 1e-4);
}

// One LSTM layer in double, straight from the equations (PyTorch's gate order i, f, g, o).
static std::vector<Tensor> naive_lstm(const Tensor& x, const std::map<std::string, Tensor>& w, const Tensor& h0,
                               const Tensor& c0) {
  const int64_t T = x.size(0), B = x.size(1), C = x.size(2), H = h0.size(1);
  const auto xs = x.to_vector<double>(), wi = w.at("weight_ih_l0").to_vector<double>();
  const auto wh = w.at("weight_hh_l0").to_vector<double>(), bi = w.at("bias_ih_l0").to_vector<double>();
  const auto bh = w.at("bias_hh_l0").to_vector<double>();
  auto h = h0.to_vector<double>(), c = c0.to_vector<double>();
  std::vector<double> out;
  auto sigmoid = [](double v) { return 1 / (1 + std::exp(-v)); };
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> next(h.size());
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < H; ++j) {
        double gate[4];
        for (int q = 0; q < 4; ++q) {
          const int64_t row = q * H + j;
          double sum = bi[row] + bh[row];
          for (int64_t i = 0; i < C; ++i) sum += wi[row * C + i] * xs[(t * B + b) * C + i];
          for (int64_t i = 0; i < H; ++i) sum += wh[row * H + i] * h[b * H + i];
          gate[q] = sum;
        }
        double& cell = c[b * H + j];
        cell = sigmoid(gate[1]) * cell + sigmoid(gate[0]) * std::tanh(gate[2]);
        next[b * H + j] = sigmoid(gate[3]) * std::tanh(cell);
      }
    h = next;
    out.insert(out.end(), h.begin(), h.end());
  }
  auto as_f32 = [](const std::vector<double>& v, const Shape& shape) {
    return Tensor::from_vector(std::vector<float>(v.begin(), v.end()), shape);
  };
  return {as_f32(out, {T, B, H}), as_f32(h, {B, H}), as_f32(c, {B, H})};
}

TEST_CASE("the lstm op matches the equations across GEMM panel and tile edges", "[lstm]") {
  // H = 40: 160 gate columns, two full 64-column panels and a partial one; B = 7: row tiles of 4
  // and 3; C = 70 and a strided x (a transposed view), with and without an initial state.
  const int64_t T = 3, B = 7, C = 70, H = 40;
  models::LSTM lstm(C, H, /*seed=*/5);
  const auto values = [](const Shape& shape, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> v(static_cast<size_t>(numel(shape)));
    for (auto& e : v) e = dist(rng);
    return Tensor::from_vector(v, shape);
  };
  const Tensor x = values({B, T, C}, 11).transpose(0, 1);
  const Tensor h0 = values({B, H}, 12), c0 = values({B, H}, 13);
  for (bool with_state : {false, true}) {
    auto out = with_state ? lstm.forward(x, h0, c0) : lstm.forward(x);
    auto expected = naive_lstm(x, lstm.state_dict(), with_state ? h0 : Tensor::zeros({B, H}),
                               with_state ? c0 : Tensor::zeros({B, H}));
    INFO("with_state " << with_state);
    CHECK(relative_error(out.output, expected[0]) < 1e-5);
    CHECK(relative_error(out.h_n, expected[1]) < 1e-5);
    CHECK(relative_error(out.c_n, expected[2]) < 1e-5);
  }
}

TEST_CASE("BidirectionalLSTM matches the TorchScript tutorial's BiSerial, serial and forked", "[lstm]") {
  two_workers();
  auto& f = fixture();
  models::BidirectionalLSTM bi(6, 4);
  std::map<std::string, Tensor> weights;  // the fixture holds inputs and outputs too
  for (const auto& [name, value] : f)
    if (name.rfind("cell_", 0) == 0) weights.emplace(name, value);
  bi.load(weights);
  CHECK(relative_error(bi(f.at("x")), f.at("bi")) < 1e-4);
  CHECK(relative_error(bi.forked(f.at("x")), f.at("bi")) < 1e-4);
  auto state = bi.state_dict();
  CHECK(state.size() == 8);
  CHECK(state.count("cell_f.weight_ih_l0") == 1);
  CHECK(state.count("cell_b.bias_hh_l0") == 1);
}

TEST_CASE("LSTM modules: registered parameters under PyTorch's names, state_dict round trips", "[lstm]") {
  two_workers();
  models::LSTM lstm(6, 4, /*seed=*/1);
  std::vector<std::string> names;
  for (auto& [name, p] : lstm.named_parameters()) {
    names.push_back(name);
    CHECK(p->requires_grad());
  }
  CHECK(names == std::vector<std::string>{"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"});
  CHECK(lstm.parameter_count() == 16 * 6 + 16 * 4 + 16 + 16);
  // Same seed, same weights; another seed, others.
  CHECK(models::LSTM(6, 4, 1).weight_hh_l0.to_vector<float>() == lstm.weight_hh_l0.to_vector<float>());
  CHECK(models::LSTM(6, 4, 2).weight_hh_l0.to_vector<float>() != lstm.weight_hh_l0.to_vector<float>());
  for (double w : lstm.weight_ih_l0.to_vector<double>()) CHECK(std::abs(w) <= 0.5);  // 1 / sqrt(H)

  models::LSTMEnsemble a(2, 6, 4, /*seed=*/3), b(2, 6, 4, /*seed=*/4);
  auto state = a.state_dict();
  CHECK(state.size() == 2 * 2 * 4);
  CHECK(state.count("models.1.cell_b.weight_hh_l0") == 1);
  const Tensor x = models::LSTM(6, 6, 9).state_dict().at("weight_ih_l0").reshape({4, 6, 6});  // any data
  CHECK(relative_error(b.serial(x), a.serial(x)) > 0);
  b.load(state);
  CHECK(relative_error(b.serial(x), a.serial(x)) == 0);
  CHECK(relative_error(b.fork_members(x), a.serial(x)) < 1e-6);  // the members' actors see the loaded weights
}

TEST_CASE("the ensemble's three variants agree", "[lstm]") {
  two_workers();
  models::LSTMEnsemble ensemble(3, 8, 6, /*seed=*/3);
  Tensor x = models::LSTM(8, 8, 99).state_dict().at("weight_ih_l0").reshape({4, 8, 8});  // any data
  Tensor a = ensemble.serial(x), b = ensemble.fork_directions(x), c = ensemble.fork_members(x);
  CHECK(a.shape() == Shape{4, 8, 12});
  // Kernels may split work differently on different thread counts: equal up to rounding.
  CHECK(relative_error(b, a) < 1e-6);
  CHECK(relative_error(c, a) < 1e-6);
}

TEST_CASE("LSTM errors name the op and the shapes", "[lstm][errors]") {
  models::LSTM lstm(6, 4);
  CHECK_THROWS_AS(lstm(Tensor::zeros({5, 3, 7})), ShapeError);
  CHECK_THROWS_WITH(lstm(Tensor::zeros({5, 3, 7})), Catch::Contains("lstm") && Catch::Contains("f32[5,3,7]"));
  CHECK_THROWS_AS(lstm(Tensor::zeros({5, 3})), ShapeError);
  CHECK_THROWS_AS(lstm(Tensor::zeros({5, 3, 6}, DType::f64)), DTypeError);
  CHECK_THROWS_AS(lstm.forward(Tensor::zeros({5, 3, 6}), Tensor::zeros({2, 4})), ShapeError);
  std::map<std::string, Tensor> bad = lstm.state_dict();
  bad["weight_hh_l0"] = Tensor::zeros({16, 5});
  CHECK_THROWS_WITH(lstm.load(bad), Catch::Contains("weight_hh_l0") && Catch::Contains("f32[16,5]"));
  bad = lstm.state_dict();
  bad.erase("bias_ih_l0");
  CHECK_THROWS_WITH(lstm.load(bad), Catch::Contains("missing") && Catch::Contains("bias_ih_l0"));
}
