#pragma once
// max_pool2d's attributes and geometry, parsed and checked once for every device's kernels (the
// ops are defined in max_pool2d.cpp beside this header).
#include <string_view>

#include "devices/op_defs/window.h"
#include "devices/tensor.h"

namespace troupe {

struct MaxPool2dAttrs {
  HeightWidth kernel, stride, padding;  // stride defaults to the kernel size
};

// ValueError naming op for a missing or empty kernel_size, values below 1 (padding below 0), or
// padding over half the kernel.
MaxPool2dAttrs max_pool2d_attrs(std::string_view op, const Attrs& attrs);

// One pooling: input [n, c, h, w], window kh x kw moved by (sh, sw) over the input padded by
// (ph, pw), output [n, c, oh, ow]. Plain data: the cuda kernels take it by value.
struct MaxPool2dGeometry {
  int64_t n, c, h, w, kh, kw, sh, sw, ph, pw, oh, ow;
};

// Validates x (f32 or f64, [N, C, H, W], the window inside the padded input) and works out the
// output size; DTypeError/ShapeError/ValueError naming op.
MaxPool2dGeometry max_pool2d_geometry(std::string_view op, const TensorMeta& x, const Attrs& attrs);

}  // namespace troupe
