// libFuzzer target for the frame decoder: arbitrary bytes must decode to a valid header that
// re-encodes to the same bytes, or throw CommError; never crash, hang or over-allocate.
//   cmake --build build --target frame_fuzz && build/bin/frame_fuzz -max_total_time=60
// Input layout: byte 0 picks the world size (1..16), bytes 1-2 the header length; the header
// follows and whatever remains is the payload. Every frame kind is reached through byte 5 of the
// header.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "devices/error.h"
#include "net/frame.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const int world = 1 + data[0] % 16;
  const size_t header_length = std::min<size_t>(data[1] | (size_t(data[2]) << 8), size - 3);
  const uint8_t* header = data + 3;
  const size_t payload = size - 3 - header_length;
  try {
    troupe::net::FrameHeader h = troupe::net::decode_header(header, header_length, payload, world);
    const std::vector<uint8_t> again = troupe::net::encode_header(h);
    if (again != std::vector<uint8_t>(header, header + header_length)) std::abort();
  } catch (const troupe::CommError&) {
  }
  return 0;
}
