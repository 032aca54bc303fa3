// dropout and dropout2d: zero elements (whole channels) with probability p while training and
// scale the rest by 1 / (1 - p), returning the keep-mask; dropout_backward applies that mask.
// Kernels: devices/cpu/dropout.cpp, devices/cuda/dropout.cu.
#include "devices/op_defs/dropout.h"

#include <string>

#include "devices/registry.h"

namespace troupe {

DropoutAttrs dropout_attrs(std::string_view op, const Attrs& attrs) {
  DropoutAttrs a;
  a.p = attrs.get<double>("p");
  if (!(a.p >= 0.0 && a.p <= 1.0))
    throw ValueError(std::string(op) + ": p must be in [0, 1], got " + std::to_string(a.p));
  if (attrs.has("training")) a.training = attrs.get<bool>("training");  // dropout_backward has none
  return a;
}

namespace {

Shape mask_shape(std::string_view op, const TensorMeta& x, const DropoutAttrs& a) {
  if (!a.active()) return {0};
  if (op == "dropout") return x.shape;
  Shape s = x.shape;
  for (size_t d = 2; d < s.size(); ++d) s[d] = 1;
  return s;
}

std::vector<TensorMeta> infer_dropout(const OpInfer& c) {
  const TensorMeta& x = c.inputs[0];
  const DropoutAttrs a = dropout_attrs(c.op, c.attrs);
  if (!is_floating(x.dtype)) throw DTypeError(std::string(c.op) + ": expects a floating tensor, got " + x.str());
  if (c.op == "dropout2d" && x.shape.size() < 3)
    throw ShapeError("dropout2d: expects [N, C, H, W] (or [N, C, L...]), got " + x.str());
  return {x, {DType::boolean, mask_shape(c.op, x, a), x.device}};
}

std::vector<AttrSpec> dropout_attr_specs() {
  return {{"p", AttrType::real, 0.5, "probability of zeroing"},
          {"training", AttrType::boolean, true, "false: the identity"}};
}

const OpRegistrar dropout_op{OpDef{.name = "dropout",
                                   .doc = "zeroes elements with probability p while training, scales the rest by "
                                          "1/(1-p) -> (y, bool keep-mask)",
                                   .attrs = dropout_attr_specs(),
                                   .infer = infer_dropout}};

const OpRegistrar dropout2d_op{OpDef{.name = "dropout2d",
                                     .doc = "zeroes whole channels x[n, c] with probability p while training, "
                                            "scales the rest by 1/(1-p) -> (y, bool keep-mask [N, C, 1, ...])",
                                     .attrs = dropout_attr_specs(),
                                     .infer = infer_dropout}};

const OpRegistrar dropout_backward_op{OpDef{
    .name = "dropout_backward",
    .doc = "gradient of dropout/dropout2d: grad * mask / (1 - p) (grad itself for an empty mask)",
    .min_inputs = 2,
    .max_inputs = 2,
    .attrs = {{"p", AttrType::real, 0.5, "the forward call's p"}},
    .infer =
        [](const OpInfer& c) {
          const TensorMeta &g = c.inputs[0], &mask = c.inputs[1];
          dropout_attrs(c.op, c.attrs);
          if (!is_floating(g.dtype) || mask.dtype != DType::boolean)
            throw DTypeError("dropout_backward: expects a floating gradient and a bool mask, got " + g.str() + " and " +
                             mask.str());
          if (numel(mask.shape) != 0) broadcast_shapes("dropout_backward", mask.shape, g.shape);
          return std::vector<TensorMeta>{g};
        },
    .not_differentiable = kGradientKernel}};

}  // namespace
}  // namespace troupe
