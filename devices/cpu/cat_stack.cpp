// cat: joins tensors along an existing dim; stack: along a new one (stack == cat of unsqueezed inputs).
// Both move elements as bytes, so every dtype is handled by one loop.
#include <cstring>

#include "devices/registry.h"

namespace troupe {
namespace {

// Copies inputs (already shaped like the output except in dim) into out along dim: for each
// index of the dims before dim, each input contributes one contiguous run of bytes.
Tensor concatenate(const std::vector<Tensor>& inputs, int64_t dim, const TensorMeta& meta) {
  Tensor out = Tensor::empty(meta.shape, meta.dtype);
  if (out.numel() == 0) return out;
  auto* dst = static_cast<char*>(out.mutable_raw_data());
  const size_t item = itemsize(meta.dtype);
  int64_t outer = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= meta.shape[d];
  const size_t out_row = static_cast<size_t>(out.numel() / outer) * item;

  size_t column = 0;  // where this input's run starts within an output row, in bytes
  for (const Tensor& input : inputs) {
    const Tensor src = input.contiguous();
    const size_t run = static_cast<size_t>(src.numel() / outer) * item;
    const auto* from = static_cast<const char*>(src.raw_data());
    for (int64_t o = 0; o < outer; ++o) std::memcpy(dst + o * out_row + column, from + o * run, run);
    column += run;
  }
  return out;
}

std::vector<Tensor> cat_cpu(const OpCall& c) {
  const int64_t dim = wrap_dim("cat", c.attrs.get<int64_t>("dim"), c.inputs[0].dim());
  return {concatenate(c.inputs, dim, c.outputs[0])};
}

std::vector<Tensor> stack_cpu(const OpCall& c) {
  const int64_t dim = wrap_dim("stack", c.attrs.get<int64_t>("dim"), c.inputs[0].dim() + 1);
  std::vector<Tensor> unsqueezed;
  unsqueezed.reserve(c.inputs.size());
  for (const Tensor& t : c.inputs) unsqueezed.push_back(t.unsqueeze(dim));
  return {concatenate(unsqueezed, dim, c.outputs[0])};
}

const OpRegistrar cat_kernel{"cat", DeviceType::cpu, cat_cpu};
const OpRegistrar stack_kernel{"stack", DeviceType::cpu, stack_cpu};

}  // namespace
}  // namespace troupe
