#pragma once
// The LSTM ensemble of PyTorch's tutorial "Dynamic Parallelism in TorchScript" (the TorchScript
// fork/wait tutorial): LSTM (PyTorch's nn.LSTM, one layer, batch_first=false),
// BidirectionalLSTM (a forward and a backward LSTM over the same input, outputs concatenated),
// and LSTMEnsemble (N bidirectional models, outputs summed). All three are Modules under
// PyTorch's names (weight_ih_l0, cell_f.weight_ih_l0, models.0.cell_f.weight_ih_l0).
//
//   models::LSTM lstm(1024, 1024, /*seed=*/1);
//   lstm.load("lstm.safetensors");          // weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0
//   Tensor y = lstm(x);                     // x [T, B, C] -> y [T, B, H]
//
//   models::LSTMEnsemble ensemble(4, 1024, 1024);
//   Tensor a = ensemble.serial(x);          // one thread of control
//   Tensor b = ensemble.fork_directions(x); // each model forks its forward direction
//   Tensor c = ensemble.fork_members(x);    // each member in its own module actor, directions forked
//
//   models::LSTMEnsemble gpu(4, 1024, 1024, /*seed=*/0, Device::cuda(0));   // each member a GPU actor
//   Tensor d = gpu.fork_members(x.to(Device::cuda(0)));   // members overlap, each on its own stream
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "actors/module_actor.h"
#include "devices/lane.h"
#include "devices/tensor.h"
#include "models/nn/module.h"

namespace troupe::models {

class LSTM : public Module {
 public:
  struct Output {
    Tensor output;  // [T, B, H]
    Tensor h_n;     // [B, H]
    Tensor c_n;     // [B, H]
  };

  // Weights drawn like PyTorch's default: uniform(-1/sqrt(H), 1/sqrt(H)), from Generator(seed).
  LSTM(int64_t input_size, int64_t hidden_size, uint64_t seed = 0);

  Output forward(const Tensor& x, const Tensor& h0 = {}, const Tensor& c0 = {}) const;
  Tensor operator()(const Tensor& x) const { return forward(x).output; }

  int64_t input_size() const { return input_size_; }
  int64_t hidden_size() const { return hidden_size_; }

  Tensor weight_ih_l0, weight_hh_l0;  // [4H, C], [4H, H]; gates i, f, g, o
  Tensor bias_ih_l0, bias_hh_l0;      // [4H]

 private:
  int64_t input_size_, hidden_size_;
};

// cat(forward(x), flip(backward(flip(x)))) along the feature dim: [T, B, 2H]. The tutorial's names:
// cell_f.weight_ih_l0, ..., cell_b.bias_hh_l0.
class BidirectionalLSTM : public Module {
 public:
  BidirectionalLSTM(int64_t input_size, int64_t hidden_size, uint64_t seed = 0);

  // Both directions from this thread. Called on a CUDA lane (a GPU actor's call), the backward
  // direction goes on a second lane of this model's own, so the two directions' steps overlap on
  // the device; the result is ready on the calling lane as usual.
  Tensor operator()(const Tensor& x) const;
  Tensor forked(const Tensor& x) const;      // the forward direction forked, as the TorchScript fork/wait tutorial's BiFork

 private:
  Tensor backward_on_side_lane(const Tensor& x, Lane& caller) const;

  std::shared_ptr<LSTM> forward_, backward_;  // shared with a forked call, which may outlive this
  mutable std::mutex side_mutex_;
  mutable std::unique_ptr<Lane> side_lane_;  // made on first use, for the device of that call
};

// N bidirectional LSTMs over the same input, outputs summed (the tutorial's stack(...).sum(0)).
// Names: models.<i>.cell_f.weight_ih_l0 ...
class LSTMEnsemble : public Module {
 public:
  // On a cuda device each member is a GPU actor (ActorOptions::device): its weights move there at
  // construction and its calls queue on its own lane (stream), so fork_members' members overlap.
  // DeviceError without that device.
  LSTMEnsemble(int members, int64_t input_size, int64_t hidden_size, uint64_t seed = 0,
               Device device = Device::cpu());

  Tensor serial(const Tensor& x) const;
  Tensor fork_directions(const Tensor& x) const;
  // Members are module actors. A GPU member runs both directions on its own stream (forking a
  // direction to a worker would put it on the default stream, serialising the members).
  Tensor fork_members(const Tensor& x);

  int members() const { return static_cast<int>(members_.size()); }

 private:
  std::vector<ModuleActor<BidirectionalLSTM>> members_;
};

}  // namespace troupe::models
