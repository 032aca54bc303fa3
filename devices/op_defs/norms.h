#pragma once
// The attributes of layer_norm, layer_norm_backward and add_layer_norm, parsed once for every
// device's kernels (the ops are defined in norms.cpp beside this header).
#include <cstdint>

#include "devices/attrs.h"
#include "devices/shape.h"

namespace troupe {

struct LayerNormAttrs {
  Shape normalized_shape;  // the trailing dims normalised together
  double eps = 1e-5;       // added to the variance
  int64_t row_size() const { return numel(normalized_shape); }
};

LayerNormAttrs layer_norm_attrs(const Attrs& attrs);

struct AddLayerNormAttrs {
  double eps = 1e-5;
  bool return_sum = false;  // x + residual as a second output
};

AddLayerNormAttrs add_layer_norm_attrs(const Attrs& attrs);

}  // namespace troupe
