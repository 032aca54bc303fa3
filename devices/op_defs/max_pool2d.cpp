// max_pool2d: x [N, C, H, W] -> (values [N, C, OH, OW], indices i64 [N, C, OH, OW]), PyTorch's
// F.max_pool2d(..., return_indices=True): each index is the winner's position h * W + w in its
// input plane (the first maximum; NaN wins, as in PyTorch). Padding counts as -inf. The backward,
// max_pool2d_backward(grad, indices), sends each output gradient to the input its index names.
// Kernels: devices/cpu/max_pool2d.cpp, devices/cuda/max_pool2d.cu.
#include "devices/op_defs/max_pool2d.h"

#include <string>

#include "devices/registry.h"

namespace troupe {

MaxPool2dAttrs max_pool2d_attrs(std::string_view op, const Attrs& attrs) {
  MaxPool2dAttrs a;
  if (attrs.get<std::vector<int64_t>>("kernel_size").empty())
    throw ValueError(std::string(op) + ": kernel_size is required");
  a.kernel = pair_attr(op, attrs, "kernel_size", 1);
  a.stride = pair_attr(op, attrs, "stride", 1, a.kernel);
  a.padding = pair_attr(op, attrs, "padding", 0, HeightWidth{0, 0});
  if (2 * a.padding.h > a.kernel.h || 2 * a.padding.w > a.kernel.w)
    throw ValueError(std::string(op) + ": padding " + std::to_string(a.padding.h) + "x" + std::to_string(a.padding.w) +
                     " must be at most half the kernel " + std::to_string(a.kernel.h) + "x" +
                     std::to_string(a.kernel.w));
  return a;
}

MaxPool2dGeometry max_pool2d_geometry(std::string_view op, const TensorMeta& x, const Attrs& attrs) {
  if (x.dtype != DType::f32 && x.dtype != DType::f64)
    throw DTypeError(std::string(op) + ": expects an f32 or f64 tensor, got " + x.str());
  if (x.shape.size() != 4) throw ShapeError(std::string(op) + ": the input must be [N, C, H, W], got " + x.str());
  const MaxPool2dAttrs a = max_pool2d_attrs(op, attrs);
  MaxPool2dGeometry p{};
  p.n = x.shape[0], p.c = x.shape[1], p.h = x.shape[2], p.w = x.shape[3];
  p.kh = a.kernel.h, p.kw = a.kernel.w, p.sh = a.stride.h, p.sw = a.stride.w, p.ph = a.padding.h, p.pw = a.padding.w;
  if (p.h + 2 * p.ph < p.kh || p.w + 2 * p.pw < p.kw)
    throw ShapeError(std::string(op) + ": the kernel " + std::to_string(p.kh) + "x" + std::to_string(p.kw) +
                     " is larger than the padded input of " + x.str());
  p.oh = (p.h + 2 * p.ph - p.kh) / p.sh + 1;
  p.ow = (p.w + 2 * p.pw - p.kw) / p.sw + 1;
  return p;
}

namespace {

std::vector<AttrSpec> pool_attrs() {
  return {{"kernel_size", AttrType::int_list, std::nullopt, "window; one value or (height, width)"},
          {"stride", AttrType::int_list, std::vector<int64_t>{}, "window step (default: the kernel size)"},
          {"padding", AttrType::int_list, std::vector<int64_t>{0, 0}, "-inf added on each side, at most half the kernel"}};
}

const OpRegistrar max_pool2d_op{OpDef{
    .name = "max_pool2d",
    .doc = "2-d max pooling of x [N,C,H,W] -> (values, i64 indices h*W+w of each maximum in its plane)",
    .attrs = pool_attrs(),
    .infer =
        [](const OpInfer& c) {
          const TensorMeta& x = c.inputs[0];
          const MaxPool2dGeometry p = max_pool2d_geometry(c.op, x, c.attrs);
          const Shape out{p.n, p.c, p.oh, p.ow};
          return std::vector<TensorMeta>{{x.dtype, out, x.device}, {DType::i64, out, x.device}};
        }}};

const OpRegistrar max_pool2d_backward_op{OpDef{
    .name = "max_pool2d_backward",
    .doc = "gradient of max_pool2d: (grad, indices) -> dx [input_shape], each gradient added at its index",
    .min_inputs = 2,
    .max_inputs = 2,
    .attrs = {{"input_shape", AttrType::int_list, std::nullopt, "the forward input's shape [N,C,H,W]"}},
    .infer =
        [](const OpInfer& c) {
          const TensorMeta &g = c.inputs[0], &index = c.inputs[1];
          const Shape input = c.attrs.get<std::vector<int64_t>>("input_shape");
          if (g.dtype != DType::f32 && g.dtype != DType::f64)
            throw DTypeError("max_pool2d_backward: expects an f32 or f64 gradient, got " + g.str());
          if (index.dtype != DType::i64)
            throw DTypeError("max_pool2d_backward: indices must be i64, got " + index.str());
          if (g.shape.size() != 4 || g.shape != index.shape || input.size() != 4 || input[0] != g.shape[0] ||
              input[1] != g.shape[1])
            throw ShapeError("max_pool2d_backward: gradient " + g.str() + " and indices " + index.str() +
                             " do not pool input " + to_string(input));
          return std::vector<TensorMeta>{{g.dtype, input, g.device}};
        },
    .not_differentiable = kGradientKernel}};

}  // namespace
}  // namespace troupe
