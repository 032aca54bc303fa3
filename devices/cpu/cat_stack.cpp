// cat: joins tensors along an existing dim; stack: along a new one (stack == cat of unsqueezed inputs).
// Both move elements as bytes, so every dtype is handled by one loop.
#include <cstring>

#include "devices/registry.h"

namespace troupe {
namespace {

// Checks that every input has input 0's dtype and, except in dim `skip` (-1: none), its shape.
void check_alike(const OpInfer& c, int64_t skip) {
  const TensorMeta& first = c.inputs[0];
  for (size_t i = 1; i < c.inputs.size(); ++i) {
    const TensorMeta& other = c.inputs[i];
    if (other.dtype != first.dtype)
      throw DTypeError(std::string(c.op) + ": input " + std::to_string(i) + " is " + other.str() +
                       " but input 0 is " + first.str() + " (dtypes must match)");
    bool same = other.shape.size() == first.shape.size();
    for (size_t d = 0; same && d < first.shape.size(); ++d)
      same = static_cast<int64_t>(d) == skip || other.shape[d] == first.shape[d];
    if (!same)
      throw ShapeError(std::string(c.op) + ": input " + std::to_string(i) + " " + other.str() +
                       " does not match input 0 " + first.str() +
                       (skip >= 0 ? " outside dim " + std::to_string(skip) : std::string()));
  }
}

std::vector<TensorMeta> infer_cat(const OpInfer& c) {
  const TensorMeta& first = c.inputs[0];
  const int64_t rank = static_cast<int64_t>(first.shape.size());
  if (rank == 0) throw ShapeError("cat: cannot concatenate 0-d tensors (" + first.str() + "); use stack");
  const int64_t dim = wrap_dim("cat", c.attrs.get<int64_t>("dim"), rank);
  check_alike(c, dim);
  TensorMeta out = first;
  out.shape[dim] = 0;
  for (const TensorMeta& m : c.inputs) out.shape[dim] += m.shape[dim];
  return {out};
}

std::vector<TensorMeta> infer_stack(const OpInfer& c) {
  const TensorMeta& first = c.inputs[0];
  const int64_t rank = static_cast<int64_t>(first.shape.size());
  const int64_t dim = wrap_dim("stack", c.attrs.get<int64_t>("dim"), rank + 1);
  check_alike(c, -1);
  TensorMeta out = first;
  out.shape.insert(out.shape.begin() + dim, static_cast<int64_t>(c.inputs.size()));
  return {out};
}

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

const OpRegistrar cat_op{OpDef{
    .name = "cat",
    .doc = "joins tensors of one dtype along an existing dim; other dims must match",
    .min_inputs = 1,
    .max_inputs = -1,
    .attrs = {{"dim", AttrType::integer, int64_t{0}, "the dim to join along (negative counts from the end)"}},
    .infer = infer_cat,
    .kernels = {{DeviceType::cpu, cat_cpu}}}};

const OpRegistrar stack_op{OpDef{
    .name = "stack",
    .doc = "joins tensors of one shape and dtype along a new dim",
    .min_inputs = 1,
    .max_inputs = -1,
    .attrs = {{"dim", AttrType::integer, int64_t{0}, "where the new dim goes (0..rank, negative counts from the end)"}},
    .infer = infer_stack,
    .kernels = {{DeviceType::cpu, stack_cpu}}}};

}  // namespace
}  // namespace troupe
