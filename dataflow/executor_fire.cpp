// A node fires: its actor gathers one invocation's inputs (receive), then the node's kind says
// what firing does: an op or a call runs on the node's lane, a module's call queues on the
// module's actor, a switch routes its values down the taken branch (dead tokens down the other),
// a merge passes on the first live branch, a loop runs its body (executor_loops.cpp). A dead
// input, or an invocation that failed or was cancelled, skips the node: it passes dead tokens on.
#include <algorithm>
#include <variant>

#include "actors/kernel_budget.h"
#include "actors/lane_call.h"
#include "actors/observe/profiler.h"
#include "actors/task.h"
#include "dataflow/executor_core.h"
#include "devices/error_kinds.h"
#include "devices/registry.h"

namespace troupe::detail {

bool ExecutorCore::truth(const Value& v, const std::string& what) {
  if (v.is<bool>()) return v.get<bool>();
  if (v.is_tensor() && v.tensor().defined() && v.tensor().numel() == 1) return v.tensor().item<double>() != 0;
  throw ValueError(what + " must be a bool or a one-element tensor, got " +
                   (v.is_tensor() && v.tensor().defined() ? v.tensor().meta().str() : v.type_name()));
}

void ExecutorCore::receive(int id, Deliver& d) {
  const PlanNode& pn = plan.nodes[id];
  const int arity = static_cast<int>(pn.inputs.size());
  if (arity <= 1) {
    std::vector<Value> values;
    std::vector<uint8_t> live;
    if (d.slot >= 0) {
      values.push_back(std::move(d.value));
      live.push_back(d.live);
    }
    fire(id, d.inv, std::move(values), std::move(live));
    return;
  }
  auto& pending = nodes[id].pending;
  auto [it, fresh] = pending.try_emplace(d.inv->id);
  Pending& p = it->second;
  if (fresh) {
    p.values.resize(arity);
    p.live.resize(arity);
  }
  p.values[d.slot] = std::move(d.value);
  p.live[d.slot] = d.live;
  if (++p.arrived < arity) return;
  Pending ready = std::move(p);
  pending.erase(it);
  fire(id, d.inv, std::move(ready.values), std::move(ready.live));
}

void ExecutorCore::fire(int id, const InvocationPtr& inv, std::vector<Value> values, std::vector<uint8_t> live) {
  const PlanNode& pn = plan.nodes[id];
  const Node& n = *pn.node;
  const bool all_live = std::all_of(live.begin(), live.end(), [](uint8_t l) { return l != 0; });
  if (inv->stopped.load(std::memory_order_acquire) || (!all_live && !n.is<Node::Merge>())) {
    emit_dead(id, inv);
    node_done(inv);
    return;
  }
  std::optional<ProfileScope> scope;
  if (Profiler::global().recording()) {
    Profiler::set_thread_actor(pn.path);
    scope.emplace(pn.path, what_runs(n));
  }
  try {
    // Each kind returns whether it is done with the invocation here (not later, elsewhere).
    const bool done_here = std::visit(
        overloaded{
            [&](const Node::Op&) {
              fire_op(id, inv, std::move(values));
              return true;
            },
            [&](const Node::Call& call) {
              fire_call(id, inv, call, std::move(values));
              return true;
            },
            [&](const Node::Module& module) {
              fire_module(id, inv, module, std::move(values));
              return false;  // done in the module's actor
            },
            [&](const Node::Switch& sw) {
              fire_switch(id, inv, sw, values);
              return true;
            },
            [&](const Node::Merge& merge) {
              fire_merge(id, inv, merge, std::move(values), live);
              return true;
            },
            [&](const Node::Loop&) {
              iterate(id, inv, std::move(values), 0);
              return false;  // done when the loop ends
            },
            []<class K>(const K&) -> bool requires(!runs_as_plan_node<K>) {
              throw Error(std::string("executor: a ") + K::kind_name + " node fired; the plan resolves those away");
            },
        },
        n.kind);
    if (!done_here) return;
  } catch (...) {
    fail(id, inv, std::current_exception());
    emit_dead(id, inv);
  }
  values = {};    // inputs are freed before the invocation can count as done
  scope.reset();  // and the firing recorded: whoever has the results finds it in the profile
  node_done(inv);
}

// An op and a call run on the node's lane, if it has one (detail::run_on_lane: waits for the
// inputs' producers on the device, marks the outputs with the event after the work).
void ExecutorCore::fire_op(int id, const InvocationPtr& inv, std::vector<Value> values) {
  const PlanNode& pn = plan.nodes[id];
  std::vector<Value> inputs = placed(id, std::move(values));
  std::vector<Tensor> tensors;
  tensors.reserve(inputs.size());
  for (auto& v : inputs) tensors.push_back(v.tensor());
  KernelBudget budget(fixed_intra_op, cores);
  auto outs = run_on_lane<std::vector<Tensor>>(
      nodes[id].lane.get(), [&] { return OpRegistry::global().call(*pn.def, tensors, pn.attrs); }, inputs);
  emit(id, inv, std::vector<Value>(outs.begin(), outs.end()));
}

void ExecutorCore::fire_call(int id, const InvocationPtr& inv, const Node::Call& call, std::vector<Value> values) {
  std::vector<Value> outs;
  {
    KernelBudget budget(fixed_intra_op, cores);
    std::vector<Value> inputs = placed(id, std::move(values));
    outs = run_on_lane<std::vector<Value>>(nodes[id].lane.get(), [&] { return call.fn(inputs); }, inputs);
  }
  emit(id, inv, std::move(outs));
}

// The module's own actor runs the call, in its queue's order; the node is done when it has.
void ExecutorCore::fire_module(int id, const InvocationPtr& inv, const Node::Module& module, std::vector<Value> values) {
  auto call = [core = shared_from_this(), id, inv, &fn = module.fn, values = placed(id, std::move(values))]() mutable {
    try {
      auto outs = fn(std::exchange(values, {}));
      core->emit(id, inv, std::move(outs));
    } catch (...) {
      core->fail(id, inv, std::current_exception());
      core->emit_dead(id, inv);
    }
    core->node_done(inv);
  };
  auto task = std::make_shared<Task<void, decltype(call)>>(std::move(call), module.queue);
  submit(task);
}

// values: the predicate, then the switch's k values; its outputs: k for "taken", then k for not.
void ExecutorCore::fire_switch(int id, const InvocationPtr& inv, const Node::Switch& sw, const std::vector<Value>& values) {
  const PlanNode& pn = plan.nodes[id];
  const bool taken = truth(values[0], "the predicate");
  const int k = sw.width;
  for (int i = 0; i < k; ++i)
    check_sendable(*inv->placement, pn.consumers[taken ? i : k + i], values[1 + i], "value " + std::to_string(i));
  for (int i = 0; i < k; ++i) {
    deliver(pn.consumers[i], inv, taken, taken ? values[1 + i] : Value());
    deliver(pn.consumers[k + i], inv, !taken, taken ? Value() : values[1 + i]);
  }
}

// values: k per branch; the first branch whose k are all live goes on, or dead tokens if none.
void ExecutorCore::fire_merge(int id, const InvocationPtr& inv, const Node::Merge& merge, std::vector<Value> values,
                              const std::vector<uint8_t>& live) {
  const int k = merge.width;
  const int branches = k > 0 ? static_cast<int>(values.size()) / k : 0;
  int chosen = -1;
  for (int b = 0; b < branches && chosen < 0; ++b)
    if (std::all_of(live.begin() + b * k, live.begin() + (b + 1) * k, [](uint8_t l) { return l != 0; })) chosen = b;
  if (chosen < 0) {
    emit_dead(id, inv);
    return;
  }
  emit(id, inv, std::vector<Value>(std::make_move_iterator(values.begin() + chosen * k),
                                   std::make_move_iterator(values.begin() + (chosen + 1) * k)));
}

// A node's inputs on its device: its constants as uploaded once, other tensors moved there.
std::vector<Value> ExecutorCore::placed(int id, std::vector<Value> values) const {
  const Node& n = *plan.nodes[id].node;
  if (!n.device) return values;
  const auto& constants = placed_constants[id];
  for (size_t i = 0; i < values.size(); ++i) {
    Value& v = values[i];
    if (i < constants.size() && constants[i])
      v = *constants[i];
    else if (v.is_tensor() && v.tensor().defined() && v.tensor().device() != *n.device)
      v = v.tensor().to(*n.device);
  }
  return values;
}

std::string ExecutorCore::where(int id) const {
  const PlanNode& pn = plan.nodes[id];
  const Node& n = *pn.node;
  const auto* op = n.as<Node::Op>();
  return std::string(n.kind_name()) + " '" + pn.path + "'" + (op ? " (" + op->op + ")" : "") + ": ";
}

void ExecutorCore::fail(int id, const InvocationPtr& inv, std::exception_ptr e) { inv->fail(with_context(where(id), std::move(e))); }

}  // namespace troupe::detail
