#include "devices/autograd/tape.h"

#include "devices/autograd/backward_registry.h"
#include "devices/autograd/grad_mode.h"
#include "devices/autograd/node.h"

namespace troupe {

namespace detail {

// The one place outside Tensor that sets a tensor's autograd meta.
struct TapeAccess {
  static void set_meta(Tensor& t, std::shared_ptr<AutogradMeta> meta) { t.autograd_ = std::move(meta); }
};

}  // namespace detail

namespace {

using detail::TapeAccess;

SavedTensor save(const Tensor& t) {
  SavedTensor s;
  s.value = t.detach();
  if (const auto& meta = t.autograd_meta()) {
    s.meta = meta;
    s.version = meta->version;
  }
  return s;
}

std::vector<Tensor> attach(std::string_view op, const std::vector<Tensor>& inputs, const Attrs& attrs,
                           std::vector<Tensor> outputs) {
  bool floating_output = false;
  for (Tensor& t : outputs) {
    TapeAccess::set_meta(t, nullptr);  // a kernel may hand back an input's handle
    floating_output = floating_output || (t.defined() && is_floating(t.dtype()));
  }
  if (!floating_output) return outputs;
  auto node = std::make_shared<GradNode>();
  node->op = op;
  node->backward = find_backward(op);
  node->attrs = attrs;
  node->input_metas.reserve(inputs.size());
  node->edges.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    node->input_metas.push_back(inputs[i].meta());
    const auto& meta = inputs[i].autograd_meta();
    if (!meta || !is_floating(inputs[i].dtype())) continue;
    if (meta->grad_fn)
      node->edges[i] = Edge{meta->grad_fn, meta->output_nr, nullptr};
    else
      node->edges[i] = Edge{nullptr, 0, meta};
  }
  if (!node->backward || node->backward->saves_inputs) {
    node->saved_inputs.reserve(inputs.size());
    for (const Tensor& t : inputs) node->saved_inputs.push_back(save(t));
  }
  node->output_metas.reserve(outputs.size());
  for (const Tensor& t : outputs) node->output_metas.push_back(t.meta());
  const bool save_outputs = node->backward && node->backward->saves_outputs;
  if (save_outputs) node->saved_outputs.reserve(outputs.size());
  for (size_t j = 0; j < outputs.size(); ++j) {
    if (save_outputs) node->saved_outputs.push_back(save(outputs[j]));
    if (!is_floating(outputs[j].dtype())) continue;
    auto meta = std::make_shared<AutogradMeta>();
    meta->grad_fn = node;
    meta->output_nr = static_cast<uint32_t>(j);
    TapeAccess::set_meta(outputs[j], meta);
    if (save_outputs) node->saved_outputs[j].meta = meta;
  }
  return outputs;
}

}  // namespace

std::vector<Tensor> record_call(std::string_view op, const std::vector<Tensor>& inputs, const Attrs& attrs,
                                const std::function<std::vector<Tensor>()>& run) {
  std::vector<Tensor> outputs;
  {
    NoGradGuard no_grad;
    outputs = run();
  }
  return attach(op, inputs, attrs, std::move(outputs));
}

Tensor record_method(std::string_view op, const Tensor& x, const Attrs& attrs,
                     const std::function<Tensor(const Tensor&)>& fn) {
  Tensor y;
  {
    NoGradGuard no_grad;
    y = fn(x.detach());
  }
  return attach(op, {x}, attrs, {y})[0];
}

void drop_autograd(std::vector<Tensor>& outputs) {
  for (Tensor& t : outputs)
    if (t.autograd_meta()) TapeAccess::set_meta(t, nullptr);
}

}  // namespace troupe
