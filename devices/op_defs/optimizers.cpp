// adam_update and sgd_update: one parameter's step of torch.optim.Adam / torch.optim.SGD as one
// fused op, so an optimizer on a GPU runs one kernel per parameter (models/nn/optimizer.cpp).
// Kernels: devices/cpu/adam_update.cpp, devices/cpu/sgd_update.cpp, devices/cuda/adam_update.cu,
// devices/cuda/sgd_update.cu.
#include "devices/op_defs/optimizers.h"

#include <string>

#include "devices/registry.h"

namespace troupe {

AdamAttrs adam_attrs(const Attrs& attrs) {
  AdamAttrs a{.lr = attrs.get<double>("lr"),
              .beta1 = attrs.get<double>("beta1"),
              .beta2 = attrs.get<double>("beta2"),
              .eps = attrs.get<double>("eps"),
              .weight_decay = attrs.get<double>("weight_decay"),
              .step = attrs.get<int64_t>("step")};
  if (a.step < 1) throw ValueError("adam_update: step counts from 1, got " + std::to_string(a.step));
  return a;
}

SgdAttrs sgd_attrs(const Attrs& attrs) {
  return {.lr = attrs.get<double>("lr"),
          .momentum = attrs.get<double>("momentum"),
          .dampening = attrs.get<double>("dampening"),
          .weight_decay = attrs.get<double>("weight_decay"),
          .nesterov = attrs.get<bool>("nesterov")};
}

namespace {

std::vector<TensorMeta> infer_adam_update(const OpInfer& c) {
  const TensorMeta &p = c.inputs[0], &g = c.inputs[1];
  if (p.dtype != DType::f32 && p.dtype != DType::f64)
    throw DTypeError("adam_update: the parameter must be f32 or f64, got " + p.str());
  if (!is_floating(g.dtype) || g.shape != p.shape)
    throw ShapeError("adam_update: the gradient " + g.str() + " does not match the parameter " + p.str());
  const char* names[] = {"", "", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  for (size_t i = 2; i < c.inputs.size(); ++i)
    if (c.inputs[i].dtype != p.dtype || c.inputs[i].shape != p.shape)
      throw ShapeError(std::string("adam_update: ") + names[i] + " " + c.inputs[i].str() +
                       " does not match the parameter " + p.str());
  adam_attrs(c.attrs);  // checks the step
  return std::vector<TensorMeta>(c.inputs.size() - 1, p);
}

const OpRegistrar adam_update_op{OpDef{
    .name = "adam_update",
    .doc = "one torch.optim.Adam step of a parameter: (param, grad, exp_avg, exp_avg_sq[, max_exp_avg_sq]) -> "
           "(param', exp_avg', exp_avg_sq'[, max_exp_avg_sq']); the max (amsgrad) when given",
    .min_inputs = 4,
    .max_inputs = 5,
    .attrs = {{"lr", AttrType::real, std::nullopt, "learning rate"},
              {"beta1", AttrType::real, 0.9, "decay of the gradient's running mean"},
              {"beta2", AttrType::real, 0.999, "decay of the squared gradient's running mean"},
              {"eps", AttrType::real, 1e-8, "added to the denominator"},
              {"weight_decay", AttrType::real, 0.0, "L2 penalty added to the gradient (not AdamW)"},
              {"step", AttrType::integer, std::nullopt, "this step's number, from 1: the bias corrections"}},
    .infer = infer_adam_update,
    .not_differentiable = "an optimizer step: it runs under no_grad"}};

std::vector<TensorMeta> infer_sgd_update(const OpInfer& c) {
  const TensorMeta &p = c.inputs[0], &g = c.inputs[1];
  if (p.dtype != DType::f32 && p.dtype != DType::f64)
    throw DTypeError("sgd_update: the parameter must be f32 or f64, got " + p.str());
  if (!is_floating(g.dtype) || g.shape != p.shape)
    throw ShapeError("sgd_update: the gradient " + g.str() + " does not match the parameter " + p.str());
  const bool momentum = sgd_attrs(c.attrs).momentum != 0;
  if (c.inputs.size() > 2 && (!momentum || c.inputs[2].dtype != p.dtype || c.inputs[2].shape != p.shape))
    throw ShapeError("sgd_update: a momentum buffer " + c.inputs[2].str() + " needs momentum > 0 and the parameter's " +
                     p.str());
  if (momentum) return {p, p};
  return {p};
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
    .not_differentiable = "an optimizer step: it runs under no_grad"}};

}  // namespace
}  // namespace troupe
