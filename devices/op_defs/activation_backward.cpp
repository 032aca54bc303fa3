// Backward ops of the activations: relu_backward(grad, y) = grad * (y > 0), tanh_backward(grad, y)
// = grad * (1 - y^2), sigmoid_backward(grad, y) = grad * y * (1 - y) (y the forward output),
// gelu_backward(grad, x) = grad * gelu'(x) (x the forward input). Floating tensors of one shape and
// dtype.
// Kernels: devices/cpu/activation_backward.cpp, devices/cuda/activation_backward.cu.
#include <string>

#include "devices/op_defs/elementwise.h"
#include "devices/registry.h"

namespace troupe {
namespace {

std::vector<TensorMeta> infer_pair(const OpInfer& c) {
  const TensorMeta &g = c.inputs[0], &y = c.inputs[1];
  if (!is_floating(g.dtype) || g.dtype != y.dtype)
    throw DTypeError(std::string(c.op) + ": expects two floating tensors of one dtype, got " + g.str() + " and " +
                     y.str());
  if (g.shape != y.shape)
    throw ShapeError(std::string(c.op) + ": the gradient " + g.str() + " and the saved tensor " + y.str() +
                     " differ in shape");
  return {g};
}

OpDef backward_op(std::string name, std::string doc) {
  return OpDef{.name = std::move(name),
               .doc = std::move(doc),
               .min_inputs = 2,
               .max_inputs = 2,
               .attrs = {},
               .infer = infer_pair,
               .not_differentiable = kGradientKernel};
}

const OpRegistrar relu_backward_op{backward_op("relu_backward", "grad * (y > 0), y = relu(x)")};
const OpRegistrar tanh_backward_op{backward_op("tanh_backward", "grad * (1 - y^2), y = tanh(x)")};
const OpRegistrar sigmoid_backward_op{backward_op("sigmoid_backward", "grad * y * (1 - y), y = sigmoid(x)")};
const OpRegistrar gelu_backward_op{OpDef{
    .name = "gelu_backward",
    .doc = "grad * gelu'(x), x the forward input",
    .min_inputs = 2,
    .max_inputs = 2,
    .attrs = {{"approximate", AttrType::string, std::string("none"), "\"none\" (erf form) or \"tanh\""}},
    .infer =
        [](const OpInfer& c) {
          gelu_form(c.op, c.attrs);
          return infer_pair(c);
        },
    .not_differentiable = kGradientKernel}};

}  // namespace
}  // namespace troupe
