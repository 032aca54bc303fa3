// The node actors of an executor on this rank: one CAF actor per node this rank runs, made when
// the executor is (and when a heal moves a node here), each with what it needs besides: a loop's
// body executor, a lane (a CUDA stream) for a node placed on a GPU, and the constants it reads
// uploaded to its device once rather than at every invocation.
#include <algorithm>

#include "actors/handoff.h"
#include "actors/runtime.h"
#include "dataflow/executor_core.h"
#include "devices/error_kinds.h"
#include "devices/threads.h"
#include "net/process_group.h"

namespace troupe::detail {

namespace {

bool runs_on_lane(const Node& n) { return n.is<Node::Op>() || n.is<Node::Call>(); }

}  // namespace

ExecutorCore::ExecutorCore(const Graph& g, ExecutorOptions opts) : graph(std::make_shared<const Graph>(g)), options(opts) {
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

// What a node of this rank needs besides its actor: a loop's body, a lane on a device, and the
// constants it reads uploaded to its device once, not at every invocation.
void ExecutorCore::prepare(int i) {
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

ExecutorCore::~ExecutorCore() {
  for (auto& n : nodes)
    if (n.body) n.body->stop();
}

std::shared_ptr<ExecutorCore> ExecutorCore::create(const Graph& g, ExecutorOptions opts) {
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

std::shared_ptr<const Placement> ExecutorCore::current_placement() const {
  std::lock_guard lock(placement_mutex);
  return placement;
}

void ExecutorCore::spawn_actors() {
  for (size_t i = 0; i < nodes.size(); ++i)
    if (placement->local(static_cast<int>(i))) spawn(static_cast<int>(i));
}

void ExecutorCore::spawn(int i) {
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

void ExecutorCore::stop() {
  for (auto& n : nodes)
    if (n.actor) caf::anon_send_exit(n.actor, caf::exit_reason::user_shutdown);
}

}  // namespace troupe::detail
