#pragma once
// The distributed tutorial's Net made wider and with lighter dropout, for the "better" Fashion-MNIST recipe: two
// 5x5 convolutions (1 -> c1 -> c2 channels), each followed by 2x2 max pooling and relu, a hidden
// layer of `hidden` units with dropout p, and 10 log-probabilities. No Dropout2d: with few
// channels, dropping whole feature maps costs more accuracy than it saves in overfitting.
//
//   manual_seed(1234);
//   WideNet net({.conv1 = 16, .conv2 = 32, .hidden = 128, .dropout = 0.25});
//   Tensor log_probs = net(images);   // images f32 [N, 1, 28, 28] -> [N, 10]
#include "models/nn/layers.h"

namespace troupe::models {

struct WideNetOptions {
  int64_t conv1 = 16, conv2 = 32, hidden = 128;
  double dropout = 0.25;
};

class WideNet : public Module {
 public:
  explicit WideNet(const WideNetOptions& options = {});
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }

  WideNetOptions options;
  Conv2d conv1, conv2;
  Linear fc1, fc2;
  Dropout drop;
};

}  // namespace troupe::models
