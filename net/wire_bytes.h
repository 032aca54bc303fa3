#pragma once
// Bytes on the wire, for the codecs and the links (frame.cpp, remote/call_frame.cpp,
// direct_link.cpp, stripes.cpp, frame_accept.cpp): little-endian fields at byte offsets, and
// received u8 bytes seen as a tensor of the dtype and shape a frame names. Internal to net/.
//
//   put<uint32_t>(out, 0, kFrameMagic);
//   const auto magic = get<uint32_t>(in, 0);
//   Tensor x = view_bytes_as(bytes, DType::f32, {2, 3});  // the same bytes as f32[2,3]
//
// memcpy keeps unaligned access defined; every host we build for is little-endian.
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "devices/tensor.h"

namespace troupe::net::wire {

static_assert(std::endian::native == std::endian::little);

template <class T>
void put(uint8_t* out, size_t offset, T value) {
  std::memcpy(out + offset, &value, sizeof(T));
}

template <class T>
T get(const uint8_t* in, size_t offset) {
  T value;
  std::memcpy(&value, in + offset, sizeof(T));
  return value;
}

}  // namespace troupe::net::wire

namespace troupe::net {

// bytes: a contiguous u8 tensor holding exactly shape's elements of dtype (the caller checked).
// Zero-copy when the bytes are aligned for the dtype; copied otherwise (ZeroMQ may hand small
// messages out of a shared receive buffer at any offset).
Tensor view_bytes_as(const Tensor& bytes, DType dtype, const Shape& shape);

}  // namespace troupe::net
