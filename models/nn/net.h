#pragma once
// The Net of PyTorch's distributed tutorial for 28x28 single-channel images (MNIST, Fashion-MNIST), PyTorch names and all:
// conv1 1->10 k5, conv2 10->20 k5 with Dropout2d, fc1 320->50, dropout, fc2 50->10, log_softmax.
//
//   manual_seed(1234);
//   Net net;                                      // PyTorch's default initialisation
//   SGD opt(net.parameters(), {.lr = 0.01, .momentum = 0.5});
//   opt.zero_grad();
//   Tensor loss = nll_loss(net(images), labels);  // images f32 [N, 1, 28, 28], labels i64 [N]
//   loss.backward();
//   opt.step();
//   net.load(read_safetensors("net.safetensors"));  // a state_dict saved from the PyTorch Net
#include "models/nn/layers.h"

namespace troupe::models {

class Net : public Module {
 public:
  explicit Net(DType dtype = DType::f32);
  Tensor forward(const Tensor& x) const;  // [N, 1, 28, 28] -> log-probabilities [N, 10]
  Tensor operator()(const Tensor& x) const { return forward(x); }

  Conv2d conv1, conv2;
  Dropout2d conv2_drop;
  Linear fc1, fc2;
};

}  // namespace troupe::models
