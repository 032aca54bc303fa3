// backward(): walks the nodes reachable from a tensor in dependency order (a node runs once every
// node that feeds it a gradient has run), summing the gradients that reach each output and each
// leaf. Grad mode is off throughout: backward functions build no tape.
#include <unordered_map>

#include "devices/autograd/backward_registry.h"
#include "devices/autograd/grad_mode.h"
#include "devices/autograd/node.h"
#include "devices/ops.h"
#include "devices/registry.h"

namespace troupe {

namespace {

// a += b, in place when a's bytes are its own (the common case), else through the add op.
void accumulate(Tensor& a, const Tensor& b) {
  if (!a.defined()) {
    a = b.contiguous();
    return;
  }
  if (a.dtype() == b.dtype() && b.is_contiguous() && a.shape() == b.shape() &&
      (a.dtype() == DType::f32 || a.dtype() == DType::f64)) {
    dispatch(a.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_floating_point_v<T>) {
        T* pa = a.mutable_data<T>();
        const T* pb = b.data<T>();
        for (int64_t i = 0, n = a.numel(); i < n; ++i) pa[i] += pb[i];
      }
    });
    return;
  }
  a = add(a, b);
}

void accumulate_leaf(AutogradMeta& leaf, const Tensor& grad) {
  Tensor g = grad;
  accumulate(leaf.grad, g);
  if (leaf.grad_accumulated) leaf.grad_accumulated();
}

std::vector<Tensor> unpack(const GradNode& node, const std::vector<SavedTensor>& saved, const char* what) {
  std::vector<Tensor> values;
  values.reserve(saved.size());
  for (size_t i = 0; i < saved.size(); ++i) {
    if (auto meta = saved[i].meta.lock(); meta && meta->version != saved[i].version)
      throw ValueError(std::string(node.op) + ": " + what + " " + std::to_string(i) + " (" +
                       saved[i].value.meta().str() + "), saved for backward, was modified in place afterwards " +
                       "(version " + std::to_string(saved[i].version) + ", now " + std::to_string(meta->version) +
                       "); compute it anew or clone it before modifying it");
    values.push_back(saved[i].value);
  }
  return values;
}

std::vector<Tensor> run_node(GradNode& node, std::vector<Tensor>& grads) {
  if (!node.backward) {
    const OpRegistry& registry = OpRegistry::global();
    const std::string why = registry.contains(node.op) && !registry.get(node.op).differentiable()
                                ? " (not differentiable: " + registry.get(node.op).not_differentiable + ")"
                                : "";
    throw ValueError(std::string(node.op) + ": no backward is defined for this op" + why +
                     ", so gradients cannot flow through it (detach its inputs, or compute it under NoGradGuard)");
  }
  if (node.released)
    throw ValueError(std::string(node.op) + ": backward through this part of the graph a second time; its saved "
                     "tensors were freed by the first pass (pass retain_graph = true to the first backward)");
  for (size_t j = 0; j < grads.size(); ++j) {
    const TensorMeta& m = node.output_metas[j];
    if (!grads[j].defined() && is_floating(m.dtype)) grads[j] = Tensor::zeros(m.shape, m.dtype, m.device);
  }
  const std::vector<Tensor> inputs = unpack(node, node.saved_inputs, "input");
  const std::vector<Tensor> outputs = unpack(node, node.saved_outputs, "output");
  std::vector<bool> needs(node.edges.size());
  for (size_t i = 0; i < needs.size(); ++i) needs[i] = node.edges[i].node || node.edges[i].leaf;
  std::vector<Tensor> result =
      node.backward->fn(BackwardCall{node.op, node.attrs, node.input_metas, inputs, outputs, grads, needs});
  if (result.size() != node.edges.size())
    throw ValueError(std::string(node.op) + ": backward returned " + std::to_string(result.size()) +
                     " gradients for " + std::to_string(node.edges.size()) + " inputs");
  for (size_t i = 0; i < result.size(); ++i) {
    if (!needs[i] || !result[i].defined()) continue;
    const TensorMeta& m = node.input_metas[i];
    if (result[i].shape() != m.shape)
      throw ShapeError(std::string(node.op) + ": backward gave a gradient " + result[i].meta().str() +
                       " for input " + std::to_string(i) + " " + m.str());
    if (result[i].dtype() != m.dtype) result[i] = result[i].to(m.dtype);
  }
  return result;
}

void release(GradNode& node) {
  node.saved_inputs.clear();
  node.saved_outputs.clear();
  node.saved_inputs.shrink_to_fit();
  node.saved_outputs.shrink_to_fit();
  node.released = true;
}

}  // namespace

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  if (!defined()) throw ValueError("backward: the tensor is undefined");
  if (!autograd_)
    throw ValueError("backward: " + meta().str() + " does not require grad (no input of the ops that made it "
                     "requires grad, or it was computed under NoGradGuard)");
  Tensor root_grad;
  if (gradient.defined()) {
    if (gradient.shape() != shape_)
      throw ShapeError("backward: the gradient " + gradient.meta().str() + " does not match the tensor " +
                       meta().str());
    root_grad = gradient.detach().to(dtype_);
  } else {
    if (numel() != 1)
      throw ShapeError("backward: a gradient can be implied only for a tensor of one element, got " + meta().str() +
                       " (pass the gradient)");
    root_grad = Tensor::ones(shape_, dtype_, device());
  }
  NoGradGuard no_grad;
  if (!autograd_->grad_fn) {
    accumulate_leaf(*autograd_, root_grad);
    return;
  }
  // Dependencies: how many edges from reachable nodes point at each node.
  std::unordered_map<GradNode*, int> pending;
  std::vector<GradNode*> stack{autograd_->grad_fn.get()};
  pending[stack[0]] = 0;
  while (!stack.empty()) {
    GradNode* node = stack.back();
    stack.pop_back();
    for (const Edge& e : node->edges) {
      if (!e.node) continue;
      auto [it, fresh] = pending.try_emplace(e.node.get(), 0);
      ++it->second;
      if (fresh) stack.push_back(e.node.get());
    }
  }
  std::unordered_map<GradNode*, std::vector<Tensor>> buffers;
  auto buffer_of = [&](GradNode* node) -> std::vector<Tensor>& {
    auto& b = buffers[node];
    if (b.empty()) b.resize(node->output_metas.size());
    return b;
  };
  buffer_of(autograd_->grad_fn.get())[autograd_->output_nr] = root_grad;
  std::vector<std::shared_ptr<GradNode>> ready{autograd_->grad_fn};
  while (!ready.empty()) {
    std::shared_ptr<GradNode> node = std::move(ready.back());
    ready.pop_back();
    std::vector<Tensor> grads = std::move(buffer_of(node.get()));
    buffers.erase(node.get());
    bool any = false;
    for (const Tensor& g : grads) any = any || g.defined();
    std::vector<Tensor> result;
    if (any) {
      result = run_node(*node, grads);
      if (!retain_graph) release(*node);
    }
    for (size_t i = 0; i < node->edges.size(); ++i) {
      const Edge& e = node->edges[i];
      const bool has = any && i < result.size() && result[i].defined();
      if (e.leaf) {
        if (has) accumulate_leaf(*e.leaf, result[i]);
      } else if (e.node) {
        if (has) accumulate(buffer_of(e.node.get())[e.output_nr], result[i]);
        if (--pending[e.node.get()] == 0) ready.push_back(e.node);
      }
    }
  }
}

}  // namespace troupe
