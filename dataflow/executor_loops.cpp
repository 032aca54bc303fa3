// A loop node: its body is an executor of its own (made in prepare). Each iteration is one
// invocation of the body on the state so far; the body's "continue" output says whether another
// follows, and max_iterations bounds them. The loop's outputs are the last state.
#include "dataflow/executor_core.h"
#include "devices/error_kinds.h"

namespace troupe::detail {

// Runs the loop body once on `state` (iteration `done` iterations in), or ends the loop.
void ExecutorCore::iterate(int id, const InvocationPtr& inv, std::vector<Value> state, int64_t done) {
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

void ExecutorCore::after_iteration(int id, const InvocationPtr& inv, InvocationState& step, int64_t done) {
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

}  // namespace troupe::detail
