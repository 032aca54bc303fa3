// Healing after a lost rank, the executor's side (rank_link.h drives it): when every node is
// pure, rank 0 moves the lost rank's nodes to the survivors (placement_without), every rank
// adopts the new placement (making actors for the nodes it gained), and each invocation that was
// in flight runs again from its inputs (rerun) under the same promises. Launches wait meanwhile.
#include "dataflow/executor_core.h"
#include "devices/error_kinds.h"

namespace troupe::detail {

std::vector<int> ExecutorCore::placement_without(const std::vector<uint8_t>& lost) {
  return without_ranks(current_placement()->ranks, lost);
}

void ExecutorCore::adopt(const std::vector<int>& ranks) {
  const auto valid = [&](int r) { return r >= 0 && r < world; };
  if (ranks.size() != plan.nodes.size() || !std::all_of(ranks.begin(), ranks.end(), valid))
    throw CommError("executor of graph '" + plan.graph + "' on rank " + std::to_string(rank) + ": a placement of " +
                    std::to_string(ranks.size()) + " nodes over ranks outside 0.." + std::to_string(world - 1) +
                    " does not fit its " + std::to_string(plan.nodes.size()) + " nodes");
  auto now = std::make_shared<const Placement>(plan, ranks, rank, world);
  const auto before = current_placement();
  for (size_t i = 0; i < plan.nodes.size(); ++i)
    if (now->local(static_cast<int>(i)) && !before->local(static_cast<int>(i)) && !nodes[i].actor) {
      prepare(static_cast<int>(i));
      spawn(static_cast<int>(i));
    }
  std::lock_guard lock(placement_mutex);
  placement = std::move(now);
}

std::unique_lock<std::shared_mutex> ExecutorCore::hold_launches() { return std::unique_lock(launching); }

uint64_t ExecutorCore::next_invocation() const { return next_id.load(std::memory_order_relaxed); }

// The new run takes over the old one's slot, promises and inputs; the old one's nodes skip.
void ExecutorCore::rerun(const InvocationPtr& old) {
  InvocationPtr fresh = begin();
  fresh->promises = std::move(old->promises);
  fresh->inputs = old->inputs;
  old->fail(std::make_exception_ptr(CancelledError("invocation " + std::to_string(old->id) + " runs again as " +
                                                   std::to_string(fresh->id) + " after a rank was lost")));
  bool cancelled = false;
  {
    std::lock_guard lock(old->mutex);
    old->retry = fresh;
    cancelled = old->cancel_asked;
  }
  if (cancelled) cancel(*fresh);
  launch(fresh, fresh->inputs);
}

void ExecutorCore::driver_gone() {
  {
    std::lock_guard lock(mutex);
    served = true;
  }
  idle.notify_all();
}

}  // namespace troupe::detail
