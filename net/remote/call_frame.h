#pragma once
// The call frame: what one actor frame (FrameKind::actor, net/frame.h) carries between ranks, a
// call, its answer or a notice, as a small validated header and the encoded WireValue; the value's
// tensors follow as message parts of their own (zero-copy both ways: their bytes never pass
// through the encoded bytes).
//
//   CallFrame call{CallKind::request, /*actor=*/3, /*request=*/17, "forward", to_value(args)};
//   EncodedCall wire = encode_call(call);                        // wire.bytes, wire.tensors
//   CallFrame back = decode_call(wire.bytes.data(), wire.bytes.size(), received_parts);
//
// Layout (little-endian, offsets in bytes):
//   0 magic u32 "TRAC" | 4 version u8 | 5 kind u8 | 6 zero u16 | 8 actor u64 | 16 request u64
//   24 text bytes u32 | 28 value bytes u32 | 32 tensors u32 | 36 generation u32 | 40 text | value
// The value is a tree of tagged items:
//   0 none | 1 false | 2 true | 3 int (i64) | 4 float (f64) | 5 string (u32 n, n bytes)
//   6 tensor (dtype u8, ndims u8, dims i64 x ndims; its bytes are the next part) | 7 list (u32 n, n items)
// decode_call trusts nothing: magic, version, kind, reserved bytes, every length against the bytes
// left, list nesting (<= 32), each tensor's dtype, rank (<= 8), dims (>= 0, no overflow) and byte
// count against its part, the number of parts, and each kind's required fields. Anything
// malformed throws CommError; a tensor whose part is misaligned for its dtype is copied, the rest
// are views of the received bytes.
//
// A tensor argument's forms from RemoteActor::request to the callee's mailbox, six:
//   1 the Tensor passed; 2 a WireValue in the argument list (detail::list_of, moved into the
//   CallFrame); 3 a part of the outgoing frame (EncodedCall::tensors, by reference through
//   Transport::send_actor_frame); 4 bytes on the wire, written by the link from the tensor's own
//   memory (a device tensor staged by that link); 5 a u8 part of the received Message; 6 a view of
//   that part as the dtype and shape the frame names (decode_call), in the CallFrame the mailbox
//   keeps as it is (QueuedCall). The method's Codec then hands it to the callee.
#include <cstdint>
#include <string>
#include <vector>

#include "net/errors.h"
#include "net/remote/value.h"

namespace troupe::net {

inline constexpr uint32_t kCallMagic = 0x43415254;  // "TRAC" in little-endian bytes
inline constexpr uint8_t kCallVersion = 2;
inline constexpr size_t kMaxCallText = 1 << 20;     // a name, or an error record
inline constexpr size_t kMaxValueDepth = 32;

enum class CallKind : uint8_t {
  spawn = 1,      // text: actor type; value: [name or none, [arguments], replaced rank, replaced id,
                  // device, and for a respawn from a snapshot its state]; answered [actor id, name]
  request = 2,    // actor, text: method; value: [arguments]; answered by a reply or a failure
  tell = 3,       // the same, unanswered (request 0)
  reply = 4,      // request: the one answered; value: the result
  failure = 5,    // request: the one answered, or 0 and actor: a tell to it failed (RemoteActor::check);
                  // text: the error record (devices/error_kinds.h)
  enroll = 6,     // to rank 0's directory: text: name, actor: id on the sender,
                  // value: [type name, replaced rank, replaced id] (a respawn takes its predecessor's name)
  withdraw = 7,   // to rank 0's directory: text: name
  lookup = 8,     // to rank 0's directory: text: name; answered [rank, actor id, type name]
  stop = 9,       // actor: stop after the calls queued before; answered by a reply
  monitor = 10,   // actor: send the sender a down notice when it stops
  down = 11,      // actor (on the sender's rank) ended; text: empty (stopped) or the error record
  serving = 12,   // the sender serves: it drives no calls of its own
  done = 13,      // the sender drives no more calls (serve() returns once every driver is done)
};
const char* name(CallKind kind);

struct CallFrame {
  CallKind kind = CallKind::request;
  uint64_t actor = 0;    // an actor id on the rank that hosts it
  uint64_t request = 0;  // what an answer answers; 0: nothing
  std::string text;
  WireValue value;
  // The sender's RemoteActors: its process's n-th (every rank makes them in the same order), so
  // a frame between one and the next reaches the right one (endpoint.cpp); 0: not said.
  uint32_t generation = 0;
};

// The outgoing actor frame's parts: the call frame's bytes, then the tensors in the order the value
// names them, as they are (Transport::send_actor_frame hands them by reference to the link that
// writes them, which stages a device tensor itself).
struct EncodedCall {
  std::vector<uint8_t> bytes;
  std::vector<Tensor> tensors;
};

EncodedCall encode_call(const CallFrame& call);
// Validates and decodes; parts are the tensors' bytes as received (u8, one per tensor).
CallFrame decode_call(const void* data, size_t size, const std::vector<Tensor>& parts);

}  // namespace troupe::net
