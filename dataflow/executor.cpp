#include "dataflow/executor.h"

#include <algorithm>
#include <atomic>
#include <caf/all.hpp>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "actors/handoff.h"
#include "actors/kernel_budget.h"
#include "actors/lane_call.h"
#include "actors/profiler.h"
#include "actors/runtime.h"
#include "actors/task.h"
#include "dataflow/captured_plan.h"
#include "dataflow/invocation_state.h"
#include "dataflow/placement.h"
#include "dataflow/plan.h"
#include "dataflow/rank_link.h"
#include "devices/error_kinds.h"
#include "devices/threads.h"
#include "net/process_group.h"

namespace troupe::detail {

// The one message between node actors: input `slot` of the receiver for invocation `inv`;
// slot -1 starts a node without inputs. A dead token (live false) skips the receiver.
struct Deliver {
  InvocationPtr inv;
  int slot = 0;
  bool live = true;
  Value value;
};

}  // namespace troupe::detail

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(troupe::detail::Deliver)

namespace troupe::detail {

namespace {

bool truth(const Value& v, const std::string& what) {
  if (v.is<bool>()) return v.get<bool>();
  if (v.is_tensor() && v.tensor().defined() && v.tensor().numel() == 1) return v.tensor().item<double>() != 0;
  throw ValueError(what + " must be a bool or a one-element tensor, got " +
                   (v.is_tensor() && v.tensor().defined() ? v.tensor().meta().str() : v.type_name()));
}

}  // namespace

struct ExecutorCore final : std::enable_shared_from_this<ExecutorCore>, RankLink::Scheduler {
  struct Pending {
    std::vector<Value> values;
    std::vector<uint8_t> live;
    int arrived = 0;
  };
  struct NodeState {
    caf::actor actor;
    std::shared_ptr<ExecutorCore> body;                // loop nodes
    std::unordered_map<uint64_t, Pending> pending;     // touched by the node's actor only
    std::unique_ptr<Lane> lane;                        // a node on a GPU: its stream, its kernels' order
  };

  ExecutorCore(const Graph& g, ExecutorOptions opts) : graph(std::make_shared<const Graph>(g)), options(opts) {
    if (options.max_in_flight < 1)
      throw ValueError("Executor: max_in_flight must be >= 1, got " + std::to_string(options.max_in_flight));
    plan = make_plan(*graph);
    if (options.group) {
      rank = options.group->rank();
      world = options.group->size();
    }
    for (const PlanNode& pn : plan.nodes)
      if (pn.rank >= world)
        plan.problems.push_back("node '" + pn.path + "' is placed on rank " + std::to_string(pn.rank) +
                                (options.group ? ", but the process group has " + std::to_string(world) + " ranks"
                                               : ", but the executor has no process group"));
    if (!plan.problems.empty()) throw GraphError(graph->name(), plan.problems);
    output_names = std::make_shared<const std::vector<std::string>>(plan.output_names);
    placement = std::make_shared<const Placement>(plan, ranks_of(plan), rank, world);
    heals = world > 1 && std::all_of(plan.nodes.begin(), plan.nodes.end(), [](const PlanNode& pn) { return pn.pure; });
    fixed_intra_op = Runtime::current().options().intra_op_threads;
    cores = hardware_cores();
    nodes.resize(plan.nodes.size());
    placed_constants.resize(plan.nodes.size());
    for (size_t i = 0; i < plan.nodes.size(); ++i)
      if (placement->local(static_cast<int>(i))) prepare(static_cast<int>(i));
    if (options.cuda_graph) {
      if (world > 1) throw ValueError("Executor: cuda_graph: graph '" + plan.graph + "' is spread over " +
                                      std::to_string(world) + " ranks; a captured graph runs in one process");
      captured = std::make_unique<CapturedPlan>(plan, placed_constants);
    }
  }

  static bool runs_on_lane(const Node& n) { return n.is<Node::Op>() || n.is<Node::Call>(); }

  // What a node of this rank needs besides its actor: a loop's body, a lane on a device, and the
  // constants it reads uploaded to its device once, not at every invocation.
  void prepare(int i) {
    const Node& n = *plan.nodes[i].node;
    if (const auto* loop = n.as<Node::Loop>()) nodes[i].body = create(*loop->body, {.max_in_flight = options.max_in_flight});
    if (n.device && !n.device->is_cpu() && runs_on_lane(n)) nodes[i].lane = Lane::make(*n.device, plan.nodes[i].path);
    if (!n.device) return;
    for (size_t k = 0; k < plan.constants.size(); ++k) {
      const Value& c = plan.constants[k];
      if (!c.is_tensor() || !c.tensor().defined() || *n.device == c.tensor().device()) continue;
      for (const Target& t : plan.constant_consumers[k]) {
        if (t.node != i) continue;
        auto& slots = placed_constants[i];
        if (slots.size() <= static_cast<size_t>(t.slot)) slots.resize(t.slot + 1);
        slots[t.slot] = c.tensor().to(*n.device);
      }
    }
  }

  ~ExecutorCore() {
    for (auto& n : nodes)
      if (n.body) n.body->stop();
  }

  static std::shared_ptr<ExecutorCore> create(const Graph& g, ExecutorOptions opts) {
    auto core = std::make_shared<ExecutorCore>(g, opts);
    core->spawn_actors();
    if (core->world > 1) {
      try {
        core->remote = net::RemoteActors::ensure(opts.group);
        core->link = std::make_shared<RankLink>(opts.group, g.name(), core, core->heals);
        core->link->connect();
      } catch (...) {
        core->stop();
        core->remote.reset();
        throw;
      }
    }
    return core;
  }

  std::shared_ptr<const Placement> current_placement() const {
    std::lock_guard lock(placement_mutex);
    return placement;
  }

  void spawn_actors() {
    for (size_t i = 0; i < nodes.size(); ++i)
      if (placement->local(static_cast<int>(i))) spawn(static_cast<int>(i));
  }

  void spawn(int i) {
    // The actor holds the core until stop() sends it the exit: no node outlives its data.
    // Spawn arguments rather than captures: CAF 0.17 dereferences a null argument tuple when
    // there are none (UBSan reports it).
    nodes[i].actor = Runtime::current().system().spawn(
        [](std::shared_ptr<ExecutorCore> core, int id) -> caf::behavior {
          return {[core, id](Deliver& d) {
            HandlerTurn turn;
            core->receive(id, d);
          }};
        },
        shared_from_this(), i);
  }

  void stop() {
    for (auto& n : nodes)
      if (n.actor) caf::anon_send_exit(n.actor, caf::exit_reason::user_shutdown);
  }

  // ---- invocations ----

  // An in-flight slot for an invocation to come (wait: until there is one free).
  void take_slot(bool wait) {
    std::unique_lock lock(mutex);
    if (wait) idle.wait(lock, [&] { return in_flight < options.max_in_flight; });
    ++in_flight;
    peak = std::max(peak, in_flight);
  }

  // A new invocation that holds the slot taken for it, under the current placement. Rank 0
  // waits for the other ranks that run some of its nodes to ack it.
  InvocationPtr begin() {
    auto inv = make_invocation(next_id.fetch_add(1, std::memory_order_relaxed), current_placement(), true);
    if (world > 1) inv->started = std::vector<std::atomic<bool>>(world);
    inv->counted = true;
    if (world > 1) link->track(inv);
    return inv;
  }

  InvocationPtr make_invocation(uint64_t id, int acks) override {
    auto inv = make_invocation(id, current_placement(), false);
    inv->remaining.fetch_add(acks, std::memory_order_relaxed);
    return inv;
  }

  InvocationPtr make_invocation(uint64_t id, std::shared_ptr<const Placement> where, bool acked) {
    auto inv = std::make_shared<InvocationState>();
    inv->id = id;
    const int acks = acked ? static_cast<int>(where->started_ranks.size()) : 0;
    inv->remaining.store(where->local_nodes + 1 + acks, std::memory_order_relaxed);
    inv->outputs.resize(plan.output_names.size());
    inv->live.assign(plan.output_names.size(), 0);
    inv->placement = std::move(where);
    return inv;
  }

  // Sends the inputs and constants on their way and starts the nodes without inputs.
  void launch(const InvocationPtr& inv, std::vector<Value> inputs) {
    try {
      if (world > 1) link->start(inv->id, inv->placement->unfed_ranks);
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
  void launch_local(const InvocationPtr& inv) override {
    const Placement& where = *inv->placement;
    for (size_t c = 0; c < plan.constants.size(); ++c)
      for (const Target& t : plan.constant_consumers[c])
        if (t.node >= 0 && where.local(t.node)) send_handoff(nodes[t.node].actor, Deliver{inv, t.slot, true, plan.constants[c]});
        else if (t.node < 0 && rank == 0) set_output(*inv, t.slot, true, plan.constants[c]);
    for (int s : where.sources) send_handoff(nodes[s].actor, Deliver{inv, -1, true, {}});
    node_done(inv);  // the starter's share of `remaining`
  }

  void set_output(InvocationState& inv, int k, bool live, Value v) {
    inv.outputs[k] = std::move(v);
    inv.live[k] = live;
  }

  // Hands a value to its readers: each other rank's in one Edge for all of them there (so the
  // value crosses to a rank once), this rank's by actor message or as a graph output; the last of
  // these takes the value itself, the others a copy.
  void deliver(const std::vector<Target>& targets, const InvocationPtr& inv, bool live, Value value) {
    if (world > 1) send_elsewhere(targets, inv, live, value);
    const Target* held = nullptr;
    for (const Target& t : targets) {
      if (inv->placement->owner(t) != rank) continue;
      if (held) hand(*held, inv, live, value);
      held = &t;
    }
    if (held) hand(*held, inv, live, std::move(value));
  }

  void hand(const Target& t, const InvocationPtr& inv, bool live, Value v) {
    if (t.node < 0) set_output(*inv, t.slot, live, std::move(v));
    else send_handoff(nodes[t.node].actor, Deliver{inv, t.slot, live, std::move(v)});
  }

  void send_elsewhere(const std::vector<Target>& targets, const InvocationPtr& inv, bool live, const Value& value) {
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
  void deliver_local(const InvocationPtr& inv, const std::vector<Target>& targets,
                     std::optional<Tensor> value) override {
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

  void node_done(const InvocationPtr& inv) override {
    if (inv->remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) complete(inv);
  }

  // An invocation that failed for a lost rank waits for the heal when the executor heals.
  void complete(const InvocationPtr& inv) override {
    if (heals && rank == 0 && inv->counted && link->park(inv)) return;
    finish(inv);
  }

  void finish(const InvocationPtr& inv) override {
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

  // ---- healing (rank_link.h) ----

  std::vector<int> placement_without(const std::vector<uint8_t>& lost) override {
    return without_ranks(current_placement()->ranks, lost);
  }

  void adopt(const std::vector<int>& ranks) override {
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

  std::unique_lock<std::shared_mutex> hold_launches() override { return std::unique_lock(launching); }

  uint64_t next_invocation() const override { return next_id.load(std::memory_order_relaxed); }

  // The new run takes over the old one's slot, promises and inputs; the old one's nodes skip.
  void rerun(const InvocationPtr& old) override {
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

  static void cancel(InvocationState& inv) {
    {
      std::lock_guard lock(inv.mutex);
      inv.cancel_asked = true;
    }
    inv.fail(std::make_exception_ptr(CancelledError("invocation " + std::to_string(inv.id) + " was cancelled")));
  }

  void driver_gone() override {
    {
      std::lock_guard lock(mutex);
      served = true;
    }
    idle.notify_all();
  }

  // ---- node actors ----

  void receive(int id, Deliver& d) {
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

  std::string where(int id) const {
    const PlanNode& pn = plan.nodes[id];
    const Node& n = *pn.node;
    const auto* op = n.as<Node::Op>();
    return std::string(n.kind_name()) + " '" + pn.path + "'" + (op ? " (" + op->op + ")" : "") + ": ";
  }

  void fail(int id, const InvocationPtr& inv, std::exception_ptr e) { inv->fail(with_context(where(id), std::move(e))); }

  void emit_dead(int id, const InvocationPtr& inv) {
    for (const auto& targets : plan.nodes[id].consumers) deliver(targets, inv, false, {});
  }

  // Checks the count first, so that a node never sends some outputs and then dead tokens too.
  void emit(int id, const InvocationPtr& inv, std::vector<Value> outs) {
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

  // Only tensors cross ranks: checked before anything is sent.
  void check_sendable(const Placement& where, const std::vector<Target>& targets, const Value& v,
                      const std::string& what) const {
    if (world == 1 || (v.is_tensor() && v.tensor().defined())) return;
    for (const Target& t : targets) {
      if (where.owner(t) != rank)
        throw ValueError(what + " goes to rank " + std::to_string(where.owner(t)) +
                         ": only tensors travel between ranks, got " + v.type_name());
    }
  }

  std::vector<Value> placed(int id, std::vector<Value> values) const {
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

  // Runs a node's work on its lane, if it has one (detail::run_on_lane: waits for the inputs'
  // producers on the device, marks the outputs with the event after the work).
  template <class Fn>
  auto on_lane(int id, const std::vector<Value>& inputs, Fn&& fn) {
    return detail::run_on_lane<decltype(fn())>(nodes[id].lane.get(), std::forward<Fn>(fn), inputs);
  }

  void fire(int id, const InvocationPtr& inv, std::vector<Value> values, std::vector<uint8_t> live) {
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
                std::vector<Value> inputs = placed(id, std::move(values));
                std::vector<Tensor> tensors;
                tensors.reserve(inputs.size());
                for (auto& v : inputs) tensors.push_back(v.tensor());
                KernelBudget budget(fixed_intra_op, cores);
                auto outs = on_lane(id, inputs, [&] { return OpRegistry::global().call(*pn.def, tensors, pn.attrs); });
                emit(id, inv, std::vector<Value>(outs.begin(), outs.end()));
                return true;
              },
              [&](const Node::Call& call) {
                std::vector<Value> outs;
                {
                  KernelBudget budget(fixed_intra_op, cores);
                  std::vector<Value> inputs = placed(id, std::move(values));
                  outs = on_lane(id, inputs, [&] { return call.fn(inputs); });
                }
                emit(id, inv, std::move(outs));
                return true;
              },
              [&](const Node::Module& module) {
                submit_module(id, inv, module, placed(id, std::move(values)));
                return false;  // done in the module's actor
              },
              [&](const Node::Switch& sw) {
                const bool taken = truth(values[0], "the predicate");
                const int k = sw.width;
                for (int i = 0; i < k; ++i)
                  check_sendable(*inv->placement, pn.consumers[taken ? i : k + i], values[1 + i], "value " + std::to_string(i));
                for (int i = 0; i < k; ++i) {
                  deliver(pn.consumers[i], inv, taken, taken ? values[1 + i] : Value());
                  deliver(pn.consumers[k + i], inv, !taken, taken ? Value() : values[1 + i]);
                }
                return true;
              },
              [&](const Node::Merge& merge) {
                const int k = merge.width;
                const int branches = k > 0 ? static_cast<int>(values.size()) / k : 0;
                int chosen = -1;
                for (int b = 0; b < branches && chosen < 0; ++b)
                  if (std::all_of(live.begin() + b * k, live.begin() + (b + 1) * k, [](uint8_t l) { return l != 0; }))
                    chosen = b;
                if (chosen < 0) {
                  emit_dead(id, inv);
                } else {
                  emit(id, inv, std::vector<Value>(std::make_move_iterator(values.begin() + chosen * k),
                                                   std::make_move_iterator(values.begin() + (chosen + 1) * k)));
                }
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
    values = {};  // inputs are freed before the invocation can count as done
    scope.reset();  // and the firing recorded: whoever has the results finds it in the profile
    node_done(inv);
  }

  void submit_module(int id, const InvocationPtr& inv, const Node::Module& module, std::vector<Value> values) {
    auto call = [core = shared_from_this(), id, inv, &fn = module.fn, values = std::move(values)]() mutable {
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

  // Runs the loop body once on `state` (iteration `done` iterations in), or ends the loop.
  void iterate(int id, const InvocationPtr& inv, std::vector<Value> state, int64_t done) {
    const auto& loop = std::get<Node::Loop>(plan.nodes[id].node->kind);
    if (done >= loop.max_iterations || inv->stopped.load(std::memory_order_acquire)) {
      if (inv->stopped.load(std::memory_order_acquire)) emit_dead(id, inv);
      else emit(id, inv, std::move(state));
      node_done(inv);
      return;
    }
    ExecutorCore& body = *nodes[id].body;
    body.take_slot(/*wait=*/false);
    InvocationPtr step = body.begin();
    step->on_done = [core = shared_from_this(), id, inv, done](InvocationState& finished) {
      core->after_iteration(id, inv, finished, done + 1);
    };
    body.launch(step, std::move(state));
  }

  void after_iteration(int id, const InvocationPtr& inv, InvocationState& step, int64_t done) {
    const PlanNode& pn = plan.nodes[id];
    try {
      if (step.error) std::rethrow_exception(step.error);
      std::vector<Value> state;
      bool again = true;
      for (size_t k = 0; k < step.outputs.size(); ++k) {
        if (!step.live[k])
          throw ValueError("iteration " + std::to_string(done) + " produced no value for body output '" +
                           nodes[id].body->plan.output_names[k] + "' (its branch was not taken)");
        if (static_cast<int>(k) == pn.continue_output) again = truth(step.outputs[k], "the body's \"continue\" output");
        else state.push_back(std::move(step.outputs[k]));
      }
      if (!again) {
        emit(id, inv, std::move(state));
        node_done(inv);
        return;
      }
      iterate(id, inv, std::move(state), done);
    } catch (...) {
      fail(id, inv, std::current_exception());
      emit_dead(id, inv);
      node_done(inv);
    }
  }

  std::shared_ptr<const Graph> graph;
  ExecutorOptions options;
  Plan plan;
  std::shared_ptr<const std::vector<std::string>> output_names;  // shared with each Invocation
  std::vector<NodeState> nodes;  // actors for the nodes this rank runs (or ran) only
  int fixed_intra_op = 0, cores = 1;
  std::atomic<uint64_t> next_id{1};
  mutable std::mutex mutex;
  std::condition_variable idle;  // in_flight went down
  int in_flight = 0, peak = 0;
  bool served = false;  // rank 0's executor went away (or the link broke): serve() returns

  int rank = 0, world = 1;
  mutable std::mutex placement_mutex;
  std::shared_ptr<const Placement> placement;  // for the invocations to come (guarded by placement_mutex)
  bool heals = false;               // over ranks, every node pure: a lost rank's nodes move (rank_link.h)
  std::shared_mutex launching;      // rank 0: held shared by a run() while it starts, exclusive by a heal
  CapturedPlan::PlacedConstants placed_constants;  // per node and input slot: a constant uploaded once
  std::unique_ptr<CapturedPlan> captured;          // cuda_graph
  std::mutex capture_mutex;                        // one replay at a time: they share the graph's bytes
  // With a process group of more than one rank: this process's remote actors (when the executor
  // made them) and the link to the other ranks' parts.
  std::shared_ptr<net::RemoteActors> remote;
  std::shared_ptr<RankLink> link;
};

}  // namespace troupe::detail

namespace troupe {

uint64_t Invocation::id() const { return state_->id; }

Future<Value>& Invocation::future(std::string_view output) {
  for (size_t k = 0; k < names_->size(); ++k)
    if ((*names_)[k] == output) return futures_[k];
  std::string known;
  for (const auto& n : *names_) known += (known.empty() ? "" : ", ") + n;
  throw ValueError("Invocation: no output named '" + std::string(output) + "' (outputs: " + known + ")");
}

std::map<std::string, Value> Invocation::get_all() {
  for (auto& f : futures_) f.wait();
  std::map<std::string, Value> out;
  for (size_t k = 0; k < futures_.size(); ++k) out.emplace((*names_)[k], futures_[k].get());
  return out;
}

// A heal may have run it again: the reruns are cancelled too (rerun() checks cancel_asked).
void Invocation::cancel() {
  for (detail::InvocationPtr run = state_; run;) {
    detail::ExecutorCore::cancel(*run);
    detail::InvocationPtr next;
    {
      std::lock_guard lock(run->mutex);
      next = run->retry;
    }
    run = std::move(next);
  }
}

bool Invocation::done() const { return detail::latest(state_)->finished.load(std::memory_order_acquire); }

Executor::Executor(const Graph& graph, ExecutorOptions options)
    : core_(detail::ExecutorCore::create(graph, options)) {}

Executor::~Executor() {
  wait_idle();
  if (core_->link) core_->link->close();
  core_->stop();
  core_->remote.reset();  // a RemoteActors made for executors closes with the last of them
}

Invocation Executor::run(std::map<std::string, Value> inputs) {
  const auto& plan = core_->plan;
  if (core_->rank != 0)
    throw ValueError("run: this is rank " + std::to_string(core_->rank) + "; rank 0 runs graph '" + plan.graph +
                     "', the other ranks call serve()");
  if (core_->link) core_->link->check_healthy();
  std::vector<Value> ordered;
  for (size_t k = 0; k < plan.input_names.size(); ++k) {
    const std::string& name = plan.input_names[k];
    auto it = inputs.find(name);
    if (it == inputs.end()) throw ValueError("run: graph '" + plan.graph + "' input '" + name + "' is missing");
    if (const auto& meta = plan.input_metas[k]) {
      auto given = it->second.meta();
      if (!given) throw ValueError("run: graph '" + plan.graph + "' input '" + name + "' must be a tensor " +
                                   meta->str() + ", got " + it->second.type_name());
      if (given->dtype != meta->dtype)
        throw DTypeError("run: graph '" + plan.graph + "' input '" + name + "' must be " + meta->str() + ", got " +
                         given->str());
      if (given->shape != meta->shape)
        throw ShapeError("run: graph '" + plan.graph + "' input '" + name + "' must be " + meta->str() + ", got " +
                         given->str());
    }
    core_->check_sendable(*core_->current_placement(), plan.input_consumers[k], it->second, "run: input '" + name + "'");
    ordered.push_back(std::move(it->second));
    inputs.erase(it);
  }
  if (!inputs.empty()) {
    std::string names;
    for (const auto& n : plan.input_names) names += (names.empty() ? "" : ", ") + n;
    throw ValueError("run: graph '" + plan.graph + "' has no input '" + inputs.begin()->first + "' (inputs: " + names + ")");
  }
  Invocation result;
  if (core_->captured) {
    std::optional<std::vector<Value>> outputs;
    std::exception_ptr error;
    {
      std::lock_guard lock(core_->capture_mutex);
      try {
        outputs = core_->captured->run(ordered);
      } catch (...) {
        error = std::current_exception();
      }
    }
    if (outputs || error) {  // the captured graph ran it: a finished invocation
      result.state_ = core_->make_invocation(core_->next_id.fetch_add(1, std::memory_order_relaxed), 0);
      result.state_->finished.store(true, std::memory_order_release);
      result.names_ = core_->output_names;
      result.state_->promises.resize(plan.output_names.size());
      for (size_t k = 0; k < plan.output_names.size(); ++k) {
        result.futures_.push_back(result.state_->promises[k].future());
        if (error)
          result.state_->promises[k].set_exception(error);
        else
          result.state_->promises[k].set_value(std::move((*outputs)[k]));
      }
      return result;
    }
  }
  core_->take_slot(/*wait=*/true);
  std::shared_lock no_heal(core_->launching);  // a heal waits until this one has started, or it for the heal
  result.state_ = core_->begin();
  result.names_ = core_->output_names;
  result.state_->promises.resize(plan.output_names.size());
  for (auto& p : result.state_->promises) result.futures_.push_back(p.future());
  if (core_->heals) result.state_->inputs = ordered;  // to run it again after a heal
  core_->launch(result.state_, std::move(ordered));
  return result;
}

void Executor::serve() {
  if (core_->rank == 0) throw ValueError("serve: rank 0 runs the graph with run(); the other ranks serve");
  {
    std::unique_lock lock(core_->mutex);
    core_->idle.wait(lock, [&] { return core_->served; });
  }
  core_->link->check_healthy();
}

void Executor::wait_idle() {
  std::unique_lock lock(core_->mutex);
  core_->idle.wait(lock, [&] { return core_->in_flight == 0; });
}

int Executor::in_flight() const {
  std::lock_guard lock(core_->mutex);
  return core_->in_flight;
}

int Executor::peak_in_flight() const {
  std::lock_guard lock(core_->mutex);
  return core_->peak;
}

int Executor::node_actors() const { return core_->current_placement()->local_nodes; }

int Executor::rank_of(std::string_view node) const {
  const auto& nodes = core_->plan.nodes;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (nodes[i].path == node) return core_->current_placement()->ranks[i];
  throw ValueError("rank_of: graph '" + core_->plan.graph + "' has no node '" + std::string(node) + "'");
}

bool Executor::heals() const { return core_->heals; }
const std::vector<std::string>& Executor::input_names() const { return core_->plan.input_names; }
const std::vector<std::string>& Executor::output_names() const { return core_->plan.output_names; }

}  // namespace troupe
