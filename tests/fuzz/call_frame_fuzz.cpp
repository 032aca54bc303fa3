// libFuzzer target for the remote-actor call decoder (net/remote/call_frame.h): any bytes, with
// the parts the input also describes, decode to a call that encodes and decodes back to the same
// bytes, or throw CommError; never crash, hang or over-allocate.
// Input: byte 0: parts (0-3); then per part a u16 size; then the frame; the parts' bytes last.
//   build/bin/call_frame_fuzz -max_total_time=60 tests/fuzz/corpus/call_frame
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "devices/error.h"
#include "net/remote/call_frame.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t count = data[0] % 4;
  size_t at = 1;
  std::vector<size_t> sizes;
  for (size_t i = 0; i < count; ++i, at += 2) {
    if (at + 2 > size) return 0;
    sizes.push_back(data[at] | (size_t(data[at + 1]) << 8));
  }
  size_t parts_bytes = 0;
  for (size_t s : sizes) parts_bytes += s;
  if (at + parts_bytes > size) return 0;
  const size_t frame_size = size - at - parts_bytes;
  const uint8_t* frame = data + at;
  std::vector<troupe::Tensor> parts;
  const uint8_t* part = frame + frame_size;
  for (size_t s : sizes) {
    parts.push_back(troupe::Tensor::from_vector(std::vector<uint8_t>(part, part + s), {static_cast<int64_t>(s)}));
    part += s;
  }
  try {
    const troupe::net::CallFrame call = troupe::net::decode_call(frame, frame_size, parts);
    const troupe::net::EncodedCall again = troupe::net::encode_call(call);
    if (again.bytes != std::vector<uint8_t>(frame, frame + frame_size)) std::abort();
  } catch (const troupe::CommError&) {
  }
  return 0;
}
