// Backward of the reductions: the gradient spread back over the reduced dims (divided by the count
// for mean; for max and min, to the elements that were the extreme).
#include "devices/autograd/backward_registry.h"
#include "devices/autograd/grad_utils.h"

namespace troupe {
namespace {

using Grads = std::vector<Tensor>;

// The dims the reduction removed (every dim when dims is empty), counted from 0.
std::vector<int64_t> reduced_dims(const BackwardCall& c) {
  const int64_t rank = static_cast<int64_t>(c.input_metas[0].shape.size());
  const auto& dims = c.attrs.get<std::vector<int64_t>>("dims");
  std::vector<bool> reduced(rank, dims.empty());
  for (int64_t d : dims) reduced[wrap_dim(std::string(c.op).c_str(), d, rank)] = true;
  std::vector<int64_t> out;
  for (int64_t d = 0; d < rank; ++d)
    if (reduced[d]) out.push_back(d);
  return out;
}

// t (the output or its gradient) with the reduced dims back as size 1, as keepdim gives them.
Tensor keep_reduced_dims(const BackwardCall& c, const Tensor& t, const std::vector<int64_t>& dims) {
  if (c.attrs.get<bool>("keepdim")) return t;
  Tensor out = t;
  for (int64_t d : dims) out = out.unsqueeze(d);
  return out;
}

Grads sum_backward(const BackwardCall& c) {
  return {keep_reduced_dims(c, c.grads[0], reduced_dims(c)).expand(c.input_metas[0].shape)};
}

Grads mean_backward(const BackwardCall& c) {
  const std::vector<int64_t> dims = reduced_dims(c);
  int64_t count = 1;
  for (int64_t d : dims) count *= c.input_metas[0].shape[d];
  const Tensor g = keep_reduced_dims(c, c.grads[0], dims);
  return {mul(g, 1.0 / static_cast<double>(count)).expand(c.input_metas[0].shape)};
}

// max/min: the gradient shared evenly by the elements equal to the extreme (PyTorch's amax/amin).
Grads extreme_backward(const BackwardCall& c) {
  const std::vector<int64_t> dims = reduced_dims(c);
  const Tensor& x = c.inputs[0];
  const Tensor hits = eq(x, keep_reduced_dims(c, c.outputs[0], dims)).to(x.dtype());
  const Tensor share = div(keep_reduced_dims(c, c.grads[0], dims), sum(hits, dims, true));
  return {mul(hits, share)};
}

const BackwardRegistrar reduce_backwards[] = {
    BackwardRegistrar({"sum", sum_backward, false}),
    BackwardRegistrar({"mean", mean_backward, false}),
    BackwardRegistrar({"max", extreme_backward, true, true}),
    BackwardRegistrar({"min", extreme_backward, true, true}),
};

}  // namespace
}  // namespace troupe
