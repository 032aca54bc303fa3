// Backward of sum and mean: the gradient spread back over the reduced dims (divided by the count
// for mean).
#include "devices/autograd/backward_registry.h"
#include "devices/autograd/grad_utils.h"

namespace troupe {
namespace {

using Grads = std::vector<Tensor>;

Tensor spread(const BackwardCall& c, const Tensor& g, int64_t* count) {
  const Shape& shape = c.input_metas[0].shape;
  const int64_t rank = static_cast<int64_t>(shape.size());
  std::vector<bool> reduced(shape.size(), false);
  const auto& dims = c.attrs.get<std::vector<int64_t>>("dims");
  for (int64_t d : dims) reduced[wrap_dim(std::string(c.op).c_str(), d, rank)] = true;
  if (dims.empty()) reduced.assign(shape.size(), true);
  Tensor out = g;
  *count = 1;
  for (int64_t d = 0; d < rank; ++d) {
    if (!reduced[d]) continue;
    *count *= shape[d];
    if (!c.attrs.get<bool>("keepdim")) out = out.unsqueeze(d);
  }
  return out;
}

Grads sum_backward(const BackwardCall& c) {
  int64_t count;
  const Tensor g = spread(c, c.grads[0], &count);
  return {g.expand(c.input_metas[0].shape)};
}

Grads mean_backward(const BackwardCall& c) {
  int64_t count;
  const Tensor g = spread(c, c.grads[0], &count);
  return {mul(g, 1.0 / static_cast<double>(count)).expand(c.input_metas[0].shape)};
}

const BackwardRegistrar registrars[] = {
    BackwardRegistrar({"sum", sum_backward, false}),
    BackwardRegistrar({"mean", mean_backward, false}),
};

}  // namespace
}  // namespace troupe
