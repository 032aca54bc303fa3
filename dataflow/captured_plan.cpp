#include "dataflow/captured_plan.h"

#include "devices/error.h"

namespace troupe::detail {

namespace {

// Every input's dtype and shape, when all are defined tensors.
std::optional<std::vector<TensorMeta>> metas_of(const std::vector<Value>& inputs) {
  std::vector<TensorMeta> metas;
  for (const Value& v : inputs) {
    if (!v.is_tensor() || !v.tensor().defined()) return std::nullopt;
    metas.push_back({v.tensor().dtype(), v.tensor().shape(), Device::cpu()});
  }
  return metas;
}

}  // namespace

CapturedPlan::CapturedPlan(const Plan& plan, const PlacedConstants& constants) : plan_(plan), constants_(constants) {
  std::optional<Device> device;
  for (const PlanNode& pn : plan.nodes) {
    const Node& n = *pn.node;
    if (!n.is<Node::Op>() && !n.is<Node::Call>())
      throw ValueError("Executor: cuda_graph: node '" + pn.path + "' is a " + what_runs(n) +
                       " node; a captured graph holds only ops and calls");
    if (!n.device || n.device->is_cpu() || (device && *n.device != *device))
      throw ValueError("Executor: cuda_graph: node '" + pn.path + "' runs on " + (n.device ? n.device->str() : "cpu") +
                       "; every node of a captured graph must be placed on one CUDA device (.on(Device::cuda(i)))" +
                       (device ? ", here " + device->str() : ""));
    device = n.device;
  }
  if (!device) throw ValueError("Executor: cuda_graph: graph '" + plan.graph + "' has no nodes to capture");
  device_ = *device;
  lane_ = Lane::make(device_, plan.graph + " (CUDA graph)");
}

CapturedPlan::~CapturedPlan() {
  static_outputs_.clear();  // arena blocks: dropped while the arena lives, which then frees them all
  work_.reset();
  static_inputs_.clear();
}

std::vector<Value> CapturedPlan::run_in_order(const std::vector<Value>& inputs) const {
  std::vector<std::vector<Value>> produced(plan_.nodes.size());
  auto value_at = [&](const Source& s, int node, int slot) -> Value {
    switch (s.kind) {
      case Source::input: return inputs[s.index];
      case Source::constant: {
        const auto& placed = constants_[node];
        if (static_cast<size_t>(slot) < placed.size() && placed[slot]) return *placed[slot];
        return plan_.constants[s.index];
      }
      case Source::node: return produced[s.index][s.port];
      case Source::none: break;
    }
    return Value();
  };
  for (int id : plan_.order) {
    const PlanNode& pn = plan_.nodes[id];
    std::vector<Value> args;
    for (size_t slot = 0; slot < pn.inputs.size(); ++slot) {
      Value v = value_at(pn.inputs[slot], id, static_cast<int>(slot));
      if (v.is_tensor() && v.tensor().defined() && v.tensor().device() != device_) v = v.tensor().to(device_);
      args.push_back(std::move(v));
    }
    if (pn.def) {
      std::vector<Tensor> tensors;
      for (const Value& v : args) tensors.push_back(v.tensor());
      std::vector<Tensor> outs = OpRegistry::global().call(*pn.def, tensors, pn.attrs);
      produced[id].assign(outs.begin(), outs.end());
    } else {
      produced[id] = pn.node->as<Node::Call>()->fn(args);
    }
  }
  std::vector<Value> outputs;
  for (size_t k = 0; k < plan_.output_sources.size(); ++k) outputs.push_back(value_at(plan_.output_sources[k], -1, -1));
  return outputs;
}

std::optional<std::vector<Value>> CapturedPlan::run(const std::vector<Value>& inputs) {
  const auto metas = metas_of(inputs);
  if (!metas || (work_ && *metas != metas_)) return std::nullopt;  // other shapes: the actors run them
  LaneGuard on(*lane_);
  if (!work_) {
    metas_ = *metas;
    for (const Value& v : inputs) {
      Tensor s = Tensor::empty(v.tensor().shape(), v.tensor().dtype(), device_);
      copy_into(s, v.tensor());
      static_inputs_.push_back(std::move(s));
    }
    std::vector<Value> statics(static_inputs_.begin(), static_inputs_.end());
    // An ordinary run first: it gives this invocation's outputs, warms every library's handles and
    // algorithm choices (none of which may be made inside a capture), and measures the arena.
    std::vector<Value> outputs;
    const size_t bytes = measure_device_allocations(device_, [&] { outputs = run_in_order(statics); });
    work_ = CapturedWork::capture(*lane_, bytes, [&] { static_outputs_ = run_in_order(statics); });
    const Event done = lane_->record();
    for (Value& v : outputs)
      if (v.is_tensor() && v.tensor().defined()) v.tensor().storage()->set_ready(done);
    return outputs;
  }
  for (size_t k = 0; k < inputs.size(); ++k) copy_into(static_inputs_[k], inputs[k].tensor());
  work_->replay();
  // The outputs leave the arena: the next replay rewrites it.
  std::vector<Value> outputs;
  for (const Value& v : static_outputs_) outputs.push_back(v.is_tensor() && v.tensor().defined() ? Value(v.tensor().clone()) : v);
  const Event done = lane_->record();
  for (Value& v : outputs)
    if (v.is_tensor() && v.tensor().defined()) v.tensor().storage()->set_ready(done);
  return outputs;
}

}  // namespace troupe::detail
