#include "net/collectives/group_state.h"

#include "net/collectives/collective_actor.h"
#include "net/collectives/host_groups.h"
#include "net/collectives/shm_all_reduce.h"

namespace troupe::net::collectives {

namespace {

const char kKey = 0;  // its address names the collectives' attachment of a group

}  // namespace

GroupState::GroupState(ProcessGroup& group) : group_(group) {}

GroupState::~GroupState() = default;

GroupState& GroupState::of(ProcessGroup& group) {
  void* state = group.attachment(&kKey, [](ProcessGroup& g) -> std::shared_ptr<void> {
    return std::make_shared<GroupState>(g);
  });
  return *static_cast<GroupState*>(state);
}

CollectiveActor& GroupState::actor() {
  std::lock_guard lock(mutex_);
  if (!actor_) actor_ = std::make_unique<CollectiveActor>();
  return *actor_;
}

SharedMemoryAllReduce& GroupState::shared_memory() {
  std::lock_guard lock(mutex_);
  if (!shm_) shm_ = std::make_unique<SharedMemoryAllReduce>();
  return *shm_;
}

const HostGroups& GroupState::host_groups() {
  std::lock_guard lock(mutex_);
  if (!host_groups_) host_groups_ = std::make_unique<HostGroups>(make_host_groups(group_));
  return *host_groups_;
}

size_t GroupState::cached_algorithms() const {
  std::lock_guard lock(mutex_);
  return algorithms_.size();
}

CollectiveCall begin_call(ProcessGroup& group, CollectiveOp op, ReduceOp reduce, DType dtype, uint64_t count, int root) {
  const OpDescriptor d{op, reduce, dtype, count, GroupState::of(group).next_seq(), root};
  return CollectiveCall{Channel(group.shared_from_this()), d, {}};
}

}  // namespace troupe::net::collectives
