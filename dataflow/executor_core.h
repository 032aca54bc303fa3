#pragma once
// ExecutorCore: what an Executor (executor.h) is made of on one rank. Internal to the executor.
//
// Its jobs live in files of their own, each opening with what it does:
//   executor_core.cpp         the node actors: made once, one per node this rank runs, with a
//                             device lane and constants uploaded for nodes placed on a GPU
//   executor_invocations.cpp  an invocation's life: an in-flight slot, start, count-down, finish
//   executor_routing.cpp      a value to its readers: node actors here, the part of another rank
//   executor_fire.cpp         a node fires when its inputs are in: one small function per kind
//   executor_loops.cpp        a loop node runs its body executor until "continue" says no
//   executor_healing.cpp      a lost rank's nodes move to the survivors; in-flight runs rerun
#include <atomic>
#include <caf/all.hpp>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "dataflow/captured_plan.h"
#include "dataflow/executor.h"
#include "dataflow/invocation_state.h"
#include "dataflow/placement.h"
#include "dataflow/plan.h"
#include "dataflow/rank_link.h"
#include "devices/lane.h"

namespace troupe::net {
class RemoteActors;
}

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

struct ExecutorCore final : std::enable_shared_from_this<ExecutorCore>, RankLink::Scheduler {
  struct Pending {  // a node's inputs of one invocation, until all have arrived
    std::vector<Value> values;
    std::vector<uint8_t> live;
    int arrived = 0;
  };
  struct NodeState {
    caf::actor actor;
    std::shared_ptr<ExecutorCore> body;             // loop nodes
    std::unordered_map<uint64_t, Pending> pending;  // touched by the node's actor only
    std::unique_ptr<Lane> lane;                     // a node on a GPU: its stream, its kernels' order
  };

  // ---- the node actors (executor_core.cpp) ----
  ExecutorCore(const Graph& g, ExecutorOptions opts);
  ~ExecutorCore();
  static std::shared_ptr<ExecutorCore> create(const Graph& g, ExecutorOptions opts);
  void prepare(int i);
  void spawn_actors();
  void spawn(int i);
  void stop();
  std::shared_ptr<const Placement> current_placement() const;

  // ---- an invocation's life (executor_invocations.cpp) ----
  void take_slot(bool wait);
  InvocationPtr begin();
  InvocationPtr make_invocation(uint64_t id, int acks) override;
  InvocationPtr make_invocation(uint64_t id, std::shared_ptr<const Placement> where, bool acked);
  void launch(const InvocationPtr& inv, std::vector<Value> inputs);
  void launch_local(const InvocationPtr& inv) override;
  void set_output(InvocationState& inv, int k, bool live, Value v);
  void node_done(const InvocationPtr& inv) override;
  void complete(const InvocationPtr& inv) override;
  void finish(const InvocationPtr& inv) override;
  static void cancel(InvocationState& inv);

  // ---- values to their readers (executor_routing.cpp) ----
  void deliver(const std::vector<Target>& targets, const InvocationPtr& inv, bool live, Value value);
  void hand(const Target& t, const InvocationPtr& inv, bool live, Value v);
  void send_elsewhere(const std::vector<Target>& targets, const InvocationPtr& inv, bool live, const Value& value);
  void deliver_local(const InvocationPtr& inv, const std::vector<Target>& targets,
                     std::optional<Tensor> value) override;
  void emit(int id, const InvocationPtr& inv, std::vector<Value> outs);
  void emit_dead(int id, const InvocationPtr& inv);
  void check_sendable(const Placement& where, const std::vector<Target>& targets, const Value& v,
                      const std::string& what) const;

  // ---- firing nodes (executor_fire.cpp) ----
  void receive(int id, Deliver& d);
  void fire(int id, const InvocationPtr& inv, std::vector<Value> values, std::vector<uint8_t> live);
  void fire_op(int id, const InvocationPtr& inv, std::vector<Value> values);
  void fire_call(int id, const InvocationPtr& inv, const Node::Call& call, std::vector<Value> values);
  void fire_module(int id, const InvocationPtr& inv, const Node::Module& module, std::vector<Value> values);
  void fire_switch(int id, const InvocationPtr& inv, const Node::Switch& sw, const std::vector<Value>& values);
  void fire_merge(int id, const InvocationPtr& inv, const Node::Merge& merge, std::vector<Value> values,
                  const std::vector<uint8_t>& live);
  std::vector<Value> placed(int id, std::vector<Value> values) const;
  std::string where(int id) const;
  void fail(int id, const InvocationPtr& inv, std::exception_ptr e);
  // A predicate's value as a bool: a bool or a one-element tensor (ValueError naming `what`).
  static bool truth(const Value& v, const std::string& what);

  // ---- loops (executor_loops.cpp) ----
  void iterate(int id, const InvocationPtr& inv, std::vector<Value> state, int64_t done);
  void after_iteration(int id, const InvocationPtr& inv, InvocationState& step, int64_t done);

  // ---- healing after a lost rank (executor_healing.cpp; rank_link.h drives it) ----
  std::vector<int> placement_without(const std::vector<uint8_t>& lost) override;
  void adopt(const std::vector<int>& ranks) override;
  std::unique_lock<std::shared_mutex> hold_launches() override;
  uint64_t next_invocation() const override;
  void rerun(const InvocationPtr& old) override;
  void driver_gone() override;

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
