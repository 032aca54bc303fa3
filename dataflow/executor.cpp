// The public face of the executor (executor.h): run() checks the inputs, replays a captured CUDA
// graph when one serves, else takes an in-flight slot and launches the invocation on the node
// actors; the rest reads the core's state. What the core does is in executor_core.h's files.
#include "dataflow/executor.h"

#include <optional>

#include "dataflow/executor_core.h"
#include "devices/error_kinds.h"

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
