#include "net/wire_bytes.h"

namespace troupe::net {

Tensor view_bytes_as(const Tensor& bytes, DType dtype, const Shape& shape) {
  if (bytes.nbytes() == 0) return Tensor::empty(shape, dtype);
  const size_t size = itemsize(dtype);
  const size_t offset = static_cast<size_t>(bytes.offset()) * itemsize(bytes.dtype());
  if (reinterpret_cast<uintptr_t>(bytes.raw_data()) % size == 0 && offset % size == 0)
    return Tensor(bytes.storage(), dtype, shape, contiguous_strides(shape), static_cast<int64_t>(offset / size));
  Tensor copy = Tensor::empty(shape, dtype);
  std::memcpy(copy.mutable_raw_data(), bytes.raw_data(), bytes.nbytes());
  return copy;
}

}  // namespace troupe::net
