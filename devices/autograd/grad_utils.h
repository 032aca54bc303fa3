#pragma once
// Helpers the backward functions share.
//
//   Tensor da = sum_to(grad, a_shape);   // undo broadcasting: sum the dims a was expanded along
#include "devices/ops.h"

namespace troupe {

// grad summed over the dims that broadcasting added to or expanded in `shape` (NumPy rules),
// reshaped to `shape`. grad itself when the shapes match.
inline Tensor sum_to(const Tensor& grad, const Shape& shape) {
  if (grad.shape() == shape) return grad;
  const int64_t lead = grad.dim() - static_cast<int64_t>(shape.size());
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < grad.dim(); ++d)
    if (d < lead || (shape[d - lead] == 1 && grad.size(d) != 1)) dims.push_back(d);
  Tensor summed = dims.empty() ? grad : sum(grad, dims, true);
  return summed.reshape(shape);
}

}  // namespace troupe
