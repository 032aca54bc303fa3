#pragma once
// The dataflow part of a frame: what one executor tells another rank's executor about an
// invocation. Frames of kind FrameKind::dataflow carry it after the shape dims (frame.h); their
// tag is the executor's link id, their payload the value (data) or the error record (failed ack).
//
//   FrameHeader h;
//   h.kind = FrameKind::dataflow;
//   h.tag = link_id;
//   h.dataflow = {DataflowMessage::data, /*invocation=*/7, /*node=*/3, /*slot=*/1, /*live=*/true};
//   h.dtype = DType::f32; h.shape = {2}; h.payload_bytes = 8;
//   std::vector<uint8_t> wire = encode_header(h);  // the frame header, then these 24 bytes
//   FrameHeader back = decode_header(wire.data(), wire.size(), /*payload_size=*/8, /*world_size=*/2);
//
// decode_dataflow checks every field against the message kind: unknown kinds, reserved bits,
// fields a kind does not use, and payloads a kind may not carry are CommErrors. Whether node and
// slot name a real node input is the receiving executor's to check (it knows its plan).
#include <cstddef>
#include <cstdint>

namespace troupe::net {

enum class DataflowMessage : uint8_t {
  start = 1,  // rank 0 began the invocation: start this rank's sources and constants
  data = 2,   // a value (or a dead token) for input `slot` of plan node `node`; node -1: graph output
  ack = 3,    // this rank is done with the invocation; error: it failed, the payload says how
  stop = 4,   // the sender's executor is going away
};

struct DataflowHeader {
  DataflowMessage message = DataflowMessage::start;
  uint64_t invocation = 0;  // 0 for stop
  int32_t node = 0;         // data only
  int32_t slot = 0;         // data only
  bool live = false;        // data only: a value, not a dead token
  bool error = false;       // ack only
  friend bool operator==(const DataflowHeader&, const DataflowHeader&) = default;
};

inline constexpr size_t kDataflowHeaderBytes = 24;

const char* name(DataflowMessage message);

// Writes the kDataflowHeaderBytes bytes at out.
void encode_dataflow(const DataflowHeader& header, uint8_t* out);
// Reads and validates them; payload_bytes and payload_is_text (u8, one dim) describe the frame's
// payload, which a kind may or may not carry. CommError naming what is wrong.
DataflowHeader decode_dataflow(const uint8_t* in, uint64_t payload_bytes, bool payload_is_text);

}  // namespace troupe::net
