#pragma once
// Backward functions, keyed by op name, beside the forward registry: the tape looks an op's entry
// up when it records a call. Each file under devices/autograd/ registers the backward of a family
// of ops:
//
//   static BackwardRegistrar neg_backward{{"neg", [](const BackwardCall& c) {
//     return std::vector<Tensor>{neg(c.grads[0])};
//   }, /*saves_inputs=*/false}};
#include <string>
#include <string_view>
#include <vector>

#include "devices/attrs.h"
#include "devices/tensor.h"

namespace troupe {

// What a backward function sees. Grad mode is off while it runs.
struct BackwardCall {
  std::string_view op;
  const Attrs& attrs;                           // as the forward call had them (defaults filled in)
  const std::vector<TensorMeta>& input_metas;
  const std::vector<Tensor>& inputs;            // forward inputs (empty unless saves_inputs)
  const std::vector<Tensor>& outputs;           // forward outputs (empty unless saves_outputs)
  const std::vector<Tensor>& grads;             // one per output; zeros where none arrived; undefined
                                                // for integer outputs
  const std::vector<bool>& needs;               // which inputs want a gradient
};

// Returns one gradient per input (undefined where none is wanted or none exists), each of the
// input's shape; the engine converts dtypes.
using BackwardFn = std::vector<Tensor> (*)(const BackwardCall&);

struct BackwardDef {
  std::string op;
  BackwardFn fn = nullptr;
  bool saves_inputs = true;
  bool saves_outputs = false;
  // op names a Tensor method that records itself on the tape (tensor.cpp: slice, select, ...),
  // which need not be a registry op too.
  bool tensor_method = false;
};

void define_backward(BackwardDef def);                  // ValueError when op already has one
const BackwardDef* find_backward(std::string_view op);  // nullptr when none
std::vector<BackwardDef> backward_defs();               // every one defined, by op name

struct BackwardRegistrar {
  explicit BackwardRegistrar(BackwardDef def) { define_backward(std::move(def)); }
};

}  // namespace troupe
