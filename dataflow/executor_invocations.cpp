// An invocation's life on this rank: run() takes an in-flight slot (waiting while max_in_flight
// are in flight), begin() makes its state, launch() sends the inputs and constants on their way
// and starts the nodes without inputs; each node counts itself done once, and the last one
// finishes it: the slot is given back, then its promises are kept (or its loop told).
#include "actors/handoff.h"
#include "dataflow/executor_core.h"
#include "devices/error_kinds.h"

namespace troupe::detail {

// An in-flight slot for an invocation to come (wait: until there is one free).
void ExecutorCore::take_slot(bool wait) {
  std::unique_lock lock(mutex);
  if (wait) idle.wait(lock, [&] { return in_flight < options.max_in_flight; });
  ++in_flight;
  peak = std::max(peak, in_flight);
}

// A new invocation that holds the slot taken for it, under the current placement. Rank 0
// waits for the other ranks that run some of its nodes to ack it. Its caller gives it promises
// or an on_done, then launches it.
InvocationPtr ExecutorCore::begin() {
  auto inv = make_invocation(next_id.fetch_add(1, std::memory_order_relaxed), current_placement(), true);
  if (world > 1) inv->started = std::vector<std::atomic<bool>>(world);
  inv->counted = true;
  return inv;
}

InvocationPtr ExecutorCore::make_invocation(uint64_t id, int acks) {
  auto inv = make_invocation(id, current_placement(), false);
  inv->remaining.fetch_add(acks, std::memory_order_relaxed);
  return inv;
}

InvocationPtr ExecutorCore::make_invocation(uint64_t id, std::shared_ptr<const Placement> where, bool acked) {
  auto inv = std::make_shared<InvocationState>();
  inv->id = id;
  const int acks = acked ? static_cast<int>(where->started_ranks.size()) : 0;
  inv->remaining.store(where->local_nodes + 1 + acks, std::memory_order_relaxed);
  inv->outputs.resize(plan.output_names.size());
  inv->live.assign(plan.output_names.size(), 0);
  inv->placement = std::move(where);
  return inv;
}

// Sends the inputs and constants on their way and starts the nodes without inputs. The link
// tracks it from here, not from begin(): once tracked, a lost peer may finish it on another
// thread, so its promises (or on_done) and inputs must be in place.
void ExecutorCore::launch(const InvocationPtr& inv, std::vector<Value> inputs) {
  try {
    if (world > 1) {
      link->track(inv);
      link->start(inv->id, inv->placement->unfed_ranks);
    }
    for (size_t k = 0; k < inputs.size(); ++k) deliver(plan.input_consumers[k], inv, true, std::move(inputs[k]));
  } catch (...) {
    // A peer went away (while run() waited for a slot, say): the invocation fails with why,
    // rather than run() throwing with the invocation still in flight.
    inv->fail(std::current_exception());
    complete(inv);
    return;
  }
  launch_local(inv);
}

// Every rank gives its own nodes the constants and starts its nodes without inputs.
void ExecutorCore::launch_local(const InvocationPtr& inv) {
  const Placement& where = *inv->placement;
  for (size_t c = 0; c < plan.constants.size(); ++c)
    for (const Target& t : plan.constant_consumers[c])
      if (t.node >= 0 && where.local(t.node)) send_handoff(nodes[t.node].actor, Deliver{inv, t.slot, true, plan.constants[c]});
      else if (t.node < 0 && rank == 0) set_output(*inv, t.slot, true, plan.constants[c]);
  for (int s : where.sources) send_handoff(nodes[s].actor, Deliver{inv, -1, true, {}});
  node_done(inv);  // the starter's share of `remaining`
}

void ExecutorCore::set_output(InvocationState& inv, int k, bool live, Value v) {
  inv.outputs[k] = std::move(v);
  inv.live[k] = live;
}

void ExecutorCore::node_done(const InvocationPtr& inv) {
  if (inv->remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) complete(inv);
}

// An invocation that failed for a lost rank waits for the heal when the executor heals.
void ExecutorCore::complete(const InvocationPtr& inv) {
  if (heals && rank == 0 && inv->counted && link->park(inv)) return;
  finish(inv);
}

void ExecutorCore::finish(const InvocationPtr& inv) {
  if (inv->completed.exchange(true)) return;
  if (world > 1) link->forget(inv->id);
  // Out of flight before its results are handed over: whoever has them sees it gone.
  if (inv->counted) {
    {
      std::lock_guard lock(mutex);
      --in_flight;
    }
    idle.notify_all();
  }
  if (inv->on_done) {
    inv->on_done(*inv);
  } else {
    for (size_t k = 0; k < inv->promises.size(); ++k) {
      if (inv->error) {
        inv->promises[k].set_exception(inv->error);
      } else if (!inv->live[k]) {
        inv->promises[k].set_exception(std::make_exception_ptr(
            ValueError("graph '" + graph->name() + "' output '" + plan.output_names[k] + "' was not produced in " +
                       "invocation " + std::to_string(inv->id) + ": its branch was not taken")));
      } else {
        inv->promises[k].set_value(std::move(inv->outputs[k]));
      }
    }
  }
  inv->finished.store(true, std::memory_order_release);
}

void ExecutorCore::cancel(InvocationState& inv) {
  {
    std::lock_guard lock(inv.mutex);
    inv.cancel_asked = true;
  }
  inv.fail(std::make_exception_ptr(CancelledError("invocation " + std::to_string(inv.id) + " was cancelled")));
}

}  // namespace troupe::detail
