#pragma once
// What the elementwise ops' kernels share with their definitions (elementwise.cpp beside this
// header): the binary ops' compute dtype and gelu's form.
#include <string_view>

#include "devices/attrs.h"
#include "devices/dtype.h"

namespace troupe {

// The dtype both operands of a binary op are converted to before it runs: their promotion, or f32
// for an integer or bool true division.
DType binary_compute_dtype(DType a, DType b, bool true_division);

enum class GeluForm { erf, tanh };

// gelu's and gelu_backward's approximate="none" (the erf form) or "tanh"; ValueError naming op otherwise.
GeluForm gelu_form(std::string_view op, const Attrs& attrs);

}  // namespace troupe
