// conv2d (PyTorch's F.conv2d: x [N, C, H, W], weight [O, C/groups, kh, kw], optional bias [O];
// stride, padding, dilation, groups) and its two backward ops, conv2d_backward_input and
// conv2d_backward_weight (which also gives the bias gradient). Kernels: devices/cpu/conv2d.cpp
// (oneDNN), devices/cuda/conv2d.cpp (cuDNN).
#include "devices/op_defs/conv2d.h"

#include <string>

#include "devices/registry.h"

namespace troupe {

Conv2dAttrs conv2d_attrs(std::string_view op, const Attrs& attrs) {
  Conv2dAttrs a;
  a.stride = pair_attr(op, attrs, "stride", 1);
  a.padding = pair_attr(op, attrs, "padding", 0);
  a.dilation = pair_attr(op, attrs, "dilation", 1);
  a.groups = attrs.get<int64_t>("groups");
  if (a.groups < 1) throw ValueError(std::string(op) + ": groups must be >= 1, got " + std::to_string(a.groups));
  return a;
}

Conv2dGeometry conv2d_geometry(std::string_view op, const TensorMeta& x, const TensorMeta& weight, const Attrs& attrs) {
  const std::string pair = x.str() + " with weight " + weight.str();
  if (!(x.dtype == DType::f32 || x.dtype == DType::f64) || weight.dtype != x.dtype)
    throw DTypeError(std::string(op) + ": expects f32 or f64 tensors of one dtype, got " + pair);
  if (x.shape.size() != 4) throw ShapeError(std::string(op) + ": the input must be [N, C, H, W], got " + x.str());
  if (weight.shape.size() != 4)
    throw ShapeError(std::string(op) + ": the weight must be [O, C/groups, kh, kw], got " + weight.str());
  Conv2dGeometry g{};
  g.n = x.shape[0], g.c = x.shape[1], g.h = x.shape[2], g.w = x.shape[3];
  g.o = weight.shape[0], g.kh = weight.shape[2], g.kw = weight.shape[3];
  const Conv2dAttrs a = conv2d_attrs(op, attrs);
  g.sh = a.stride.h, g.sw = a.stride.w, g.ph = a.padding.h, g.pw = a.padding.w;
  g.dh = a.dilation.h, g.dw = a.dilation.w, g.groups = a.groups;
  if (g.c % g.groups || g.o % g.groups)
    throw ShapeError(std::string(op) + ": " + pair + ": input channels " + std::to_string(g.c) +
                     " and output channels " + std::to_string(g.o) + " must both divide by groups " +
                     std::to_string(g.groups));
  if (weight.shape[1] != g.c / g.groups)
    throw ShapeError(std::string(op) + ": " + pair + ": the weight expects " + std::to_string(weight.shape[1] * g.groups) +
                     " input channels, the input has " + std::to_string(g.c));
  if (g.kh < 1 || g.kw < 1 || g.o < 1) throw ShapeError(std::string(op) + ": empty kernel in weight " + weight.str());
  const int64_t eh = g.dh * (g.kh - 1) + 1, ew = g.dw * (g.kw - 1) + 1;  // effective kernel extent
  if (g.h + 2 * g.ph < eh || g.w + 2 * g.pw < ew)
    throw ShapeError(std::string(op) + ": " + pair + ": the (dilated) kernel " + std::to_string(eh) + "x" +
                     std::to_string(ew) + " is larger than the padded input " + std::to_string(g.h + 2 * g.ph) + "x" +
                     std::to_string(g.w + 2 * g.pw));
  g.oh = (g.h + 2 * g.ph - eh) / g.sh + 1;
  g.ow = (g.w + 2 * g.pw - ew) / g.sw + 1;
  return g;
}

namespace {

std::vector<AttrSpec> conv_attrs() {
  return {{"stride", AttrType::int_list, std::vector<int64_t>{1, 1}, "one value or (height, width)"},
          {"padding", AttrType::int_list, std::vector<int64_t>{0, 0}, "zeros added on each side; one value or two"},
          {"dilation", AttrType::int_list, std::vector<int64_t>{1, 1}, "spacing of kernel taps; one value or two"},
          {"groups", AttrType::integer, int64_t{1}, "channels split into this many independent groups"}};
}

std::vector<AttrSpec> with(std::vector<AttrSpec> attrs, AttrSpec extra) {
  attrs.push_back(std::move(extra));
  return attrs;
}

void check_bias(std::string_view op, const TensorMeta& bias, const TensorMeta& x, const Conv2dGeometry& g) {
  if (bias.dtype != x.dtype) throw DTypeError(std::string(op) + ": the bias " + bias.str() + " does not match the input " + x.str());
  if (bias.shape != Shape{g.o})
    throw ShapeError(std::string(op) + ": the bias must be [" + std::to_string(g.o) + "], got " + bias.str());
}

// grad [N, O, OH, OW] must be the output of convolving input with weight.
Conv2dGeometry backward_geometry(std::string_view op, const TensorMeta& grad, const TensorMeta& input,
                                 const TensorMeta& weight, const Attrs& attrs) {
  const Conv2dGeometry g = conv2d_geometry(op, input, weight, attrs);
  const Shape expected{g.n, g.o, g.oh, g.ow};
  if (grad.dtype != input.dtype)
    throw DTypeError(std::string(op) + ": the gradient " + grad.str() + " does not match " + input.str());
  if (grad.shape != expected)
    throw ShapeError(std::string(op) + ": the gradient " + grad.str() + " is not the output shape " +
                     to_string(expected) + " of input " + input.str() + " with weight " + weight.str());
  return g;
}

TensorMeta input_meta_from_attr(std::string_view op, const TensorMeta& like, const Attrs& attrs, const char* name) {
  const Shape shape = attrs.get<std::vector<int64_t>>(name);
  if (shape.size() != 4)
    throw ShapeError(std::string(op) + ": " + name + " must have 4 dims, got " + to_string(shape));
  return TensorMeta{like.dtype, shape, like.device};
}

const OpRegistrar conv2d_op{OpDef{
    .name = "conv2d",
    .doc = "2-d convolution (cross-correlation) of x [N,C,H,W] with weight [O,C/groups,kh,kw] (+ bias [O])",
    .min_inputs = 2,
    .max_inputs = 3,
    .attrs = conv_attrs(),
    .infer =
        [](const OpInfer& c) {
          const Conv2dGeometry g = conv2d_geometry(c.op, c.inputs[0], c.inputs[1], c.attrs);
          if (c.inputs.size() > 2) check_bias(c.op, c.inputs[2], c.inputs[0], g);
          return std::vector<TensorMeta>{TensorMeta{c.inputs[0].dtype, {g.n, g.o, g.oh, g.ow}, c.inputs[0].device}};
        }}};

const OpRegistrar conv2d_backward_input_op{OpDef{
    .name = "conv2d_backward_input",
    .doc = "gradient of conv2d with respect to its input: (grad [N,O,OH,OW], weight) -> [input_shape]",
    .min_inputs = 2,
    .max_inputs = 2,
    .attrs = with(conv_attrs(), {"input_shape", AttrType::int_list, std::nullopt, "the forward input's shape"}),
    .infer =
        [](const OpInfer& c) {
          const TensorMeta input = input_meta_from_attr(c.op, c.inputs[0], c.attrs, "input_shape");
          backward_geometry(c.op, c.inputs[0], input, c.inputs[1], c.attrs);
          return std::vector<TensorMeta>{input};
        },
    .not_differentiable = kGradientKernel}};

const OpRegistrar conv2d_backward_weight_op{OpDef{
    .name = "conv2d_backward_weight",
    .doc = "gradients of conv2d with respect to weight (and bias): (grad [N,O,OH,OW], x) -> [weight_shape] (, [O])",
    .min_inputs = 2,
    .max_inputs = 2,
    .attrs = with(with(conv_attrs(), {"weight_shape", AttrType::int_list, std::nullopt, "the forward weight's shape"}),
                  {"bias", AttrType::boolean, false, "also return the bias gradient"}),
    .infer =
        [](const OpInfer& c) {
          const TensorMeta weight = input_meta_from_attr(c.op, c.inputs[0], c.attrs, "weight_shape");
          const Conv2dGeometry g = backward_geometry(c.op, c.inputs[0], c.inputs[1], weight, c.attrs);
          std::vector<TensorMeta> out{weight};
          if (c.attrs.get<bool>("bias")) out.push_back(TensorMeta{weight.dtype, {g.o}, weight.device});
          return out;
        },
    .not_differentiable = kGradientKernel}};

}  // namespace
}  // namespace troupe
