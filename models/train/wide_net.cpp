#include "models/train/wide_net.h"

#include <string>

#include "devices/error.h"

namespace troupe::models {

namespace {

const WideNetOptions& checked(const WideNetOptions& o) {
  if (o.conv1 <= 0 || o.conv2 <= 0 || o.hidden <= 0 || !(o.dropout >= 0 && o.dropout < 1))
    throw ValueError("WideNet: channels and hidden units must be positive and dropout in [0, 1), got conv1 " +
                     std::to_string(o.conv1) + " conv2 " + std::to_string(o.conv2) + " hidden " +
                     std::to_string(o.hidden) + " dropout " + std::to_string(o.dropout));
  return o;
}

}  // namespace

WideNet::WideNet(const WideNetOptions& o)
    : options(checked(o)), conv1(1, o.conv1, 5), conv2(o.conv1, o.conv2, 5), fc1(o.conv2 * 16, o.hidden),
      fc2(o.hidden, 10), drop(o.dropout) {
  register_module("conv1", conv1);
  register_module("conv2", conv2);
  register_module("fc1", fc1);
  register_module("fc2", fc2);
  register_module("drop", drop);  // follows train() and eval()
}

Tensor WideNet::forward(const Tensor& input) const {
  if (input.dim() != 4 || input.size(1) != 1 || input.size(2) != 28 || input.size(3) != 28)
    throw ShapeError("WideNet: expects images [N, 1, 28, 28], got " + input.meta().str());
  Tensor x = relu(max_pool2d(conv1(input), {2}));
  x = relu(max_pool2d(conv2(x), {2}));
  x = drop(relu(fc1(x.reshape({-1, options.conv2 * 16}))));
  return log_softmax(fc2(x), 1);
}

}  // namespace troupe::models
