#pragma once
// The collectives' state of one group (internal to net/collectives/), kept with the group
// (ProcessGroup::attachment) and freed with it: the numbering of its collective calls, the actor
// that runs its async ones, its shared memory, its hosts, and the all_reduce algorithms set up for
// it (one per count, dtype and reduce op, reused by every call of that shape).
//
//   GroupState& s = GroupState::of(group);
//   CollectiveCall call = begin_call(group, CollectiveOp::barrier, ReduceOp::none, DType::u8, 0);  // numbered now
//   std::shared_ptr<AllReduce> a = s.all_reduce(count, DType::f32, ReduceOp::sum);        // made once
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>

#include "net/collectives/collective_call.h"

namespace troupe::net::collectives {

class AllReduce;
class CollectiveActor;
class SharedMemoryAllReduce;
struct HostGroups;

class GroupState {
 public:
  explicit GroupState(ProcessGroup& group);  // its owner: the group outlives it
  ~GroupState();
  GroupState(const GroupState&) = delete;
  GroupState& operator=(const GroupState&) = delete;

  // The group's state, made on first use.
  static GroupState& of(ProcessGroup& group);

  // The group's next collective number: taken once per collective call, when it is made, so that
  // every rank's n-th call gets the same number.
  uint64_t next_seq() { return seq_++; }
  // The thread that runs the group's async collectives in call order.
  CollectiveActor& actor();
  SharedMemoryAllReduce& shared_memory();
  const HostGroups& host_groups();

  // The all_reduce of count elements of dtype with op on this group (all_reduce.h): made on the
  // first such call, then the same object while the group lives (the least recently used of more
  // than kMaxAlgorithms shapes is dropped).
  std::shared_ptr<AllReduce> all_reduce(int64_t count, DType dtype, ReduceOp op);
  size_t cached_algorithms() const;
  static constexpr size_t kMaxAlgorithms = 64;

 private:
  using Key = std::tuple<int64_t, DType, ReduceOp>;
  struct Cached {
    std::shared_ptr<AllReduce> algorithm;
    uint64_t last_use;
  };

  ProcessGroup& group_;
  std::atomic<uint64_t> seq_{0};
  mutable std::mutex mutex_;
  // Declared first, destroyed last: what the actor's queued jobs use is still there.
  std::unique_ptr<CollectiveActor> actor_;
  std::unique_ptr<SharedMemoryAllReduce> shm_;
  std::unique_ptr<HostGroups> host_groups_;
  std::map<Key, Cached> algorithms_;
  uint64_t uses_ = 0;
};

// A collective call on group: its descriptor with the group's next number, a channel to the group.
CollectiveCall begin_call(ProcessGroup& group, CollectiveOp op, ReduceOp reduce, DType dtype, uint64_t count, int root = -1);

}  // namespace troupe::net::collectives
