#include "models/nn/net.h"

namespace troupe::models {

Net::Net(DType dtype)
    : conv1(1, 10, 5, {}, true, dtype), conv2(10, 20, 5, {}, true, dtype), fc1(320, 50, true, dtype),
      fc2(50, 10, true, dtype) {
  register_module("conv1", conv1);
  register_module("conv2", conv2);
  register_module("conv2_drop", conv2_drop);
  register_module("fc1", fc1);
  register_module("fc2", fc2);
}

Tensor Net::forward(const Tensor& input) const {
  if (input.dim() != 4 || input.size(1) != 1 || input.size(2) != 28 || input.size(3) != 28)
    throw ShapeError("Net: expects images [N, 1, 28, 28], got " + input.meta().str());
  Tensor x = relu(max_pool2d(conv1(input), {2}));
  x = relu(max_pool2d(conv2_drop(conv2(x)), {2}));
  x = relu(fc1(x.reshape({-1, 320})));
  x = dropout(x, 0.5, is_training());
  return log_softmax(fc2(x), 1);
}

}  // namespace troupe::models
