#include "net/frame.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <iterator>

#include "net/errors.h"
#include "net/wire_bytes.h"

namespace troupe::net {

namespace {

// Header layout (little-endian, offsets in bytes):
//   0 magic u32 | 4 version u8 | 5 kind u8 | 6 dtype u8 | 7 ndims u8 | 8 group u64 | 16 seq u64
//   24 tag i64 | 32 source i32 | 36 op u8 | 37 reduce u8 | 38 op dtype u8 | 39 zero u8
//   40 count u64 | 48 collective seq u64 | 56 payload bytes u64 | 64 root i32 | 68 zero u32
//   72 dims i64 x ndims
constexpr size_t kFixedHeader = 72;
constexpr uint8_t kNoKind = 7;  // the gap in FrameKind (frame.h)

using wire::get;
using wire::put;

[[noreturn]] void malformed(const std::string& what) { throw CommError("frame: malformed: " + what); }

bool valid_dtype(uint8_t t) { return t <= static_cast<uint8_t>(DType::boolean); }

}  // namespace

const char* name(FrameKind kind) {
  switch (kind) {
    case FrameKind::data: return "data";
    case FrameKind::staged: return "staged";
    case FrameKind::collective: return "collective";
    case FrameKind::control: return "control";
    case FrameKind::heartbeat: return "heartbeat";
    case FrameKind::hello: return "hello";
    case FrameKind::goodbye: return "goodbye";
    case FrameKind::actor: return "actor";
  }
  return "unknown";
}

const char* name(CollectiveOp op) {
  static const char* names[] = {"none",    "broadcast",  "reduce",         "all_reduce", "scatter",
                                "gather",  "all_gather", "reduce_scatter", "all_to_all", "barrier"};
  auto i = static_cast<size_t>(op);
  return i < std::size(names) ? names[i] : "unknown";
}

const char* name(ReduceOp op) {
  static const char* names[] = {"none", "sum", "product", "max", "min", "avg"};
  auto i = static_cast<size_t>(op);
  return i < std::size(names) ? names[i] : "unknown";
}

size_t header_size(size_t ndims) {
  return kFixedHeader + 8 * ndims;
}

void encode_header_into(const FrameHeader& h, uint8_t* out) {
  if (h.shape.size() > kMaxFrameDims)
    throw CommError("frame: cannot send a tensor of rank " + std::to_string(h.shape.size()) + " (at most " +
                    std::to_string(kMaxFrameDims) + ")");
  put<uint32_t>(out, 0, kFrameMagic);
  put<uint8_t>(out, 4, kFrameVersion);
  put<uint8_t>(out, 5, static_cast<uint8_t>(h.kind));
  put<uint8_t>(out, 6, static_cast<uint8_t>(h.dtype));
  put<uint8_t>(out, 7, static_cast<uint8_t>(h.shape.size()));
  put<uint64_t>(out, 8, h.group);
  put<uint64_t>(out, 16, h.seq);
  put<int64_t>(out, 24, h.tag);
  put<int32_t>(out, 32, h.source);
  put<uint8_t>(out, 36, static_cast<uint8_t>(h.op.op));
  put<uint8_t>(out, 37, static_cast<uint8_t>(h.op.reduce));
  put<uint8_t>(out, 38, static_cast<uint8_t>(h.op.dtype));
  put<uint8_t>(out, 39, 0);
  put<uint64_t>(out, 40, h.op.count);
  put<uint64_t>(out, 48, h.op.collective_seq);
  put<uint64_t>(out, 56, h.payload_bytes);
  put<int32_t>(out, 64, h.op.root);
  put<uint32_t>(out, 68, 0);
  for (size_t i = 0; i < h.shape.size(); ++i) put<int64_t>(out, kFixedHeader + 8 * i, h.shape[i]);
}

std::vector<uint8_t> encode_header(const FrameHeader& header) {
  std::vector<uint8_t> out(header_size(std::min(header.shape.size(), kMaxFrameDims + 1)));
  encode_header_into(header, out.data());
  return out;
}

FrameHeader decode_header(const void* data, size_t size, size_t payload_size, int world_size) {
  const auto* in = static_cast<const uint8_t*>(data);
  if (size < kFixedHeader)
    malformed("header of " + std::to_string(size) + " bytes, at least " + std::to_string(kFixedHeader) +
              " expected");
  if (get<uint32_t>(in, 0) != kFrameMagic) malformed("bad magic (not a Troupe frame)");
  if (uint8_t v = get<uint8_t>(in, 4); v != kFrameVersion)
    malformed("version " + std::to_string(v) + ", this build speaks " + std::to_string(kFrameVersion));

  FrameHeader h;
  const uint8_t kind = get<uint8_t>(in, 5);
  if (kind < static_cast<uint8_t>(FrameKind::data) || kind > static_cast<uint8_t>(FrameKind::staged) || kind == kNoKind)
    malformed("unknown kind " + std::to_string(kind));
  h.kind = static_cast<FrameKind>(kind);
  const uint8_t dtype = get<uint8_t>(in, 6);
  if (!valid_dtype(dtype)) malformed("unknown dtype " + std::to_string(dtype));
  h.dtype = static_cast<DType>(dtype);
  const uint8_t ndims = get<uint8_t>(in, 7);
  if (ndims > kMaxFrameDims)
    malformed("tensor rank " + std::to_string(ndims) + " exceeds " + std::to_string(kMaxFrameDims));
  if (size != header_size(ndims))
    malformed("header of " + std::to_string(size) + " bytes for rank " + std::to_string(ndims) + ", expected " +
              std::to_string(header_size(ndims)));

  h.group = get<uint64_t>(in, 8);
  h.seq = get<uint64_t>(in, 16);
  h.tag = get<int64_t>(in, 24);
  h.source = get<int32_t>(in, 32);
  if (h.source < 0 || h.source >= world_size)
    malformed("source rank " + std::to_string(h.source) + " outside a world of " + std::to_string(world_size));

  const uint8_t op = get<uint8_t>(in, 36), reduce = get<uint8_t>(in, 37), op_dtype = get<uint8_t>(in, 38);
  if (op > static_cast<uint8_t>(CollectiveOp::barrier)) malformed("unknown collective op " + std::to_string(op));
  if (reduce > static_cast<uint8_t>(ReduceOp::avg)) malformed("unknown reduce op " + std::to_string(reduce));
  if (!valid_dtype(op_dtype)) malformed("unknown op dtype " + std::to_string(op_dtype));
  if (get<uint8_t>(in, 39) != 0) malformed("reserved byte is not zero");
  const int32_t root = get<int32_t>(in, 64);
  if (root < -1 || root >= world_size)
    malformed("collective root " + std::to_string(root) + " outside a world of " + std::to_string(world_size));
  if (get<uint32_t>(in, 68) != 0) malformed("reserved bytes 68..71 are not zero");
  h.op = {static_cast<CollectiveOp>(op), static_cast<ReduceOp>(reduce), static_cast<DType>(op_dtype),
          get<uint64_t>(in, 40), get<uint64_t>(in, 48), root};

  h.payload_bytes = get<uint64_t>(in, 56);
  uint64_t bytes = itemsize(h.dtype);
  h.shape.resize(ndims);
  for (size_t i = 0; i < ndims; ++i) {
    const int64_t d = get<int64_t>(in, kFixedHeader + 8 * i);
    if (d < 0) malformed("negative dim " + std::to_string(d) + " at index " + std::to_string(i));
    if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes))
      malformed("shape overflows 64-bit byte count");
    h.shape[i] = d;
  }
  if (bytes != h.payload_bytes)
    malformed(std::string(name(h.dtype)) + to_string(h.shape) + " needs " + std::to_string(bytes) +
              " bytes, header says " + std::to_string(h.payload_bytes));
  if (h.payload_bytes != payload_size)
    malformed("header says " + std::to_string(h.payload_bytes) + " payload bytes, received " +
              std::to_string(payload_size));

  const bool carries_nothing =
      h.kind == FrameKind::heartbeat || h.kind == FrameKind::hello || h.kind == FrameKind::goodbye;
  if (carries_nothing && h.payload_bytes != 0)
    malformed(std::string(name(h.kind)) + " frame with " + std::to_string(h.payload_bytes) + " payload bytes");
  if (h.kind == FrameKind::control && (h.dtype != DType::u8 || ndims != 1))
    malformed("control frame must carry u8 text, got " + std::string(name(h.dtype)) + to_string(h.shape));
  if ((h.kind == FrameKind::actor || h.kind == FrameKind::staged) &&
      (h.dtype != DType::u8 || ndims != 1 || h.payload_bytes == 0))
    malformed(std::string(name(h.kind)) + " frame must carry u8 bytes, got " + std::string(name(h.dtype)) +
              to_string(h.shape));
  return h;
}

}  // namespace troupe::net
