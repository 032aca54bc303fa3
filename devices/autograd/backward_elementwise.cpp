// Backward of the elementwise ops. Binary ops (and where) broadcast, so each gradient is summed
// back to its input's shape; unary ops whose derivative is a function of their output save the output.
#include "devices/autograd/backward_registry.h"
#include "devices/autograd/grad_utils.h"

namespace troupe {
namespace {

using Grads = std::vector<Tensor>;

const TensorMeta& in(const BackwardCall& c, size_t i) { return c.input_metas[i]; }

Grads add_backward(const BackwardCall& c) {
  return {c.needs[0] ? sum_to(c.grads[0], in(c, 0).shape) : Tensor(),
          c.needs[1] ? sum_to(c.grads[0], in(c, 1).shape) : Tensor()};
}

Grads sub_backward(const BackwardCall& c) {
  return {c.needs[0] ? sum_to(c.grads[0], in(c, 0).shape) : Tensor(),
          c.needs[1] ? sum_to(neg(c.grads[0]), in(c, 1).shape) : Tensor()};
}

Grads mul_backward(const BackwardCall& c) {
  const Tensor &a = c.inputs[0], &b = c.inputs[1], &g = c.grads[0];
  return {c.needs[0] ? sum_to(mul(g, b), in(c, 0).shape) : Tensor(),
          c.needs[1] ? sum_to(mul(g, a), in(c, 1).shape) : Tensor()};
}

Grads div_backward(const BackwardCall& c) {  // d(a/b) = g/b, -g*a/b^2
  const Tensor &a = c.inputs[0], &b = c.inputs[1], &g = c.grads[0];
  const Tensor g_over_b = div(g, b);
  return {c.needs[0] ? sum_to(g_over_b, in(c, 0).shape) : Tensor(),
          c.needs[1] ? sum_to(neg(div(mul(g_over_b, a), b)), in(c, 1).shape) : Tensor()};
}

Grads neg_backward(const BackwardCall& c) { return {neg(c.grads[0])}; }
Grads exp_backward(const BackwardCall& c) { return {mul(c.grads[0], c.outputs[0])}; }
Grads log_backward(const BackwardCall& c) { return {div(c.grads[0], c.inputs[0])}; }
Grads sqrt_backward(const BackwardCall& c) { return {div(c.grads[0], mul(c.outputs[0], 2.0))}; }
Grads abs_backward(const BackwardCall& c) {  // sign(x), 0 at 0
  const Tensor& x = c.inputs[0];
  const Tensor zero = Tensor::zeros({}, x.dtype());
  const Tensor sign = sub(gt(x, zero).to(x.dtype()), lt(x, zero).to(x.dtype()));
  return {mul(c.grads[0], sign)};
}
Grads tanh_grad(const BackwardCall& c) { return {tanh_backward(c.grads[0], c.outputs[0])}; }
Grads sigmoid_grad(const BackwardCall& c) { return {sigmoid_backward(c.grads[0], c.outputs[0])}; }
Grads relu_grad(const BackwardCall& c) { return {relu_backward(c.grads[0], c.outputs[0])}; }
Grads gelu_grad(const BackwardCall& c) {
  return {gelu_backward(c.grads[0], c.inputs[0], c.attrs.get<std::string>("approximate") == "tanh")};
}

// maximum/minimum: the gradient goes to the operand that was picked (to a on ties).
Grads extreme_backward(const BackwardCall& c, bool is_max) {
  const Tensor &a = c.inputs[0], &b = c.inputs[1], &g = c.grads[0];
  const Tensor picks_a = (is_max ? ge(a, b) : le(a, b)).to(g.dtype());
  const Tensor ga = mul(g, picks_a);
  return {c.needs[0] ? sum_to(ga, in(c, 0).shape) : Tensor(),
          c.needs[1] ? sum_to(sub(g, ga), in(c, 1).shape) : Tensor()};
}

// where(condition, x, y): the gradient goes to x where the condition holds, to y elsewhere.
Grads where_backward(const BackwardCall& c) {
  const Tensor &condition = c.inputs[0], &g = c.grads[0];
  const Tensor zero = Tensor::zeros({}, g.dtype(), g.device());
  return {Tensor(), c.needs[1] ? sum_to(where(condition, g, zero), in(c, 1).shape) : Tensor(),
          c.needs[2] ? sum_to(where(condition, zero, g), in(c, 2).shape) : Tensor()};
}

const BackwardRegistrar elementwise_backwards[] = {
    BackwardRegistrar({"add", add_backward, false}),
    BackwardRegistrar({"sub", sub_backward, false}),
    BackwardRegistrar({"mul", mul_backward}),
    BackwardRegistrar({"div", div_backward}),
    BackwardRegistrar({"maximum", [](const BackwardCall& c) { return extreme_backward(c, true); }}),
    BackwardRegistrar({"minimum", [](const BackwardCall& c) { return extreme_backward(c, false); }}),
    BackwardRegistrar({"neg", neg_backward, false}),
    BackwardRegistrar({"abs", abs_backward}),
    BackwardRegistrar({"exp", exp_backward, false, true}),
    BackwardRegistrar({"log", log_backward}),
    BackwardRegistrar({"sqrt", sqrt_backward, false, true}),
    BackwardRegistrar({"tanh", tanh_grad, false, true}),
    BackwardRegistrar({"sigmoid", sigmoid_grad, false, true}),
    BackwardRegistrar({"relu", relu_grad, false, true}),
    BackwardRegistrar({"gelu", gelu_grad}),
    BackwardRegistrar({"where", where_backward}),
};

}  // namespace
}  // namespace troupe
