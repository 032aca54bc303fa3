#pragma once
// InvocationState: one invocation's progress on this rank, shared by the node actors that work
// on it, the Invocation handle run() returned, and the messages from other ranks that name it.
// Internal to the executor (executor.cpp, rank_link.cpp).
#include <atomic>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "actors/promise.h"
#include "dataflow/value.h"

namespace troupe::detail {

struct Placement;

struct InvocationState {
  uint64_t id = 0;
  std::atomic<int> remaining{0};     // plan nodes not yet done with it, plus one while starting
  std::atomic<bool> stopped{false};  // failed or cancelled: nodes that have not fired skip
  std::atomic<bool> finished{false};
  std::atomic<bool> completed{false};  // complete() ran (once, even when a lost peer forces it)
  bool counted = false;                // holds an in-flight slot of this rank's executor
  std::mutex mutex;
  std::exception_ptr error;
  std::vector<Value> outputs;
  std::vector<uint8_t> live;  // per output: a value arrived (not a dead token)
  std::vector<std::atomic<bool>> started;         // rank 0, per rank: a message has started it there
  std::vector<Promise<Value>> promises;           // runs started by Executor::run
  std::function<void(InvocationState&)> on_done;  // runs started by a loop node or another rank
  std::shared_ptr<const Placement> placement;     // where its nodes run, for its whole life
  // Rank 0 of an executor that heals: its inputs, to run it again; and, once a heal has run it
  // again as another invocation, that one (guarded by mutex, as cancel_asked is).
  std::vector<Value> inputs;
  std::shared_ptr<InvocationState> retry;
  bool cancel_asked = false;
  std::atomic<bool> parked{false};  // failed for a lost rank: waits for the heal (RankLink::park)

  void fail(std::exception_ptr e) {
    {
      std::lock_guard lock(mutex);
      if (!error) error = std::move(e);
    }
    stopped.store(true, std::memory_order_release);
  }
};

using InvocationPtr = std::shared_ptr<InvocationState>;

// The run that stands for `inv` now: itself, or the last of the reruns a heal made of it.
inline InvocationPtr latest(InvocationPtr inv) {
  for (InvocationPtr next;; inv = std::move(next)) {
    {
      std::lock_guard lock(inv->mutex);
      next = inv->retry;
    }
    if (!next) return inv;
  }
}

}  // namespace troupe::detail
