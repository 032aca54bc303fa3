// index_select: picks entries of x along one dim by a 1-d index (torch.index_select);
// embedding: picks rows of a [V, D] weight by indices of any shape (torch.nn.functional.embedding).
// Indices must lie in [0, size): negative ones are out of range, as in PyTorch.
// Both copy whole contiguous runs of bytes, so every dtype is handled by one loop.
#include <cstring>

#include "devices/registry.h"

namespace troupe {
namespace {

// Every index as int64 in row-major order; IndexError naming the first one outside [0, size).
std::vector<int64_t> checked_indices(std::string_view op, const Tensor& index, int64_t size, const std::string& where) {
  std::vector<int64_t> values = index.to_vector<int64_t>();
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i] < 0 || values[i] >= size)
      throw IndexError(std::string(op) + ": index " + std::to_string(values[i]) + " at position " +
                       std::to_string(i) + " is out of range for " + where + " of size " + std::to_string(size));
  return values;
}

// out[o, j, :] = x[o, index[j], :] over the flattened dims before (o) and after (:) the picked dim.
Tensor gather_runs(const Tensor& x, int64_t dim, const std::vector<int64_t>& index, const TensorMeta& meta) {
  Tensor out = Tensor::empty(meta.shape, meta.dtype);
  if (out.numel() == 0) return out;
  const Tensor src = x.contiguous();
  int64_t outer = 1;
  for (int64_t d = 0; d < dim; ++d) outer *= src.shape()[d];
  const int64_t rows = src.shape()[dim];
  const size_t run = static_cast<size_t>(src.numel() / (outer * rows)) * itemsize(src.dtype());
  const auto* from = static_cast<const char*>(src.raw_data());
  auto* to = static_cast<char*>(out.mutable_raw_data());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i : index) {
      std::memcpy(to, from + (o * rows + i) * run, run);
      to += run;
    }
  return out;
}

std::vector<Tensor> index_select_cpu(const OpCall& c) {
  const Tensor& x = c.inputs[0];
  const int64_t dim = wrap_dim("index_select", c.attrs.get<int64_t>("dim"), x.dim());
  const auto index = checked_indices(c.op, c.inputs[1], x.shape()[dim],
                                     "dim " + std::to_string(dim) + " of " + x.meta().str());
  return {gather_runs(x, dim, index, c.outputs[0])};
}

std::vector<Tensor> embedding_cpu(const OpCall& c) {
  const Tensor& weight = c.inputs[1];
  const auto index = checked_indices(c.op, c.inputs[0], weight.shape()[0], "the rows of weight " + weight.meta().str());
  return {gather_runs(weight, 0, index, c.outputs[0])};
}

const OpRegistrar index_select_kernel{"index_select", DeviceType::cpu, index_select_cpu};
const OpRegistrar embedding_kernel{"embedding", DeviceType::cpu, embedding_cpu};

}  // namespace
}  // namespace troupe
