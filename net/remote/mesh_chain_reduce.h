#pragma once
// A call_reduce with large answers, streamed up a chain of relays (internal to net/remote/mesh*.cpp).
// When a mesh's last reduction of a method gave a host tensor of two MeshOptions::chunk_bytes or
// more, the next one goes down a chain of the ranks (FanCall::chunk set) and comes back up it in
// chunks: each relay combines its own members' answers, then each chunk from the relay below with
// its own slice of the same bytes, and passes the combined chunk up at once. Every link carries the
// result once and the hops overlap, as in the chunked broadcast down the chain; a whole partial up a
// flat tree sends every rank's result into the caller's one link. The relay at the head of the chain
// puts the chunks together and answers the caller's request with the whole, as a flat tree's relay
// would.
//
//   ChainReduction chain(up, ReduceOp::sum, chunk_bytes, /*members=*/2, /*has_child=*/true);
//   chain.member_answered(WireValue::tensor(a));          // from each member, any thread
//   chain.child_chunk(offset, shape, count, piece);       // from the relay below, as they come
//   chain.child_failed(encoded_error);                    // or its failure, instead of its chunks
//   if (chain.finished()) ...                             // forget it
//
// Errors: a member's failure, or the relay below's, goes up instead of any chunk (nothing is sent
// up before this relay's members have all answered); answers of another shape or dtype than this
// relay's are a ShapeError that goes up the same way.
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <utility>
#include <vector>

#include "devices/tensor.h"
#include "net/frame.h"
#include "net/remote/value.h"

namespace troupe::net::detail {

class ChainReduction {
 public:
  // Where combined chunks go: the relay above (parent_rank >= 0), or, at the head of the chain, the
  // caller's request `reply`.
  struct Up {
    std::function<void(int64_t rank, int64_t relay, const char* method, WireValue arguments)> tell;
    std::function<void(WireValue answer)> respond;  // to the caller: [tensor or error, members]
    int64_t origin = 0, call = 0;
    int64_t parent_rank = -1, parent_relay = 0;
  };
  // members: of this relay, at least one.
  ChainReduction(Up up, ReduceOp op, size_t chunk_bytes, size_t members, bool has_child);

  void member_answered(const WireValue& answer);  // a tensor, or an encoded error
  // A chunk of the relay below's combined answer (its `shape`, `count` members), at byte `offset`.
  void child_chunk(int64_t offset, const Shape& shape, int64_t count, const Tensor& piece);
  void child_failed(const WireValue& error);
  bool finished() const;

 private:
  bool head() const { return up_.parent_rank < 0; }
  void own_ready();                          // with mutex_ held, once every member answered
  bool check_child(int64_t offset, const Shape& shape, const Tensor& piece);
  void consume(int64_t offset, const Tensor& piece);
  void emit(size_t offset, const Tensor& combined);
  void fail_up();
  void complete();
  void send(std::unique_lock<std::mutex>& lock);  // what the outbox holds, after unlocking

  struct Outgoing {
    const char* method;  // to the relay above; nullptr: the answer to the caller
    WireValue arguments;
  };

  const Up up_;
  const ReduceOp op_;
  const size_t members_;
  const bool has_child_;
  size_t chunk_bytes_;
  mutable std::mutex mutex_;  // guards the below
  size_t answered_ = 0;
  Shape shape_;               // the members' answers'
  Tensor own_;                // those answers combined, flat, on the host
  std::exception_ptr error_;
  int64_t child_count_ = 0;   // members below this relay, as its chunks say
  size_t child_bytes_ = 0;    // of the relay below's chunks, consumed
  struct Held {
    int64_t offset;
    Shape shape;
    Tensor piece;
  };
  std::vector<Held> held_;    // chunks that came before this relay's members all answered
  Tensor result_;             // at the head: the whole, put together
  bool finished_ = false;
  std::vector<Outgoing> outbox_;  // chunks, errors and the answer, sent once mutex_ is released
};

}  // namespace troupe::net::detail
