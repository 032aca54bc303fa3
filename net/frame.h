#pragma once
// The wire format: one frame is a fixed little-endian header (plus shape dims) sent as one ZeroMQ
// message part, followed by the tensor payload as a second part (sent zero-copy).
//
//   FrameHeader h;
//   h.kind = FrameKind::data; h.source = 0; h.tag = 7; h.dtype = DType::f32; h.shape = {2, 3};
//   h.payload_bytes = 24;
//   std::vector<uint8_t> wire = encode_header(h);
//   FrameHeader back = decode_header(wire.data(), wire.size(), /*payload_size=*/24, /*world_size=*/2);
//
// decode_header trusts nothing: magic, version, every enum, the source rank, the shape (rank <= 8,
// dims >= 0, product * itemsize == payload bytes without overflow) and the exact header length
// are checked before use, and anything malformed throws CommError. It allocates only the shape
// vector, whose length is bounded by kMaxFrameDims.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "devices/dtype.h"
#include "devices/shape.h"
#include "net/errors.h"

namespace troupe::net {

inline constexpr uint32_t kFrameMagic = 0x45505254;  // "TRPE" in little-endian bytes
inline constexpr uint8_t kFrameVersion = 5;
inline constexpr size_t kMaxFrameDims = 8;

enum class FrameKind : uint8_t {
  data = 1,        // a p2p tensor (lane p2p, keyed by tag)
  collective = 2,  // a tensor or chunk of a collective (keyed by the collective sequence number)
  control = 3,     // a collective's abort notice: payload is the u8 text of the error
  heartbeat = 4,   // liveness, every 200 ms to every peer
  hello = 5,       // the first frame on a connection: proves the peer is up (and authenticated);
                   // tag 1: the sender (the lower rank) dialed a direct link to this rank
  goodbye = 6,     // the peer shuts down cleanly
                   // 7: no kind (it was the dataflow executor's, whose ranks now talk as remote actors)
  actor = 8,       // a remote actor's call, reply or notice: payload is the u8 call frame
                   // (net/remote/call_frame.h); its tensors follow as parts of their own
  staged = 9,      // a p2p device tensor staged in shared memory on this host (lane p2p, keyed by
                   // tag): payload is the u8 descriptor (devices/cuda/shared_staging.h)
};

// What a collective is doing, so ranks detect mismatched calls instead of corrupting data.
enum class CollectiveOp : uint8_t {
  none = 0, broadcast, reduce, all_reduce, scatter, gather, all_gather, reduce_scatter, all_to_all, barrier,
};
enum class ReduceOp : uint8_t { none = 0, sum, product, max, min, avg };

struct OpDescriptor {
  CollectiveOp op = CollectiveOp::none;
  ReduceOp reduce = ReduceOp::none;
  DType dtype = DType::f32;
  uint64_t count = 0;           // elements of the whole collective's tensor
  uint64_t collective_seq = 0;  // the n-th collective of this group
  int32_t root = -1;            // group rank of a rooted collective's root; -1: none
  friend bool operator==(const OpDescriptor&, const OpDescriptor&) = default;
};

struct FrameHeader {
  FrameKind kind = FrameKind::data;
  uint64_t group = 0;  // 0: the world group; sub-groups get derived ids
  uint64_t seq = 0;    // per-connection sequence number (detects loss or reordering)
  int64_t tag = 0;     // p2p tag; collective frames: the collective sequence number
  int32_t source = 0;  // global rank of the sender
  DType dtype = DType::u8;
  Shape shape;
  OpDescriptor op;
  uint64_t payload_bytes = 0;
};

const char* name(FrameKind kind);
const char* name(CollectiveOp op);
const char* name(ReduceOp op);

size_t header_size(size_t ndims);  // bytes of a header with ndims shape dims
std::vector<uint8_t> encode_header(const FrameHeader& header);
// Writes the header into out, which must hold header_size(header.shape.size()) bytes.
void encode_header_into(const FrameHeader& header, uint8_t* out);
// Validates and decodes a header; payload_size is the byte length of the payload part received
// with it. Throws CommError naming what is wrong.
FrameHeader decode_header(const void* data, size_t size, size_t payload_size, int world_size);

}  // namespace troupe::net
