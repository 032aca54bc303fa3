#pragma once
// Little-endian fields at byte offsets, for the wire codecs (frame.cpp, remote/call_frame.cpp,
// direct_link.cpp, stripes.cpp).
// Internal to net/.
//
//   put<uint32_t>(out, 0, kFrameMagic);
//   const auto magic = get<uint32_t>(in, 0);
//
// memcpy keeps unaligned access defined; every host we build for is little-endian.
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

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
