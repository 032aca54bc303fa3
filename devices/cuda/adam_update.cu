// adam_update on cuda (the op: devices/op_defs/optimizers.cpp): one elementwise kernel
// for the whole step of one parameter, in the parameter's dtype; the step factors are worked out
// on the host in double, as the CPU kernel does.
#include <cmath>

#include "devices/cuda/kernel_util.cuh"
#include "devices/op_defs/optimizers.h"
#include "devices/registry.h"

namespace troupe::cuda {

namespace {

template <class T>
struct AdamFactors {
  T b1, b2, wd, eps, step_size, root_c2;
};

template <class T>
__global__ void adam_kernel(const T* pp, const T* pg, const T* m_in, const T* v_in, const T* max_in, T* out, T* pm,
                            T* pv, T* pmax, int64_t n, AdamFactors<T> f) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const T gi = pg[i] + f.wd * pp[i];
    const T m = f.b1 * m_in[i] + (T(1) - f.b1) * gi;
    T v = f.b2 * v_in[i] + (T(1) - f.b2) * gi * gi;
    pm[i] = m;
    pv[i] = v;
    if (pmax) v = pmax[i] = max_in[i] > v ? max_in[i] : v;
    out[i] = pp[i] - f.step_size * m / (sqrt(v) / f.root_c2 + f.eps);
  }
}

std::vector<Tensor> adam_update_cuda(const OpCall& call) {
  const Tensor p = call.inputs[0].contiguous();
  const int device = p.device().index;
  DeviceGuard on(device);
  std::vector<Tensor> in{p, call.inputs[1].to(p.dtype()).contiguous()};
  for (size_t i = 2; i < call.inputs.size(); ++i) in.push_back(call.inputs[i].contiguous());
  std::vector<Tensor> out;
  for (const TensorMeta& m : call.outputs) out.push_back(Tensor::empty(m.shape, m.dtype, p.device()));
  const int64_t n = p.numel();
  if (n == 0) return out;
  const bool amsgrad = in.size() > 4;
  const AdamAttrs a = adam_attrs(call.attrs);
  const double t = static_cast<double>(a.step), beta1 = a.beta1, beta2 = a.beta2;
  auto run = [&](auto zero) {
    using T = decltype(zero);
    const AdamFactors<T> f{T(beta1), T(beta2), T(a.weight_decay), T(a.eps), T(a.lr / (1 - std::pow(beta1, t))),
                           T(std::sqrt(1 - std::pow(beta2, t)))};
    adam_kernel<<<blocks_for(n), kThreads, 0, current_stream(device)>>>(
        device_read<T>(in[0]), device_read<T>(in[1]), device_read<T>(in[2]), device_read<T>(in[3]), amsgrad ? device_read<T>(in[4]) : nullptr,
        device_write<T>(out[0]), device_write<T>(out[1]), device_write<T>(out[2]),
        amsgrad ? device_write<T>(out[3]) : nullptr, n, f);
  };
  if (p.dtype() == DType::f32) run(float{});
  else run(double{});
  check_launch("adam_update", device);
  return out;
}

const OpRegistrar adam_update_kernel{"adam_update", DeviceType::cuda, adam_update_cuda};

}  // namespace

}  // namespace troupe::cuda
