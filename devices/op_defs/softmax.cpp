// softmax and log_softmax along one dim.
// Kernels: devices/cpu/softmax.cpp, devices/cuda/softmax.cu.
#include <string>

#include "devices/registry.h"

namespace troupe {

namespace {

std::vector<TensorMeta> infer_softmax(const OpInfer& c) {
  const TensorMeta& x = c.inputs[0];
  const std::string op(c.op);
  if (!is_floating(x.dtype))
    throw DTypeError(op + ": needs a floating tensor, got " + x.str() + " (convert it with to(f32) first)");
  wrap_dim(op.c_str(), c.attrs.get<int64_t>("dim"), static_cast<int64_t>(x.shape.size()));
  return {x};
}

std::vector<AttrSpec> softmax_attrs() { return {{"dim", AttrType::integer, int64_t{-1}, "the dim to normalise"}}; }

const OpRegistrar softmax_op{OpDef{.name = "softmax",
                                   .doc = "exp(x) / sum(exp(x)) along dim (floating tensors)",
                                   .attrs = softmax_attrs(),
                                   .infer = infer_softmax}};

const OpRegistrar log_softmax_op{OpDef{.name = "log_softmax",
                                       .doc = "x - log(sum(exp(x))) along dim (floating tensors)",
                                       .attrs = softmax_attrs(),
                                       .infer = infer_softmax}};

}  // namespace
}  // namespace troupe
