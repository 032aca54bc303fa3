// Backward of the neural-network ops: softmax, log_softmax, layer_norm, lstm, conv2d, max_pool2d,
// dropout, dropout2d, nll_loss and cross_entropy. The heavy ones run the backward kernels registered
// beside their forward (conv2d_backward_*, max_pool2d_backward, ...).
#include "devices/autograd/backward_registry.h"
#include "devices/autograd/grad_utils.h"

namespace troupe {
namespace {

using Grads = std::vector<Tensor>;

// softmax: dx = y * (g - sum(g * y)); log_softmax: dx = g - exp(y) * sum(g), over dim.
Grads softmax_backward(const BackwardCall& c) {
  const Tensor &y = c.outputs[0], &g = c.grads[0];
  const int64_t dim = c.attrs.get<int64_t>("dim");
  return {mul(y, sub(g, sum(mul(g, y), {dim}, true)))};
}

Grads log_softmax_backward(const BackwardCall& c) {
  const Tensor &y = c.outputs[0], &g = c.grads[0];
  const int64_t dim = c.attrs.get<int64_t>("dim");
  return {sub(g, mul(exp(y), sum(g, {dim}, true)))};
}

Conv2dOptions conv_options(const Attrs& a) {
  return {a.get<std::vector<int64_t>>("stride"), a.get<std::vector<int64_t>>("padding"),
          a.get<std::vector<int64_t>>("dilation"), a.get<int64_t>("groups")};
}

Grads conv2d_backward(const BackwardCall& c) {
  const Tensor &x = c.inputs[0], &w = c.inputs[1], &g = c.grads[0];
  const Conv2dOptions options = conv_options(c.attrs);
  const bool has_bias = c.inputs.size() > 2;
  Grads grads(c.inputs.size());
  if (c.needs[0]) grads[0] = conv2d_backward_input(g, w, x.shape(), options);
  if (c.needs[1] || (has_bias && c.needs[2])) {
    Grads dw = conv2d_backward_weight(g, x, w.shape(), has_bias && c.needs[2], options);
    if (c.needs[1]) grads[1] = dw[0];
    if (dw.size() > 1) grads[2] = dw[1];
  }
  return grads;
}

Grads max_pool2d_grad(const BackwardCall& c) {
  return {max_pool2d_backward(c.grads[0], c.outputs[1], c.input_metas[0].shape)};
}

Grads dropout_grad(const BackwardCall& c) {
  return {dropout_backward(c.grads[0], c.outputs[1], c.attrs.get<double>("p"))};
}

Grads loss_grad(const BackwardCall& c, bool from_logits) {
  const Tensor weight = c.inputs.size() > 2 ? c.inputs[2] : Tensor();
  const std::string& reduction = c.attrs.get<std::string>("reduction");
  const int64_t ignore = c.attrs.get<int64_t>("ignore_index");
  Grads grads(c.inputs.size());
  if (c.needs[0])
    grads[0] = from_logits ? cross_entropy_backward(c.grads[0], c.inputs[0], c.inputs[1], weight, reduction, ignore)
                           : nll_loss_backward(c.grads[0], c.inputs[0], c.inputs[1], weight, reduction, ignore);
  if (grads.size() > 2 && c.needs[2])
    throw ValueError(std::string(c.op) + ": gradients with respect to the class weights are not supported "
                     "(detach the weight)");
  return grads;
}

Grads layer_norm_grad(const BackwardCall& c) {
  const Tensor weight = c.inputs.size() > 1 ? c.inputs[1] : Tensor();
  const Grads g = layer_norm_backward(c.grads[0], c.inputs[0], c.attrs.get<std::vector<int64_t>>("normalized_shape"),
                                      weight, c.attrs.get<double>("eps"));
  Grads grads(c.inputs.size());
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = g[i];
  return grads;
}

// The forward's optional h0 and c0 are zeros when absent; the kernel recomputes the gates.
Grads lstm_grad(const BackwardCall& c) {
  std::vector<Tensor> in = c.inputs;
  const int64_t B = in[0].size(1), H = in[2].size(1);
  while (in.size() < 7) in.push_back(Tensor::zeros({B, H}, DType::f32, in[0].device()));
  Grads g = lstm_backward(in, c.grads[0], c.grads[1], c.grads[2]);
  g.resize(c.inputs.size());
  return g;
}

const BackwardRegistrar nn_backwards[] = {
    BackwardRegistrar({"layer_norm", layer_norm_grad}),
    BackwardRegistrar({"lstm", lstm_grad}),
    BackwardRegistrar({"softmax", softmax_backward, false, true}),
    BackwardRegistrar({"log_softmax", log_softmax_backward, false, true}),
    BackwardRegistrar({"conv2d", conv2d_backward}),
    BackwardRegistrar({"max_pool2d", max_pool2d_grad, false, true}),
    BackwardRegistrar({"dropout", dropout_grad, false, true}),
    BackwardRegistrar({"dropout2d", dropout_grad, false, true}),
    BackwardRegistrar({"nll_loss", [](const BackwardCall& c) { return loss_grad(c, false); }}),
    BackwardRegistrar({"cross_entropy", [](const BackwardCall& c) { return loss_grad(c, true); }}),
};

}  // namespace
}  // namespace troupe
