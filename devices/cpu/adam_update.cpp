// adam_update: one parameter's step of torch.optim.Adam as one fused op, so an optimizer on a GPU
// runs one kernel per parameter instead of a dozen elementwise ops (models/nn/optimizer.cpp).
//
//   (param, grad, exp_avg, exp_avg_sq[, max_exp_avg_sq]) -> (param', exp_avg', exp_avg_sq'[, max'])
//   g = grad + weight_decay * param; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
//   with max_exp_avg_sq (amsgrad) v_hat = max(max, v), else v_hat = v;
//   param' = param - lr / (1 - b1^step) * m / (sqrt(v_hat) / sqrt(1 - b2^step) + eps).
//
// The arithmetic is in the parameter's dtype (f32 or f64), the step factors in double first, in
// the order Adam::step always used, so results are bit for bit those of the loop it replaced.
#include <algorithm>
#include <cmath>
#include <string>

#include "devices/op_defs/optimizers.h"
#include "devices/registry.h"

namespace troupe {
namespace {

template <class T>
void adam(const AdamAttrs& a, int64_t n, const T* pp, const T* pg, const T* m_in, const T* v_in, const T* max_in, T* out,
          T* pm, T* pv, T* pmax) {
  const double t = static_cast<double>(a.step);
  const double beta1 = a.beta1, beta2 = a.beta2;
  const T b1 = T(beta1), b2 = T(beta2), wd = T(a.weight_decay), eps = T(a.eps);
  const T step_size = T(a.lr / (1 - std::pow(beta1, t)));
  const T root_c2 = T(std::sqrt(1 - std::pow(beta2, t)));
  for (int64_t i = 0; i < n; ++i) {
    const T gi = pg[i] + wd * pp[i];
    pm[i] = b1 * m_in[i] + (T(1) - b1) * gi;
    pv[i] = b2 * v_in[i] + (T(1) - b2) * gi * gi;
    T v = pv[i];
    if (pmax) v = pmax[i] = std::max(max_in[i], v);
    out[i] = pp[i] - step_size * pm[i] / (std::sqrt(v) / root_c2 + eps);
  }
}

std::vector<Tensor> adam_update_cpu(const OpCall& call) {
  std::vector<Tensor> in{call.inputs[0].contiguous(), call.inputs[1].to(call.inputs[0].dtype()).contiguous()};
  for (size_t i = 2; i < call.inputs.size(); ++i) in.push_back(call.inputs[i].contiguous());
  std::vector<Tensor> out;
  for (const TensorMeta& m : call.outputs) out.push_back(Tensor::empty(m.shape, m.dtype));
  const bool amsgrad = in.size() > 4;
  const AdamAttrs attrs = adam_attrs(call.attrs);
  auto run = [&](auto zero) {
    using T = decltype(zero);
    adam<T>(attrs, in[0].numel(), in[0].data<T>(), in[1].data<T>(), in[2].data<T>(), in[3].data<T>(),
            amsgrad ? in[4].data<T>() : nullptr, out[0].mutable_data<T>(), out[1].mutable_data<T>(),
            out[2].mutable_data<T>(), amsgrad ? out[3].mutable_data<T>() : nullptr);
  };
  if (in[0].dtype() == DType::f32) run(float{});
  else run(double{});
  return out;
}

const OpRegistrar adam_update_kernel{"adam_update", DeviceType::cpu, adam_update_cpu};

}  // namespace
}  // namespace troupe
