#include "models/lstm.h"

#include <cmath>

#include "actors/fork.h"
#include "devices/ops.h"
#include "devices/random.h"
#include "devices/registry.h"

namespace troupe::models {

LSTM::LSTM(int64_t input_size, int64_t hidden_size, uint64_t seed)
    : input_size_(input_size), hidden_size_(hidden_size) {
  if (input_size <= 0 || hidden_size <= 0)
    throw ValueError("LSTM: sizes must be positive, got input " + std::to_string(input_size) + ", hidden " +
                     std::to_string(hidden_size));
  Generator generator(seed);
  const double bound = 1.0 / std::sqrt(static_cast<double>(hidden_size));
  auto uniform = [&](const Shape& shape) { return rand_uniform(shape, -bound, bound, DType::f32, generator); };
  weight_ih_l0 = uniform({4 * hidden_size, input_size});
  weight_hh_l0 = uniform({4 * hidden_size, hidden_size});
  bias_ih_l0 = uniform({4 * hidden_size});
  bias_hh_l0 = uniform({4 * hidden_size});
  register_parameter("weight_ih_l0", weight_ih_l0);
  register_parameter("weight_hh_l0", weight_hh_l0);
  register_parameter("bias_ih_l0", bias_ih_l0);
  register_parameter("bias_hh_l0", bias_hh_l0);
}

LSTM::Output LSTM::forward(const Tensor& x, const Tensor& h0, const Tensor& c0) const {
  static const OpDef& op = OpRegistry::global().get("lstm");
  std::vector<Tensor> inputs{x, weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0};
  if (h0.defined() || c0.defined()) {
    const Shape state{x.size(1), hidden_size_};
    inputs.push_back(h0.defined() ? h0 : Tensor::zeros(state, DType::f32, x.device()));
    inputs.push_back(c0.defined() ? c0 : Tensor::zeros(state, DType::f32, x.device()));
  }
  auto out = OpRegistry::global().call(op, inputs);
  return {out[0], out[1], out[2]};
}

BidirectionalLSTM::BidirectionalLSTM(int64_t input_size, int64_t hidden_size, uint64_t seed)
    : forward_(std::make_shared<LSTM>(input_size, hidden_size, seed * 2 + 1)),
      backward_(std::make_shared<LSTM>(input_size, hidden_size, seed * 2 + 2)) {
  register_module("cell_f", *forward_);
  register_module("cell_b", *backward_);
}

Tensor BidirectionalLSTM::operator()(const Tensor& x) const {
  if (Lane* caller = x.device().is_cuda() ? Lane::current(x.device()) : nullptr) {
    Tensor out_b = backward_on_side_lane(x, *caller);  // queued first: it runs while the forward one is queued
    Tensor out_f = (*forward_)(x);
    Tensor out = cat({out_f, out_b}, 2);  // waits for the side lane on the device
    out_b.storage()->add_use(caller->record());  // its bytes are not reused before the cat has read them
    return out;
  }
  Tensor out_f = (*forward_)(x);
  Tensor out_b = (*backward_)(flip(x, {0}));
  return cat({out_f, flip(out_b, {0})}, 2);
}

// flip(backward(flip(x))) on the side lane, after the caller's work so far (x's producers).
Tensor BidirectionalLSTM::backward_on_side_lane(const Tensor& x, Lane& caller) const {
  std::lock_guard<std::mutex> lock(side_mutex_);
  if (!side_lane_ || side_lane_->device() != x.device())
    side_lane_ = Lane::make(x.device(), "BidirectionalLSTM backward direction");
  side_lane_->wait(caller.record());
  Tensor out_b;
  {
    LaneGuard on(*side_lane_);
    out_b = flip((*backward_)(flip(x, {0})), {0});
  }
  const Event done = side_lane_->record();
  out_b.storage()->set_ready(done);  // the caller's lane waits for it before reading
  x.storage()->add_use(done);        // x's bytes are not reused before the side lane has read them
  return out_b;
}

Tensor BidirectionalLSTM::forked(const Tensor& x) const {
  auto future_f = fork([cell = forward_](const Tensor& input) { return (*cell)(input); }, x);
  Tensor out_b = (*backward_)(flip(x, {0}));
  Tensor out_f = wait(future_f);
  return cat({out_f, flip(out_b, {0})}, 2);
}

LSTMEnsemble::LSTMEnsemble(int members, int64_t input_size, int64_t hidden_size, uint64_t seed, Device device) {
  if (members <= 0) throw ValueError("LSTMEnsemble: needs at least one member, got " + std::to_string(members));
  members_.reserve(members);
  for (int i = 0; i < members; ++i) {
    members_.emplace_back(ActorOptions{.name = "member " + std::to_string(i), .device = device}, input_size, hidden_size,
                          seed * 1000 + i);
    register_module("models." + std::to_string(i), *members_.back());
  }
}

namespace {
// The TorchScript tutorial's stack(...).sum(0) as a chain of adds: the same values, without the stacked copy
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
  for (auto& m : members_)
    futures.push_back(m.lane() ? fork(m, x) : fork(m, &BidirectionalLSTM::forked, x));
  return sum_outputs(wait_all(futures));
}

}  // namespace troupe::models
