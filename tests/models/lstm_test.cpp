#include <catch2/catch.hpp>

#include "actors/runtime.h"
#include "two_workers.h"
#include "devices/io/safetensors.h"
#include "devices/ops.h"
#include "models/lstm.h"

using namespace troupe;

namespace {

const std::map<std::string, Tensor>& fixture() {
  static auto tensors = read_safetensors(std::string(TROUPE_FIXTURES) + "/lstm/lstm_small.safetensors");
  return tensors;
}

// max |a - b| / max(1, max |b|): the tolerance is relative to the reference's scale.
double relative_error(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  auto x = a.to_vector<double>(), y = b.to_vector<double>();
  double diff = 0, scale = 1;
  for (size_t i = 0; i < x.size(); ++i) {
    diff = std::max(diff, std::abs(x[i] - y[i]));
    scale = std::max(scale, std::abs(y[i]));
  }
  return diff / scale;
}

}  // namespace

TEST_CASE("LSTM matches PyTorch's nn.LSTM on the same weights", "[lstm]") {
  auto& f = fixture();
  models::LSTM lstm(6, 4);
  lstm.load(f, "cell_f.");
  auto out = lstm.forward(f.at("x"));
  CHECK(relative_error(out.output, f.at("out_f")) < 1e-4);
  CHECK(relative_error(out.h_n, f.at("h_n_f")) < 1e-4);
  CHECK(relative_error(out.c_n, f.at("c_n_f")) < 1e-4);
  auto with_state = lstm.forward(f.at("x"), f.at("h0"), f.at("c0"));
  CHECK(relative_error(with_state.output, f.at("out_f_with_state")) < 1e-4);
  CHECK(relative_error(with_state.h_n, f.at("h_n_with_state")) < 1e-4);
  CHECK(relative_error(with_state.c_n, f.at("c_n_with_state")) < 1e-4);
}

TEST_CASE("BidirectionalLSTM matches the seed's BiSerial, serial and forked", "[lstm]") {
  two_workers();
  auto& f = fixture();
  models::BidirectionalLSTM bi(6, 4);
  bi.load(f);
  CHECK(relative_error(bi(f.at("x")), f.at("bi")) < 1e-4);
  CHECK(relative_error(bi.forked(f.at("x")), f.at("bi")) < 1e-4);
  auto state = bi.state_dict();
  CHECK(state.count("cell_f.weight_ih_l0") == 1);
  CHECK(state.count("cell_b.bias_hh_l0") == 1);
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
