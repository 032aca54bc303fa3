#pragma once
// conv2d's attributes and geometry, parsed and checked once for every device's kernels (the ops
// are defined in conv2d.cpp beside this header).
#include <string_view>
#include <tuple>

#include "devices/op_defs/window.h"
#include "devices/tensor.h"

namespace troupe {

struct Conv2dAttrs {
  HeightWidth stride, padding, dilation;
  int64_t groups = 1;
};

// ValueError naming op for a stride or dilation below 1, negative padding, groups below 1.
Conv2dAttrs conv2d_attrs(std::string_view op, const Attrs& attrs);

// One convolution: input [n, c, h, w], weight [o, c / groups, kh, kw], output [n, o, oh, ow].
struct Conv2dGeometry {
  int64_t n, c, h, w;
  int64_t o, kh, kw;
  int64_t oh, ow;
  int64_t sh, sw, ph, pw, dh, dw, groups;
  auto key() const { return std::tuple(n, c, h, w, o, kh, kw, sh, sw, ph, pw, dh, dw, groups); }
};

// Validates x and weight (dtypes f32 or f64, ranks, channels against groups, the kernel inside the
// padded input) and works out the output size; DTypeError/ShapeError/ValueError naming op.
Conv2dGeometry conv2d_geometry(std::string_view op, const TensorMeta& x, const TensorMeta& weight, const Attrs& attrs);

}  // namespace troupe
