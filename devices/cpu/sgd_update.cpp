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

#include "devices/registry.h"

namespace troupe {
namespace {

std::vector<TensorMeta> infer_sgd_update(const OpInfer& c) {
  const TensorMeta &p = c.inputs[0], &g = c.inputs[1];
  if (p.dtype != DType::f32 && p.dtype != DType::f64)
    throw DTypeError("sgd_update: the parameter must be f32 or f64, got " + p.str());
  if (!is_floating(g.dtype) || g.shape != p.shape)
    throw ShapeError("sgd_update: the gradient " + g.str() + " does not match the parameter " + p.str());
  const bool momentum = c.attrs.get<double>("momentum") != 0;
  if (c.inputs.size() > 2 && (!momentum || c.inputs[2].dtype != p.dtype || c.inputs[2].shape != p.shape))
    throw ShapeError("sgd_update: a momentum buffer " + c.inputs[2].str() + " needs momentum > 0 and the parameter's " +
                     p.str());
  if (momentum) return {p, p};
  return {p};
}

template <class T>
void sgd(const OpCall& call, const T* pp, const T* pg, const T* pb_in, T* out, T* pb) {
  const Attrs& a = call.attrs;
  const int64_t n = numel(call.outputs[0].shape);
  const T lr = T(a.get<double>("lr")), wd = T(a.get<double>("weight_decay")), mom = T(a.get<double>("momentum")),
          damp = T(1 - a.get<double>("dampening"));
  if (!pb) {
    for (int64_t i = 0; i < n; ++i) out[i] = pp[i] - lr * (pg[i] + wd * pp[i]);
    return;
  }
  const bool nesterov = a.get<bool>("nesterov");
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

const OpRegistrar sgd_update_op{OpDef{
    .name = "sgd_update",
    .doc = "one torch.optim.SGD step of a parameter: (param, grad[, momentum_buffer]) -> (param'[, momentum_buffer'])",
    .min_inputs = 2,
    .max_inputs = 3,
    .attrs = {{"lr", AttrType::real, std::nullopt, "learning rate"},
              {"momentum", AttrType::real, 0.0, "0: no momentum buffer"},
              {"dampening", AttrType::real, 0.0, "scales the gradient added to the buffer by 1 - dampening"},
              {"weight_decay", AttrType::real, 0.0, "L2 penalty added to the gradient"},
              {"nesterov", AttrType::boolean, false, "Nesterov momentum"}},
    .infer = infer_sgd_update,
    .kernels = {{DeviceType::cpu, sgd_update_cpu}},
    .not_differentiable = "an optimizer step: it runs under no_grad"}};

}  // namespace
}  // namespace troupe
