// A value to its readers: each reader on this rank gets it by actor message (or as a graph
// output), each other rank that reads it gets it once, in one Edge for all its readers there
// (rank_link.h). Only tensors cross ranks; that is checked before anything is sent, so a node
// never sends some of its outputs and then fails.
#include "actors/handoff.h"
#include "dataflow/executor_core.h"
#include "devices/error_kinds.h"

namespace troupe::detail {

// The last reader on this rank takes the value itself, the others a copy.
void ExecutorCore::deliver(const std::vector<Target>& targets, const InvocationPtr& inv, bool live, Value value) {
  if (world > 1) send_elsewhere(targets, inv, live, value);
  const Target* held = nullptr;
  for (const Target& t : targets) {
    if (inv->placement->owner(t) != rank) continue;
    if (held) hand(*held, inv, live, value);
    held = &t;
  }
  if (held) hand(*held, inv, live, std::move(value));
}

void ExecutorCore::hand(const Target& t, const InvocationPtr& inv, bool live, Value v) {
  if (t.node < 0) set_output(*inv, t.slot, live, std::move(v));
  else send_handoff(nodes[t.node].actor, Deliver{inv, t.slot, live, std::move(v)});
}

void ExecutorCore::send_elsewhere(const std::vector<Target>& targets, const InvocationPtr& inv, bool live,
                                  const Value& value) {
  std::vector<std::vector<Target>> by_rank;  // sized once a target is on another rank
  for (const Target& t : targets) {
    const int r = inv->placement->owner(t);
    if (r == rank) continue;
    if (by_rank.empty()) by_rank.resize(world);
    by_rank[r].push_back(t);
  }
  for (int r = 0; r < static_cast<int>(by_rank.size()); ++r) {
    if (by_rank[r].empty()) continue;
    const bool starts = rank == 0 && !inv->started[r].exchange(true, std::memory_order_relaxed);
    link->send_edge(r, Edge{inv->id, std::move(by_rank[r]), live ? std::optional(value.tensor()) : std::nullopt,
                            starts});
  }
}

// A value from another rank: each target must be an input of a node of this rank, or (on rank
// 0) a graph output; anything else is a peer that does not run this graph.
void ExecutorCore::deliver_local(const InvocationPtr& inv, const std::vector<Target>& targets,
                                 std::optional<Tensor> value) {
  const auto within = [](int i, size_t n) { return i >= 0 && static_cast<size_t>(i) < n; };
  for (const Target& t : targets) {
    const bool known = t.node == -1 ? rank == 0 && within(t.slot, plan.output_names.size())
                                    : within(t.node, plan.nodes.size()) && inv->placement->local(t.node) &&
                                          within(t.slot, plan.nodes[t.node].inputs.size());
    if (!known)
      throw CommError("executor of graph '" + plan.graph + "' on rank " + std::to_string(rank) +
                      ": a peer sent a value for node " + std::to_string(t.node) + " input " +
                      std::to_string(t.slot) + ", which this rank does not run");
  }
  const bool live = value.has_value();
  deliver(targets, inv, live, live ? Value(std::move(*value)) : Value());
}

// Checks the count first, so that a node never sends some outputs and then dead tokens too.
void ExecutorCore::emit(int id, const InvocationPtr& inv, std::vector<Value> outs) {
  const PlanNode& pn = plan.nodes[id];
  if (pn.outputs >= 0 && static_cast<int>(outs.size()) != pn.outputs)
    throw ValueError("gave " + std::to_string(outs.size()) + " outputs, declared " + std::to_string(pn.outputs));
  if (outs.size() < pn.consumers.size())
    throw ValueError("gave " + std::to_string(outs.size()) + " outputs, but output " +
                     std::to_string(pn.consumers.size() - 1) + " is used");
  for (size_t port = 0; port < pn.consumers.size(); ++port)
    check_sendable(*inv->placement, pn.consumers[port], outs[port], "output " + std::to_string(port));
  for (size_t port = 0; port < pn.consumers.size(); ++port) deliver(pn.consumers[port], inv, true, std::move(outs[port]));
}

void ExecutorCore::emit_dead(int id, const InvocationPtr& inv) {
  for (const auto& targets : plan.nodes[id].consumers) deliver(targets, inv, false, {});
}

void ExecutorCore::check_sendable(const Placement& where, const std::vector<Target>& targets, const Value& v,
                                  const std::string& what) const {
  if (world == 1 || (v.is_tensor() && v.tensor().defined())) return;
  for (const Target& t : targets) {
    if (where.owner(t) != rank)
      throw ValueError(what + " goes to rank " + std::to_string(where.owner(t)) +
                       ": only tensors travel between ranks, got " + v.type_name());
  }
}

}  // namespace troupe::detail
