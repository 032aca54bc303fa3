#pragma once
// A group's all_reduce for one (count, dtype, reduce op), set up once and reused by every call of
// that shape (internal to net/collectives/; GroupState caches it, collectives.cpp calls it). Gloo's
// shape: gloo::AllreduceRing is built once with its buffers and plan, then run() many times. Here
// the constructor picks the path for the group and size (two levels across hosts, shared memory
// on one host, else a flat algorithm by size: algorithms.h) and sets it up. Results are fresh
// tensors, as the caller keeps them: the host allocator recycles large blocks already paged in
// (devices/host_allocator.h), so there are no buffers to keep here. A call takes its turn
// when it is made (in call order on every rank) and runs later, on the caller's thread or the
// group's actor.
//
//   std::shared_ptr<AllReduce> a = GroupState::of(group).all_reduce(count, DType::f32, ReduceOp::sum);
//   AllReduce::Turn turn = a->take_turn(group);   // now, beside the call's sequence number
//   Tensor sum = a->run(call, turn, flat);        // flat: contiguous, 1-D, count elements
#include <atomic>
#include <memory>
#include <optional>

#include "net/collectives/algorithms.h"

namespace troupe::net::collectives {

class GroupState;

class AllReduce {
 public:
  // Picks and sets up the path; looks at the group's hosts, so every rank picks the same.
  AllReduce(ProcessGroup& group, GroupState& state, int64_t count, DType dtype, ReduceOp op);

  // What a call numbers when it is made, besides its own sequence number: its turn on the shared
  // memory, or the two levels' calls on the host sub-groups.
  struct Turn {
    std::optional<uint64_t> shm_ticket;
    std::shared_ptr<TwoLevel> levels;
  };
  Turn take_turn(ProcessGroup& group);

  // The reduction of data over the group: a fresh tensor or a received buffer, never data's bytes
  // (but data itself on one rank). Sets call.algorithm to the path taken.
  Tensor run(CollectiveCall& call, const Turn& turn, const Tensor& data);

  // The path calls take ("two_level", "shared_memory", or the flat algorithm's name; "local" on
  // one rank): the label of the collective's metrics and profiler span. A shared-memory call that
  // finds the path off (set-up failed on some rank) falls back to the flat algorithm.
  const char* name() const { return name_; }
  // Calls run so far (for the tests: one object serves every call of its shape).
  uint64_t runs() const { return runs_.load(); }

 private:
  int64_t count_;
  DType dtype_;
  ReduceOp op_;
  int size_;
  bool two_level_ = false, shared_memory_ = false;
  std::unique_ptr<FlatAllReduce> flat_;  // null on one rank
  const char* name_;
  std::atomic<uint64_t> runs_{0};
};

}  // namespace troupe::net::collectives
