#include "models/lstm.h"

#include <cmath>
#include <random>

#include "actors/fork.h"
#include "devices/ops.h"
#include "devices/registry.h"

namespace troupe::models {

namespace {

Tensor uniform(const Shape& shape, float bound, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> dist(-bound, bound);
  std::vector<float> values(static_cast<size_t>(numel(shape)));
  for (auto& v : values) v = dist(rng);
  return Tensor::from_vector(values, shape);
}

const Tensor& find(const std::map<std::string, Tensor>& state, const std::string& key, const TensorMeta& expected) {
  auto it = state.find(key);
  if (it == state.end()) throw ValueError("LSTM::load: missing weight '" + key + "'");
  if (!(it->second.meta() == expected))
    throw ShapeError("LSTM::load: weight '" + key + "' is " + it->second.meta().str() + ", expected " +
                     expected.str());
  return it->second;
}

}  // namespace

LSTM::LSTM(int64_t input_size, int64_t hidden_size, uint64_t seed)
    : input_size_(input_size), hidden_size_(hidden_size) {
  if (input_size <= 0 || hidden_size <= 0)
    throw ValueError("LSTM: sizes must be positive, got input " + std::to_string(input_size) + ", hidden " +
                     std::to_string(hidden_size));
  std::mt19937_64 rng(seed);
  const float bound = 1.0f / std::sqrt(static_cast<float>(hidden_size));
  weight_ih_ = uniform({4 * hidden_size, input_size}, bound, rng);
  weight_hh_ = uniform({4 * hidden_size, hidden_size}, bound, rng);
  bias_ih_ = uniform({4 * hidden_size}, bound, rng);
  bias_hh_ = uniform({4 * hidden_size}, bound, rng);
}

LSTM::Output LSTM::forward(const Tensor& x, const Tensor& h0, const Tensor& c0) const {
  static const OpDef& op = OpRegistry::global().get("lstm");
  std::vector<Tensor> inputs{x, weight_ih_, weight_hh_, bias_ih_, bias_hh_};
  if (h0.defined() || c0.defined()) {
    inputs.push_back(h0.defined() ? h0 : Tensor::zeros({x.size(1), hidden_size_}));
    inputs.push_back(c0.defined() ? c0 : Tensor::zeros({x.size(1), hidden_size_}));
  }
  auto out = OpRegistry::global().call(op, inputs);
  return {out[0], out[1], out[2]};
}

void LSTM::load(const std::map<std::string, Tensor>& state, const std::string& prefix) {
  const int64_t G = 4 * hidden_size_;
  weight_ih_ = find(state, prefix + "weight_ih_l0", {DType::f32, {G, input_size_}, Device::cpu()});
  weight_hh_ = find(state, prefix + "weight_hh_l0", {DType::f32, {G, hidden_size_}, Device::cpu()});
  bias_ih_ = find(state, prefix + "bias_ih_l0", {DType::f32, {G}, Device::cpu()});
  bias_hh_ = find(state, prefix + "bias_hh_l0", {DType::f32, {G}, Device::cpu()});
}

std::map<std::string, Tensor> LSTM::state_dict(const std::string& prefix) const {
  return {{prefix + "weight_ih_l0", weight_ih_},
          {prefix + "weight_hh_l0", weight_hh_},
          {prefix + "bias_ih_l0", bias_ih_},
          {prefix + "bias_hh_l0", bias_hh_}};
}

BidirectionalLSTM::BidirectionalLSTM(int64_t input_size, int64_t hidden_size, uint64_t seed)
    : forward_(std::make_shared<LSTM>(input_size, hidden_size, seed * 2 + 1)),
      backward_(std::make_shared<LSTM>(input_size, hidden_size, seed * 2 + 2)) {}

Tensor BidirectionalLSTM::operator()(const Tensor& x) const {
  Tensor out_f = (*forward_)(x);
  Tensor out_b = (*backward_)(flip(x, {0}));
  return cat({out_f, flip(out_b, {0})}, 2);
}

Tensor BidirectionalLSTM::forked(const Tensor& x) const {
  auto future_f = fork([cell = forward_](const Tensor& input) { return (*cell)(input); }, x);
  Tensor out_b = (*backward_)(flip(x, {0}));
  Tensor out_f = wait(future_f);
  return cat({out_f, flip(out_b, {0})}, 2);
}

void BidirectionalLSTM::load(const std::map<std::string, Tensor>& state, const std::string& prefix) {
  forward_->load(state, prefix + "cell_f.");
  backward_->load(state, prefix + "cell_b.");
}

std::map<std::string, Tensor> BidirectionalLSTM::state_dict(const std::string& prefix) const {
  auto out = forward_->state_dict(prefix + "cell_f.");
  out.merge(backward_->state_dict(prefix + "cell_b."));
  return out;
}

LSTMEnsemble::LSTMEnsemble(int members, int64_t input_size, int64_t hidden_size, uint64_t seed) {
  if (members <= 0) throw ValueError("LSTMEnsemble: needs at least one member, got " + std::to_string(members));
  members_.reserve(members);
  for (int i = 0; i < members; ++i)
    members_.emplace_back("member " + std::to_string(i), input_size, hidden_size, seed * 1000 + i);
}

namespace {
// The seed's stack(...).sum(0) as a chain of adds: the same values, without the stacked copy
// and the reduction over the leading dim (which is ~100x slower than an add here).
Tensor sum_outputs(const std::vector<Tensor>& outputs) {
  Tensor total = outputs.at(0);
  for (size_t i = 1; i < outputs.size(); ++i) total = add(total, outputs[i]);
  return total;
}
}  // namespace

Tensor LSTMEnsemble::serial(const Tensor& x) const {
  std::vector<Tensor> outputs;
  for (auto& m : members_) outputs.push_back((*m.shared_object())(x));
  return sum_outputs(outputs);
}

Tensor LSTMEnsemble::fork_directions(const Tensor& x) const {
  std::vector<Tensor> outputs;
  for (auto& m : members_) outputs.push_back(m.shared_object()->forked(x));
  return sum_outputs(outputs);
}

Tensor LSTMEnsemble::fork_members(const Tensor& x) {
  std::vector<Future<Tensor>> futures;
  for (auto& m : members_) futures.push_back(fork(m, &BidirectionalLSTM::forked, x));
  return sum_outputs(wait_all(futures));
}

void LSTMEnsemble::load(const std::map<std::string, Tensor>& state) {
  for (size_t i = 0; i < members_.size(); ++i) members_[i]->load(state, "models." + std::to_string(i) + ".");
}

}  // namespace troupe::models
