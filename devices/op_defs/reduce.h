#pragma once
// Which dims a reduction (sum, mean, max, min, argmax) folds, worked out once for inference and
// the CPU kernels (the ops are defined in reduce.cpp beside this header).
#include <string>
#include <vector>

#include "devices/tensor.h"

namespace troupe {

struct Reduction {
  std::vector<bool> reduced;  // per dim of x
  Shape out_shape;
  int64_t count = 1;          // elements per reduced fibre
};

// dims empty: all of them. ValueError naming op for a dim out of range or repeated.
Reduction plan_reduction(const std::string& op, const TensorMeta& x, const std::vector<int64_t>& dims, bool keepdim);

}  // namespace troupe
