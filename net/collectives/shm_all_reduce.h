#pragma once
// All-reduce through shared memory, for a group whose ranks all run on this host (internal to
// net/collectives/). Each rank owns a memfd segment: a few flags and a 16 MiB slot. The peers map
// it through /proc/<pid>/fd/<fd>, learnt over ZeroMQ in the group's first shared-memory call.
//
//   auto& shm = GroupState::of(group).shared_memory();
//   uint64_t ticket = shm.take_ticket();                 // in call order, when the call is made
//   std::optional<Tensor> sum = shm.run(call, ticket, flat, ReduceOp::sum);  // nullopt: use ZeroMQ
//
// A tensor up to 64 KiB: every rank copies it into half of its slot, raises `ready`, and reduces
// all ranks' copies itself (one hand-off). Larger ones, per piece of up to 16 MiB: every rank copies the segments others reduce into its slot and
// raises `ready`; rank r reduces segment r from every slot (in rank order, so the bits do not
// depend on who computes) into its result and its slot and raises `reduced`; then it copies every
// other segment from its owner's slot and raises `consumed`, which frees its slot for the next
// piece. A 4-byte all_reduce costs two flag hand-offs instead of two ZeroMQ messages.
//
// Waiting spins briefly (unless the ranks' CPU masks give them fewer CPUs than ranks), then sleeps
// on a futex in the segment, and meanwhile watches the collective's ZeroMQ inbox (an
// abort notice, or a frame from a rank that called something else), the transport's health (a
// lost peer) and the deadline. The ready flag publishes each rank's op descriptor, checked like
// the Channel does. A failed call turns the path off for the group: later calls use ZeroMQ.
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include "net/collectives/collective_call.h"
#include "net/transport.h"

namespace troupe::net::collectives {

class SharedMemoryAllReduce {
 public:
  SharedMemoryAllReduce() = default;
  ~SharedMemoryAllReduce();
  SharedMemoryAllReduce(const SharedMemoryAllReduce&) = delete;
  SharedMemoryAllReduce& operator=(const SharedMemoryAllReduce&) = delete;

  // True when every rank of group runs on this host and shared memory is allowed: the same
  // answer on every rank, so all of them take tickets for the same calls.
  static bool eligible(ProcessGroup& group);

  // Calls run in ticket order (an async call and a blocking one may race to the slot otherwise).
  uint64_t take_ticket() { return next_ticket_++; }

  // The reduction of data (contiguous, 1-D) over the group, or nullopt when some rank could not
  // set the segments up (then every rank gets nullopt, now and later).
  std::optional<Tensor> run(CollectiveCall& call, uint64_t ticket, const Tensor& data, ReduceOp op);

 private:
  struct Segment;
  struct Flag;
  bool set_up(CollectiveCall& call);
  void post_and_check(CollectiveCall& call, uint64_t generation);
  void reduce_small(CollectiveCall& call, const Tensor& data, ReduceOp op, char* out);
  void reduce_piece(CollectiveCall& call, const Tensor& data, int64_t begin, int64_t end, ReduceOp op, char* out);
  void wait_for(CollectiveCall& call, int peer, const char* stage, Flag& flag, uint64_t target);
  void check_inbox(CollectiveCall& call);

  std::atomic<uint64_t> next_ticket_{0};
  std::mutex mutex_;
  std::condition_variable turn_;
  uint64_t serving_ = 0;  // under mutex_

  // Touched only by the call holding the turn.
  enum class State { fresh, on, off } state_ = State::fresh;
  int memfd_ = -1;
  std::vector<Segment*> segments_;  // by group rank, mapped
  size_t segment_bytes_ = 0;
  uint64_t generation_ = 0;         // pieces done so far, the same on every rank
  uint64_t last_large_ = 0;         // the last generation that used the whole slot
  // Whether the group's ranks may run on as many CPUs as there are ranks (their affinity masks,
  // together). When they may not (srun or mpirun binding two ranks to one CPU, taskset), a waiter
  // that pauses holds the CPU its peer needs to answer: it yields at once instead.
  bool cores_each_ = true;
  std::shared_ptr<Transport::Slot> probe_;  // the current call's ZeroMQ inbox, any source
};

}  // namespace troupe::net::collectives
