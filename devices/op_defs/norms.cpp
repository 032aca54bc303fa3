// layer_norm, its backward, and add_layer_norm (layer_norm(x + residual) in one pass).
// Kernels: devices/cpu/layer_norm.cpp, layer_norm_backward.cpp, add_layer_norm.cpp and
// devices/cuda/layer_norm.cu, layer_norm_backward.cu, add_layer_norm.cu.
#include "devices/op_defs/norms.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "devices/registry.h"

namespace troupe {

LayerNormAttrs layer_norm_attrs(const Attrs& attrs) {
  return {.normalized_shape = attrs.get<std::vector<int64_t>>("normalized_shape"), .eps = attrs.get<double>("eps")};
}

AddLayerNormAttrs add_layer_norm_attrs(const Attrs& attrs) {
  return {.eps = attrs.get<double>("eps"), .return_sum = attrs.get<bool>("return_sum")};
}

namespace {

std::vector<TensorMeta> infer_layer_norm(const OpInfer& c) {
  const TensorMeta& x = c.inputs[0];
  const Shape& normalized = c.attrs.get<std::vector<int64_t>>("normalized_shape");
  const double eps = c.attrs.get<double>("eps");
  if (!is_floating(x.dtype))
    throw DTypeError("layer_norm: needs a floating tensor, got " + x.str() + " (convert it with to(f32) first)");
  if (normalized.empty())
    throw ValueError("layer_norm: normalized_shape must name at least one dim, got [] for " + x.str());
  const size_t k = normalized.size();
  if (k > x.shape.size() || !std::equal(normalized.begin(), normalized.end(), x.shape.end() - k))
    throw ShapeError("layer_norm: normalized_shape " + to_string(normalized) + " is not the trailing dims of " +
                     x.str());
  if (!(eps >= 0.0) || !std::isfinite(eps))
    throw ValueError("layer_norm: eps must be finite and >= 0, got " + std::to_string(eps));
  const char* roles[] = {"", "weight", "bias"};
  for (size_t i = 1; i < c.inputs.size(); ++i) {
    const TensorMeta& p = c.inputs[i];
    if (!is_floating(p.dtype))
      throw DTypeError(std::string("layer_norm: ") + roles[i] + " must be floating, got " + p.str() + " for " + x.str());
    if (p.shape != normalized)
      throw ShapeError(std::string("layer_norm: ") + roles[i] + " " + p.str() + " must have normalized_shape " +
                       to_string(normalized) + " (x is " + x.str() + ")");
  }
  return {x};
}

const OpRegistrar layer_norm_op{OpDef{
    .name = "layer_norm",
    .doc = "normalise over the trailing normalized_shape dims (biased variance), then * weight + bias; "
           "inputs x [, weight [, bias]]",
    .min_inputs = 1,
    .max_inputs = 3,
    .attrs = {{"normalized_shape", AttrType::int_list, std::nullopt, "the trailing dims of x to normalise over"},
              {"eps", AttrType::real, 1e-5, "added to the variance"}},
    .infer = infer_layer_norm}};

std::vector<TensorMeta> infer_layer_norm_backward(const OpInfer& c) {
  const TensorMeta &g = c.inputs[0], &x = c.inputs[1];
  const Shape& norm = c.attrs.get<std::vector<int64_t>>("normalized_shape");
  if (x.dtype != DType::f32 && x.dtype != DType::f64)
    throw DTypeError("layer_norm_backward: expects f32 or f64, got " + x.str());
  if (g.dtype != x.dtype || g.shape != x.shape)
    throw ShapeError("layer_norm_backward: the gradient " + g.str() + " does not match the input " + x.str());
  if (norm.empty() || norm.size() > x.shape.size() ||
      !std::equal(norm.begin(), norm.end(), x.shape.end() - static_cast<int64_t>(norm.size())))
    throw ShapeError("layer_norm_backward: normalized_shape " + to_string(norm) + " is not the trailing shape of " +
                     x.str());
  std::vector<TensorMeta> out{x};
  if (c.inputs.size() > 2) {
    const TensorMeta& w = c.inputs[2];
    if (w.dtype != x.dtype || w.shape != norm)
      throw ShapeError("layer_norm_backward: the weight must be " + std::string(name(x.dtype)) + to_string(norm) +
                       ", got " + w.str());
    out.push_back(w);
    out.push_back(w);
  }
  return out;
}

const OpRegistrar layer_norm_backward_op{OpDef{
    .name = "layer_norm_backward",
    .doc = "gradients of layer_norm: (grad, x[, weight]) -> dx[, d weight, d bias]",
    .min_inputs = 2,
    .max_inputs = 3,
    .attrs = {{"normalized_shape", AttrType::int_list, std::nullopt, "the trailing dims of x normalised over"},
              {"eps", AttrType::real, 1e-5, "added to the variance"}},
    .infer = infer_layer_norm_backward,
    .not_differentiable = kGradientKernel}};

std::vector<TensorMeta> infer_add_layer_norm(const OpInfer& c) {
  const TensorMeta& x = c.inputs[0];
  const TensorMeta& residual = c.inputs[1];
  const std::string operands = x.str() + " + " + residual.str();
  if (!is_floating(x.dtype))
    throw DTypeError("add_layer_norm: needs floating tensors, got " + operands);
  if (residual.dtype != x.dtype || residual.shape != x.shape)
    throw ShapeError("add_layer_norm: x and residual must have one dtype and shape, got " + operands);
  if (x.shape.empty()) throw ShapeError("add_layer_norm: x must have at least one dim, got " + x.str());
  const double eps = c.attrs.get<double>("eps");
  if (!(eps >= 0.0) || !std::isfinite(eps))
    throw ValueError("add_layer_norm: eps must be finite and >= 0, got " + std::to_string(eps));
  const char* roles[] = {"", "", "weight", "bias"};
  for (size_t i = 2; i < c.inputs.size(); ++i) {
    const TensorMeta& p = c.inputs[i];
    if (!is_floating(p.dtype))
      throw DTypeError(std::string("add_layer_norm: ") + roles[i] + " must be floating, got " + p.str());
    if (p.shape != Shape{x.shape.back()})
      throw ShapeError(std::string("add_layer_norm: ") + roles[i] + " " + p.str() + " must be [" +
                       std::to_string(x.shape.back()) + "] for " + operands);
  }
  if (c.attrs.get<bool>("return_sum")) return {x, x};
  return {x};
}

const OpRegistrar add_layer_norm_op{OpDef{
    .name = "add_layer_norm",
    .doc = "layer_norm(x + residual) over the last dim, inputs x, residual [, weight [, bias]] (weight and bias [d] "
           "in any floating dtype); the sum is normalised in f32 (f64 for f64) before any rounding; with return_sum, "
           "the sum x + residual as a second output; inference only",
    .min_inputs = 2,
    .max_inputs = 4,
    .attrs = {{"eps", AttrType::real, 1e-5, "added to the variance"},
              {"return_sum", AttrType::boolean, false, "also return x + residual (pre-norm layers)"}},
    .infer = infer_add_layer_norm,
    .not_differentiable = "an inference kernel: train with add and layer_norm, whose gradients are defined"}};

}  // namespace
}  // namespace troupe
