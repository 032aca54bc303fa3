#include "net/collectives/all_reduce.h"

#include "net/collectives/group_state.h"
#include "net/collectives/host_groups.h"
#include "net/collectives/shm_all_reduce.h"

namespace troupe::net::collectives {

namespace {

// Largest all_reduce that recursive doubling takes over ZeroMQ (then the ring), measured with
// examples/all_reduce_bench and TROUPE_SHM=0 on one host over ipc:// (2 cores, median us):
//   2 ranks: 64 KiB RD 177 / ring 338; 256 KiB RD 287 / ring 778; 1 MiB RD 494 / ring 566
//   4 ranks: 64 KiB RD 1032 / ring 1517; 256 KiB RD 3365 / ring 2888
// With two ranks doubling is one exchange of the whole tensor, and the ring's extra step only
// pays off once chunks pipeline; with more ranks the ring's smaller messages win sooner.
constexpr size_t kRecursiveDoublingMaxBytesTwoRanks = 1 << 20;
constexpr size_t kRecursiveDoublingMaxBytes = 128 << 10;
// Largest all_reduce that takes two levels on a group over several hosts (then the flat ring,
// whose pipeline keeps every rank busy while the levels run one after the other). Measured with
// all_reduce_bench, 2 hosts x 2 ranks (scripts/netns_cluster.sh; the hosts share 2 cores), median
// us, two levels / flat: 4 B 150-220 / 297-434; 64 KiB 344-364 / 525-704; 1 MiB 1688-3133 /
// 3416-4061; 16 MiB 46023-56222 / 34512-57583; 64 MiB 173274-175565 / 155364-179398.
constexpr size_t kTwoLevelAllReduceMaxBytes = 4 << 20;

}  // namespace

// Recursive doubling needs log2(n) latencies but sends the whole tensor each round; the ring
// needs 2(n-1) latencies and sends 2(n-1)/n of it in total. Two ranks exchange their tensors
// either way: whole when small, in pipelined chunks (pair_all_reduce) when large.
std::unique_ptr<FlatAllReduce> make_flat_all_reduce(int rank, int size, int64_t count, DType dtype, ReduceOp op) {
  const size_t bytes = static_cast<size_t>(count) * itemsize(dtype);
  const size_t limit = size == 2 ? kRecursiveDoublingMaxBytesTwoRanks : kRecursiveDoublingMaxBytes;
  if (bytes <= limit) return make_recursive_doubling_all_reduce(rank, size, op);
  if (size == 2) return make_pair_all_reduce(rank, count, dtype, op);
  return make_ring_all_reduce(rank, size, count, dtype, op);
}

AllReduce::AllReduce(ProcessGroup& group, GroupState& state, int64_t count, DType dtype, ReduceOp op)
    : count_(count), dtype_(dtype), op_(op), size_(group.size()), name_("local") {
  if (size_ == 1) return;
  const size_t bytes = static_cast<size_t>(count) * itemsize(dtype);
  two_level_ = bytes <= kTwoLevelAllReduceMaxBytes && state.host_groups().two_level;
  shared_memory_ = !two_level_ && SharedMemoryAllReduce::eligible(group);
  // Also what a call without a turn on the other paths runs (shared memory turned off).
  flat_ = make_flat_all_reduce(group.rank(), size_, count, dtype, op);
  name_ = two_level_ ? "two_level" : shared_memory_ ? "shared_memory" : flat_->name();
}

// The levels are calls of their own on the host sub-groups (host_groups.h), numbered here with the
// outer call, so async and blocking calls pair up alike on every rank.
AllReduce::Turn AllReduce::take_turn(ProcessGroup& group) {
  Turn turn;
  if (shared_memory_) turn.shm_ticket = GroupState::of(group).shared_memory().take_ticket();
  if (!two_level_) return turn;
  const HostGroups& hosts = GroupState::of(group).host_groups();
  auto& levels = *(turn.levels = std::make_shared<TwoLevel>());
  const ReduceOp combine = op_ == ReduceOp::avg ? ReduceOp::sum : op_;
  const uint64_t count = static_cast<uint64_t>(count_);
  ProcessGroup& local = *hosts.local;
  const bool shared_host = local.size() > 1;
  if (shared_host) {
    if (SharedMemoryAllReduce::eligible(local)) levels.shm_ticket = GroupState::of(local).shared_memory().take_ticket();
    levels.within_first = begin_call(local, CollectiveOp::all_reduce, combine, dtype_, count);
  }
  if (hosts.leaders) levels.leaders = begin_call(*hosts.leaders, CollectiveOp::all_reduce, combine, dtype_, count);
  if (shared_host) {
    if (levels.shm_ticket) levels.shm_ticket_last = GroupState::of(local).shared_memory().take_ticket();
    levels.within_last = begin_call(local, CollectiveOp::all_reduce, combine, dtype_, count);
  }
  return turn;
}

Tensor AllReduce::run(CollectiveCall& call, const Turn& turn, const Tensor& data) {
  runs_.fetch_add(1, std::memory_order_relaxed);
  call.algorithm = name_;
  if (size_ == 1) return data;
  if (turn.levels) {
    turn.levels->deadline = call.deadline;
    turn.levels->poll = call.poll;
    return two_level_all_reduce(*turn.levels, data, op_, size_);
  }
  if (turn.shm_ticket) {
    SharedMemoryAllReduce& shm = GroupState::of(call.channel.group()).shared_memory();
    if (std::optional<Tensor> sum = shm.run(call, *turn.shm_ticket, data, op_)) return *sum;
  }
  call.algorithm = flat_->name();
  return flat_->run(call, data);
}

// GroupState's cache of these objects is defined here, beside what it makes (group_state.cpp
// knows them only by name).
std::shared_ptr<AllReduce> GroupState::all_reduce(int64_t count, DType dtype, ReduceOp op) {
  const Key key{count, dtype, op};
  {
    std::lock_guard lock(mutex_);
    if (auto it = algorithms_.find(key); it != algorithms_.end()) {
      it->second.last_use = ++uses_;
      return it->second.algorithm;
    }
  }
  // Made outside the lock: setting up looks at the group's hosts (host_groups() locks). Every rank
  // makes the same choice, and a racing caller's duplicate is simply dropped.
  auto made = std::make_shared<AllReduce>(group_, *this, count, dtype, op);
  std::lock_guard lock(mutex_);
  auto [it, added] = algorithms_.try_emplace(key, Cached{made, 0});
  it->second.last_use = ++uses_;
  if (added && algorithms_.size() > kMaxAlgorithms) {
    auto oldest = algorithms_.begin();
    for (auto i = algorithms_.begin(); i != algorithms_.end(); ++i)
      if (i->second.last_use < oldest->second.last_use) oldest = i;
    algorithms_.erase(oldest);
  }
  return it->second.algorithm;
}

}  // namespace troupe::net::collectives
