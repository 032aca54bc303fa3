// sgd_update: one parameter's step of torch.optim.SGD as one fused op, so an optimizer on a GPU
// runs one kernel per parameter instead of a handful of elementwise ops (models/nn/optimizer.cpp).
//
//   (param, grad[, momentum_buffer]) -> (param'[, momentum_buffer'])
//   d = grad + weight_decay * param; with momentum: buf = momentum * buf + (1 - dampening) * d, or
//   buf = d when no buffer is given (the first step); d = nesterov ? d + momentum * buf : buf;
//   param' = param - lr * d.
//
// The arithmetic is in the parameter's dtype (f32 or f64), the gradient converted to it first,
// in the order SGD::step always used, so results are bit for bit those of the loop it replaced.
#include <string>

#include "devices/op_defs/optimizers.h"
#include "devices/registry.h"

namespace troupe {
namespace {

template <class T>
void sgd(const OpCall& call, const T* pp, const T* pg, const T* pb_in, T* out, T* pb) {
  const SgdAttrs a = sgd_attrs(call.attrs);
  const int64_t n = numel(call.outputs[0].shape);
  const T lr = T(a.lr), wd = T(a.weight_decay), mom = T(a.momentum), damp = T(1 - a.dampening);
  if (!pb) {
    for (int64_t i = 0; i < n; ++i) out[i] = pp[i] - lr * (pg[i] + wd * pp[i]);
    return;
  }
  const bool nesterov = a.nesterov;
  for (int64_t i = 0; i < n; ++i) {
    const T d = pg[i] + wd * pp[i];
    pb[i] = pb_in ? mom * pb_in[i] + damp * d : d;
    out[i] = pp[i] - lr * (nesterov ? d + mom * pb[i] : pb[i]);
  }
}

std::vector<Tensor> sgd_update_cpu(const OpCall& call) {
  const Tensor p = call.inputs[0].contiguous();
  const Tensor g = call.inputs[1].to(p.dtype()).contiguous();
  const Tensor buffer = call.inputs.size() > 2 ? call.inputs[2].contiguous() : Tensor();
  std::vector<Tensor> out;
  for (const TensorMeta& m : call.outputs) out.push_back(Tensor::empty(m.shape, m.dtype));
  auto run = [&](auto zero) {
    using T = decltype(zero);
    sgd<T>(call, p.data<T>(), g.data<T>(), buffer.defined() ? buffer.data<T>() : nullptr, out[0].mutable_data<T>(),
           out.size() > 1 ? out[1].mutable_data<T>() : nullptr);
  };
  if (p.dtype() == DType::f32) run(float{});
  else run(double{});
  return out;
}

const OpRegistrar sgd_update_kernel{"sgd_update", DeviceType::cpu, sgd_update_cpu};

}  // namespace
}  // namespace troupe
