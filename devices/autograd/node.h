#pragma once
// The tape: what a tensor handle knows about its gradient (AutogradMeta) and the recorded op calls
// (GradNode) that backward() walks. Users rarely touch these; see devices/autograd/autograd.h.
//
//   Tensor y = mul(x, w);                       // w requires grad: y's meta points at a "mul" GradNode
//   y.autograd_meta()->grad_fn->op;             // "mul"
#include <cstdint>
#include <functional>
#include <memory>
#include <string_view>
#include <vector>

#include "devices/attrs.h"
#include "devices/tensor.h"

namespace troupe {

struct BackwardDef;
struct GradNode;

// Shared by every copy of one tensor handle (copies made after requires_grad was set or after
// the op that produced it): the flag, the accumulated gradient, the producing node and a version
// counter that every write through mutable_data() bumps.
struct AutogradMeta {
  bool requires_grad = false;         // a leaf the user asked gradients for
  Tensor grad;                        // accumulated by backward() (leaves); undefined: none
  std::shared_ptr<GradNode> grad_fn;  // the op call that produced this tensor; null for leaves
  uint32_t output_nr = 0;             // which output of grad_fn
  uint64_t version = 0;
  // Leaves: called each time backward() has added a gradient into grad, so data-parallel training
  // can start reducing a parameter's gradient while backward goes on (models/train/gradient_reducer.h).
  std::function<void()> grad_accumulated;
};

// Where the gradient of one input goes: the node that produced it, or a leaf's meta.
struct Edge {
  std::shared_ptr<GradNode> node;
  uint32_t output_nr = 0;
  std::shared_ptr<AutogradMeta> leaf;
};

// A tensor kept for backward: its value (no autograd meta, so no cycles) and the version its
// handle had, checked when backward reads it.
struct SavedTensor {
  Tensor value;
  std::weak_ptr<AutogradMeta> meta;
  uint64_t version = 0;
};

// One recorded op call.
struct GradNode {
  std::string_view op;             // registry names and method names live as long as the process
  const BackwardDef* backward = nullptr;  // null: the op has no backward (an error if reached)
  Attrs attrs;
  std::vector<TensorMeta> input_metas;
  std::vector<TensorMeta> output_metas;
  std::vector<SavedTensor> saved_inputs;   // empty unless the backward needs them
  std::vector<SavedTensor> saved_outputs;  // likewise
  std::vector<Edge> edges;                 // one per input; empty Edge: no gradient wanted
  bool released = false;                   // saved tensors freed by a backward pass
};

}  // namespace troupe
