#pragma once
// The attributes of matmul and linear_bf16, parsed once for every device's kernels (the ops are
// defined in matmul.cpp beside this header).
#include "devices/attrs.h"
#include "devices/dtype.h"

namespace troupe {

struct MatmulAttrs {
  bool transpose_a = false, transpose_b = false;  // the operand's last two dims swapped (2-d and up)
};

MatmulAttrs matmul_attrs(const Attrs& attrs);

enum class LinearActivation { none, relu, gelu };  // gelu: the erf form

struct LinearBf16Attrs {
  LinearActivation activation = LinearActivation::none;  // after the bias
  DType out = DType::f32;                                // f32 or bf16
};

// ValueError for an activation other than none, relu or gelu, or an out_dtype other than f32 or bf16.
LinearBf16Attrs linear_bf16_attrs(const Attrs& attrs);

}  // namespace troupe
