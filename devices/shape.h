#pragma once
// Shapes and strides (in elements), and the helpers every op uses on them.
//
//   Shape s = broadcast_shapes("add", {2, 1, 4}, {3, 1});   // {2, 3, 4}
#include <cstdint>
#include <string>
#include <vector>

#include "devices/dims.h"

namespace troupe {

using Shape = Dims;
using Strides = Dims;

int64_t numel(const Shape& shape);
Strides contiguous_strides(const Shape& shape);
std::string to_string(const Shape& shape);  // "[2,3,4]"
inline std::string to_string(const std::vector<int64_t>& dims) { return to_string(Shape(dims)); }
// Wraps a possibly negative dim into [0, rank); ShapeError naming op otherwise.
int64_t wrap_dim(const char* op, int64_t dim, int64_t rank);
// NumPy broadcasting of two shapes; ShapeError naming op and both shapes when they don't broadcast.
Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b);

}  // namespace troupe
