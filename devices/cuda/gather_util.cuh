#pragma once
// Helpers of the kernels that gather and join elements (gather_nd, index_select, embedding, cat).
// They move elements without looking at them, so they run on the unsigned integer of the element's
// width: one instantiation per width serves every dtype of that size. Indices are i32 or i64.
//
//   dispatch_width(itemsize(x.dtype()), [&](auto tag) { using E = typename decltype(tag)::type; ... });
//   dispatch_index(index.dtype(), [&](auto tag) { using I = typename decltype(tag)::type; ... });
#include <cstddef>
#include <cstdint>
#include <string>

#include "devices/dtype.h"
#include "devices/error.h"

namespace troupe::cuda {

// Calls fn(TypeTag<E>{}) with E the unsigned integer of `bytes` bytes (1, 2, 4 or 8).
template <class Fn>
decltype(auto) dispatch_width(size_t bytes, Fn&& fn) {
  switch (bytes) {
    case 1: return fn(TypeTag<uint8_t>{});
    case 2: return fn(TypeTag<uint16_t>{});
    case 4: return fn(TypeTag<uint32_t>{});
    case 8: return fn(TypeTag<uint64_t>{});
  }
  throw DeviceError("dispatch_width: no element type of " + std::to_string(bytes) + " bytes");
}

// Calls fn(TypeTag<I>{}) with I int32_t or int64_t; inference has already refused other index dtypes.
template <class Fn>
decltype(auto) dispatch_index(DType t, Fn&& fn) {
  if (t == DType::i32) return fn(TypeTag<int32_t>{});
  return fn(TypeTag<int64_t>{});
}

}  // namespace troupe::cuda
