#pragma once
// Recording op calls on the tape. The registry's call() and the Tensor view methods come here
// when grad mode is on and an input requires grad; nothing else needs to.
//
//   if (grad_enabled() && any_requires_grad(inputs)) return record_call(def.name, inputs, attrs, run);
#include <functional>
#include <string_view>
#include <vector>

#include "devices/attrs.h"
#include "devices/tensor.h"

namespace troupe {

inline bool any_requires_grad(const std::vector<Tensor>& inputs) {
  for (const Tensor& t : inputs)
    if (t.autograd_meta()) return true;
  return false;
}

// Runs `run` with grad mode off and, when a floating output results, attaches a GradNode for `op` to
// the outputs. `op` must outlive the process's tapes (a registry name or a literal).
std::vector<Tensor> record_call(std::string_view op, const std::vector<Tensor>& inputs, const Attrs& attrs,
                                const std::function<std::vector<Tensor>()>& run);

// The same for a Tensor method computing one view or copy of x: fn runs on x without autograd.
Tensor record_method(std::string_view op, const Tensor& x, const Attrs& attrs,
                     const std::function<Tensor(const Tensor&)>& fn);

// Outputs of an unrecorded call must not share an input's meta (a kernel may return its input).
void drop_autograd(std::vector<Tensor>& outputs);

}  // namespace troupe
