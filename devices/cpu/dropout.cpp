// dropout and dropout2d (PyTorch's F.dropout and F.dropout2d): while training, each element
// (dropout) or each whole channel x[n, c] (dropout2d) is zeroed with probability p and the rest
// scaled by 1 / (1 - p). Outputs: y and the bool keep-mask (x's shape, or [N, C, 1, ...] for
// dropout2d) that dropout_backward(grad, mask) applies again. Not training, or p = 0: y is x and
// the mask is empty. Draws come from the calling thread's generator (devices/random.h).
#include <string>

#include "devices/cpu/loops.h"
#include "devices/random.h"
#include "devices/op_defs/dropout.h"
#include "devices/registry.h"

namespace troupe {
namespace {

// y = x * mask * scale with the mask broadcast over x.
Tensor apply_mask(const Tensor& x, const Tensor& mask, double scale) {
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<compute_t<T>, float> || std::is_same_v<T, double>) {
      using A = compute_t<T>;
      const A s = static_cast<A>(scale);
      const T* px = x.data<T>();
      const bool* pm = mask.data<bool>();
      T* po = out.mutable_data<T>();
      for_each_run<2>(x.shape(), {x.strides(), broadcast_strides(mask, x.shape())},
                      [&](const auto& at, const auto& step, int64_t n) {
                        const T* in = px + at[0];
                        const bool* m = pm + at[1];
                        for (int64_t i = 0; i < n; ++i)
                          po[i] = convert<T>(m[i * step[1]] ? A(in[i * step[0]]) * s : A(0));
                        po += n;
                      });
    }
  });
  return out;
}

std::vector<Tensor> dropout_cpu(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  const DropoutAttrs a = dropout_attrs(call.op, call.attrs);
  if (!a.active()) return {x, Tensor::empty({0}, DType::boolean)};
  const double p = a.p;
  Tensor mask = Tensor::empty(call.outputs[1].shape, DType::boolean);
  bool* m = mask.mutable_data<bool>();
  Generator& g = thread_generator();
  for (int64_t i = 0; i < mask.numel(); ++i) m[i] = g.uniform() >= p;
  return {apply_mask(x, mask, p < 1.0 ? 1.0 / (1.0 - p) : 0.0), mask};
}

std::vector<Tensor> dropout_backward_cpu(const OpCall& call) {
  const Tensor &g = call.inputs[0], &mask = call.inputs[1];
  if (mask.numel() == 0) return {g};
  const double p = dropout_attrs(call.op, call.attrs).p;
  return {apply_mask(g, mask, p < 1.0 ? 1.0 / (1.0 - p) : 0.0)};
}

const OpRegistrar dropout_kernel{"dropout", DeviceType::cpu, dropout_cpu};
const OpRegistrar dropout2d_kernel{"dropout2d", DeviceType::cpu, dropout_cpu};
const OpRegistrar dropout_backward_kernel{"dropout_backward", DeviceType::cpu, dropout_backward_cpu};

}  // namespace
}  // namespace troupe
