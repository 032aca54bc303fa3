#include "devices/shape.h"

#include <algorithm>

#include "devices/error.h"

namespace troupe {

int64_t numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Strides contiguous_strides(const Shape& shape) {
  Strides strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= std::max<int64_t>(shape[i], 1);
  }
  return strides;
}

std::string to_string(const Shape& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ",";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

int64_t wrap_dim(const char* op, int64_t dim, int64_t rank) {
  const int64_t lo = -std::max<int64_t>(rank, 1), hi = std::max<int64_t>(rank, 1) - 1;
  if (dim < lo || dim > hi)
    throw IndexError(std::string(op) + ": dim " + std::to_string(dim) + " out of range for a tensor of rank " +
                     std::to_string(rank) + " (expected " + std::to_string(lo) + ".." + std::to_string(hi) + ")");
  return dim < 0 ? dim + std::max<int64_t>(rank, 1) : dim;
}

Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b) {
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1)
      throw ShapeError(std::string(op) + ": shapes " + to_string(a) + " and " + to_string(b) +
                       " do not broadcast (dim " + std::to_string(i) + ": " + std::to_string(da) + " vs " +
                       std::to_string(db) + ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace troupe
