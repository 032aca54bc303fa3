#pragma once
// Channel: the internal API that collectives (net/collectives/) are built on. It moves tensors
// between the ranks of one group on the collective lane, keyed by the collective's sequence
// number, so collectives never see p2p traffic, other groups' traffic, or an earlier collective's.
//
//   Channel ch(group);                                       // a shared_ptr<ProcessGroup>
//   const uint64_t seq = collectives::GroupState::of(*group).next_seq();  // the n-th call's number
//   OpDescriptor op{CollectiveOp::all_reduce, ReduceOp::sum, t.dtype(), uint64_t(t.numel()), seq};
//   const Deadline deadline = ch.deadline();                 // the group's timeout from now
//   ch.send(right, op, chunk);                               // never blocks; zero-copy
//   Channel::Incoming in = ch.recv(left, op, deadline);      // checks in.op == op
//   reduce_into(acc, in.payload);
//
// recv throws TimeoutError at the deadline, PeerLostError when a rank is gone, CommError when
// the sender's op descriptor differs (naming both ranks and both calls), and the error another
// rank aborted this collective with (abort(); the same type, through devices/error_kinds.h). On a mismatch recv first aborts the collective on every
// other rank of the group, so all involved ranks fail instead of waiting.
#include <string>

#include "devices/tensor.h"
#include "net/frame.h"
#include "net/process_group.h"
#include "net/work.h"

namespace troupe::net {

class Channel {
 public:
  struct Incoming {
    int source = -1;  // group rank
    OpDescriptor op;
    Tensor payload;
  };

  explicit Channel(std::shared_ptr<ProcessGroup> group) : group_(std::move(group)) {}

  int rank() const { return group_->rank(); }
  int size() const { return group_->size(); }
  uint64_t group_id() const { return group_->id(); }
  ProcessGroup& group() { return *group_; }
  Deadline deadline(std::optional<std::chrono::milliseconds> timeout = std::nullopt) const {
    return deadline_after(timeout.value_or(group_->timeout()));
  }

  // Queues payload (any dtype/shape, up to 8 dims) to group rank dst for collective op.collective_seq.
  void send(int dst, const OpDescriptor& op, const Tensor& payload);
  // The next frame from group rank src for expected.collective_seq, checked against expected
  // (op, reduce op, dtype, count and root must agree). The waiting thread polls at least `poll`
  // before it sleeps (Transport::wait).
  Incoming recv(int src, const OpDescriptor& expected, Deadline deadline, std::chrono::microseconds poll = {});
  // Tells every other rank of the group that this collective failed; their recv for it throws
  // the same error.
  void abort(uint64_t collective_seq, const Error& error);
  // Throws the error an abort notice (a control frame's payload) carries.
  [[noreturn]] static void throw_abort_notice(const Tensor& payload);

 private:
  std::shared_ptr<ProcessGroup> group_;
};

// "all_reduce(sum, f32, 4 elements)", "broadcast(root 0, f32, 4 elements)": how mismatch errors name a call.
std::string describe(const OpDescriptor& op);

}  // namespace troupe::net
