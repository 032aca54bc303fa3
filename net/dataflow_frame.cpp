#include "net/dataflow_frame.h"

#include <bit>
#include <cstring>
#include <string>

#include "devices/error.h"
#include "net/wire_bytes.h"

namespace troupe::net {

namespace {

// Layout (little-endian, offsets in bytes from the block's start):
//   0 message u8 | 1 flags u8 (1: live, 2: error) | 2 zero u16 | 4 node i32 | 8 slot i32
//   12 zero u32 | 16 invocation u64
constexpr uint8_t kLive = 1, kError = 2;

using wire::get;
using wire::put;

[[noreturn]] void malformed(const std::string& what) { throw CommError("frame: malformed dataflow header: " + what); }

}  // namespace

const char* name(DataflowMessage message) {
  switch (message) {
    case DataflowMessage::start: return "start";
    case DataflowMessage::data: return "data";
    case DataflowMessage::ack: return "ack";
    case DataflowMessage::stop: return "stop";
  }
  return "unknown";
}

void encode_dataflow(const DataflowHeader& h, uint8_t* out) {
  put<uint8_t>(out, 0, static_cast<uint8_t>(h.message));
  put<uint8_t>(out, 1, static_cast<uint8_t>((h.live ? kLive : 0) | (h.error ? kError : 0)));
  put<uint16_t>(out, 2, 0);
  put<int32_t>(out, 4, h.node);
  put<int32_t>(out, 8, h.slot);
  put<uint32_t>(out, 12, 0);
  put<uint64_t>(out, 16, h.invocation);
}

DataflowHeader decode_dataflow(const uint8_t* in, uint64_t payload_bytes, bool payload_is_text) {
  const uint8_t message = get<uint8_t>(in, 0), flags = get<uint8_t>(in, 1);
  if (message < static_cast<uint8_t>(DataflowMessage::start) || message > static_cast<uint8_t>(DataflowMessage::stop))
    malformed("unknown message " + std::to_string(message));
  if (flags & ~(kLive | kError)) malformed("unknown flags " + std::to_string(flags));
  if (get<uint16_t>(in, 2) != 0 || get<uint32_t>(in, 12) != 0) malformed("reserved bytes are not zero");
  DataflowHeader h;
  h.message = static_cast<DataflowMessage>(message);
  h.live = flags & kLive;
  h.error = flags & kError;
  h.node = get<int32_t>(in, 4);
  h.slot = get<int32_t>(in, 8);
  h.invocation = get<uint64_t>(in, 16);

  const std::string kind = name(h.message);
  const bool addressed = h.message == DataflowMessage::data;
  if (!addressed && (h.node != 0 || h.slot != 0))
    malformed(kind + " message names node " + std::to_string(h.node) + " slot " + std::to_string(h.slot));
  if (addressed && (h.node < -1 || h.slot < 0))
    malformed("data for node " + std::to_string(h.node) + " slot " + std::to_string(h.slot));
  if (h.live && h.message != DataflowMessage::data) malformed(kind + " message flagged live");
  if (h.error && h.message != DataflowMessage::ack) malformed(kind + " message flagged as an error");
  if (h.message == DataflowMessage::stop && h.invocation != 0)
    malformed("stop message names invocation " + std::to_string(h.invocation));
  // Payloads: a live value, or a failed ack's error record (u8 text); nothing else carries one.
  if (h.error && (!payload_is_text || payload_bytes == 0)) malformed("a failed ack must carry its error as u8 text");
  if (!h.live && !h.error && payload_bytes != 0)
    malformed(kind + (h.message == DataflowMessage::data ? " (dead token)" : "") + " message with " +
              std::to_string(payload_bytes) + " payload bytes");
  return h;
}

}  // namespace troupe::net
