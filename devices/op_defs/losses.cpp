// nll_loss and cross_entropy (log_softmax then nll_loss) over x [N, C] and class targets [N],
// optionally weighted per class, and their backward ops.
// Kernels: devices/cpu/nll_loss.cpp, devices/cuda/losses.cu.
#include "devices/op_defs/losses.h"

#include <string>

#include "devices/registry.h"

namespace troupe {

LossAttrs loss_attrs(std::string_view op, const Attrs& attrs) {
  LossAttrs a;
  const std::string& r = attrs.get<std::string>("reduction");
  if (r == "mean") a.reduction = LossReduction::mean;
  else if (r == "sum") a.reduction = LossReduction::sum;
  else if (r == "none") a.reduction = LossReduction::none;
  else throw ValueError(std::string(op) + ": reduction must be \"mean\", \"sum\" or \"none\", got \"" + r + "\"");
  a.ignore_index = attrs.get<int64_t>("ignore_index");
  return a;
}

namespace {

// Validates (input, target, weight?) starting at inputs[first]; returns the loss meta.
TensorMeta check(std::string_view op, const std::vector<TensorMeta>& in, size_t first, const Attrs& attrs) {
  const TensorMeta &x = in[first], &target = in[first + 1];
  if (x.dtype != DType::f32 && x.dtype != DType::f64)
    throw DTypeError(std::string(op) + ": the input must be f32 or f64, got " + x.str());
  if (target.dtype != DType::i64 && target.dtype != DType::i32)
    throw DTypeError(std::string(op) + ": the target must hold class indices (i64 or i32), got " + target.str());
  if (x.shape.size() != 2) throw ShapeError(std::string(op) + ": the input must be [N, C], got " + x.str());
  if (target.shape != Shape{x.shape[0]})
    throw ShapeError(std::string(op) + ": the target must be [" + std::to_string(x.shape[0]) + "] for input " +
                     x.str() + ", got " + target.str());
  if (in.size() > first + 2) {
    const TensorMeta& w = in[first + 2];
    if (w.dtype != x.dtype) throw DTypeError(std::string(op) + ": the weight " + w.str() + " does not match the input " + x.str());
    if (w.shape != Shape{x.shape[1]})
      throw ShapeError(std::string(op) + ": the weight must be [" + std::to_string(x.shape[1]) + "] for input " +
                       x.str() + ", got " + w.str());
  }
  const LossReduction r = loss_attrs(op, attrs).reduction;
  return {x.dtype, r == LossReduction::none ? Shape{x.shape[0]} : Shape{}, x.device};
}

std::vector<AttrSpec> loss_attr_specs() {
  return {{"reduction", AttrType::string, std::string("mean"), "\"mean\" (weighted), \"sum\" or \"none\""},
          {"ignore_index", AttrType::integer, int64_t{-100}, "samples with this target count for nothing"}};
}

const OpRegistrar nll_loss_op{OpDef{
    .name = "nll_loss",
    .doc = "negative log-likelihood of class targets [N] under log-probabilities [N, C] (class weights [C] optional)",
    .min_inputs = 2,
    .max_inputs = 3,
    .attrs = loss_attr_specs(),
    .infer = [](const OpInfer& c) { return std::vector<TensorMeta>{check(c.op, c.inputs, 0, c.attrs)}; }}};

const OpRegistrar cross_entropy_op{OpDef{
    .name = "cross_entropy",
    .doc = "nll_loss(log_softmax(logits [N, C], 1), targets [N]) (class weights [C] optional)",
    .min_inputs = 2,
    .max_inputs = 3,
    .attrs = loss_attr_specs(),
    .infer = [](const OpInfer& c) { return std::vector<TensorMeta>{check(c.op, c.inputs, 0, c.attrs)}; }}};

std::vector<TensorMeta> infer_loss_backward(const OpInfer& c) {
  const TensorMeta& loss = check(c.op, c.inputs, 1, c.attrs);
  const TensorMeta& g = c.inputs[0];
  if (g.dtype != loss.dtype || g.shape != loss.shape)
    throw ShapeError(std::string(c.op) + ": the gradient " + g.str() + " does not match the loss " + loss.str());
  return {c.inputs[1]};
}

const OpRegistrar nll_loss_backward_op{OpDef{
    .name = "nll_loss_backward",
    .doc = "gradient of nll_loss: (grad, input, target[, weight]) -> d input",
    .min_inputs = 3,
    .max_inputs = 4,
    .attrs = loss_attr_specs(),
    .infer = infer_loss_backward,
    .not_differentiable = kGradientKernel}};

const OpRegistrar cross_entropy_backward_op{OpDef{
    .name = "cross_entropy_backward",
    .doc = "gradient of cross_entropy: (grad, logits, target[, weight]) -> d logits",
    .min_inputs = 3,
    .max_inputs = 4,
    .attrs = loss_attr_specs(),
    .infer = infer_loss_backward,
    .not_differentiable = kGradientKernel}};

}  // namespace
}  // namespace troupe
