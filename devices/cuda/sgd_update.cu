// sgd_update on cuda (the op: devices/op_defs/optimizers.cpp): one elementwise kernel
// for the whole step of one parameter, in the parameter's dtype.
#include <cmath>

#include "devices/cuda/kernel_util.cuh"
#include "devices/op_defs/optimizers.h"
#include "devices/registry.h"

namespace troupe::cuda {

namespace {

template <class T>
struct SgdFactors {
  T lr, wd, mom, damp;
  bool nesterov;
};

template <class T>
__global__ void sgd_kernel(const T* pp, const T* pg, const T* pb_in, T* out, T* pb, int64_t n, SgdFactors<T> f) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const T d = pg[i] + f.wd * pp[i];
    if (!pb) {
      out[i] = pp[i] - f.lr * d;
      continue;
    }
    const T b = pb_in ? f.mom * pb_in[i] + f.damp * d : d;
    pb[i] = b;
    out[i] = pp[i] - f.lr * (f.nesterov ? d + f.mom * b : b);
  }
}

std::vector<Tensor> sgd_update_cuda(const OpCall& call) {
  const Tensor p = call.inputs[0].contiguous();
  const int device = p.device().index;
  DeviceGuard on(device);
  const Tensor g = call.inputs[1].to(p.dtype()).contiguous();
  const Tensor buffer = call.inputs.size() > 2 ? call.inputs[2].contiguous() : Tensor();
  std::vector<Tensor> out;
  for (const TensorMeta& m : call.outputs) out.push_back(Tensor::empty(m.shape, m.dtype, p.device()));
  const int64_t n = p.numel();
  if (n == 0) return out;
  const SgdAttrs a = sgd_attrs(call.attrs);
  auto run = [&](auto zero) {
    using T = decltype(zero);
    const SgdFactors<T> f{T(a.lr), T(a.weight_decay), T(a.momentum), T(1 - a.dampening), a.nesterov};
    sgd_kernel<<<blocks_for(n), kThreads, 0, current_stream(device)>>>(
        device_read<T>(p), device_read<T>(g), buffer.defined() ? device_read<T>(buffer) : nullptr, device_write<T>(out[0]),
        out.size() > 1 ? device_write<T>(out[1]) : nullptr, n, f);
  };
  if (p.dtype() == DType::f32) run(float{});
  else run(double{});
  check_launch("sgd_update", device);
  return out;
}

const OpRegistrar sgd_update_kernel{"sgd_update", DeviceType::cuda, sgd_update_cuda};

}  // namespace

}  // namespace troupe::cuda
