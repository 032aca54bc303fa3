// max_pool2d and max_pool2d_backward on cuda (the ops: devices/op_defs/max_pool2d.cpp).
// Own kernels rather than cuDNN's: cuDNN's pooling gives no indices, and the op returns them.
// Forward: one thread per output, taps in the CPU's order with its rule (a strictly larger value
// or a NaN takes over), so values and indices are the CPU's exactly. Backward: each gradient is
// added at its index, with atomics; with deterministic kernels (devices/determinism.h) one thread
// per plane adds them in the CPU's order instead, giving the CPU's sums bit for bit.
// An index outside its plane is skipped: the CPU kernel's IndexError would need a wait for the device.
#include <cmath>

#include "devices/cuda/kernel_util.cuh"
#include "devices/determinism.h"
#include "devices/op_defs/max_pool2d.h"
#include "devices/registry.h"

namespace troupe::cuda {

namespace {

template <class T>
__global__ void pool_forward(const T* x, T* out, int64_t* index, MaxPool2dGeometry p, int64_t n) {
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ox = k % p.ow, oy = k / p.ow % p.oh, plane = k / (p.ow * p.oh);
    const T* in = x + plane * p.h * p.w;
    const int64_t top = oy * p.sh - p.ph, left = ox * p.sw - p.pw;
    T best = -INFINITY;
    int64_t at = (top > 0 ? top : 0) * p.w + (left > 0 ? left : 0);
    for (int64_t i = 0; i < p.kh; ++i) {
      const int64_t iy = top + i;
      if (iy < 0 || iy >= p.h) continue;
      for (int64_t j = 0; j < p.kw; ++j) {
        const int64_t ix = left + j;
        if (ix < 0 || ix >= p.w) continue;
        const T v = in[iy * p.w + ix];
        if (v > best || v != v) {
          best = v;
          at = iy * p.w + ix;
        }
      }
    }
    out[k] = best;
    index[k] = at;
  }
}

template <class T>
__global__ void pool_backward_atomic(const T* grad, const int64_t* index, T* dx, int64_t per_out, int64_t per_in,
                                     int64_t n) {
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n; k += int64_t(gridDim.x) * blockDim.x) {
    const int64_t at = index[k];
    if (at >= 0 && at < per_in) atomicAdd(dx + k / per_out * per_in + at, grad[k]);
  }
}

template <class T>
__global__ void pool_backward_ordered(const T* grad, const int64_t* index, T* dx, int64_t per_out, int64_t per_in,
                                      int64_t planes) {
  for (int64_t plane = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; plane < planes;
       plane += int64_t(gridDim.x) * blockDim.x) {
    T* d = dx + plane * per_in;
    for (int64_t k = plane * per_out; k < (plane + 1) * per_out; ++k)
      if (index[k] >= 0 && index[k] < per_in) d[index[k]] += grad[k];
  }
}

std::vector<Tensor> max_pool2d_cuda(const OpCall& call) {
  const Tensor x = call.inputs[0].contiguous();
  const Shape& out_shape = call.outputs[0].shape;
  const int device = x.device().index;
  DeviceGuard on(device);
  const MaxPool2dGeometry p = max_pool2d_geometry("max_pool2d", x.meta(), call.attrs);
  Tensor out = Tensor::empty(out_shape, x.dtype(), x.device());
  Tensor index = Tensor::empty(out_shape, DType::i64, x.device());
  const int64_t n = out.numel();
  if (n == 0) return {out, index};
  dispatch_floating("max_pool2d", x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>)
      pool_forward<<<blocks_for(n), kThreads, 0, current_stream(device)>>>(
          static_cast<const T*>(x.raw_data()), static_cast<T*>(out.mutable_raw_data()),
          device_write<int64_t>(index), p, n);
    else
      throw DeviceError("max_pool2d: no cuda kernel for " + x.meta().str());
  });
  check_launch("max_pool2d", device);
  return {out, index};
}

std::vector<Tensor> max_pool2d_backward_cuda(const OpCall& call) {
  const Tensor grad = call.inputs[0].contiguous(), index = call.inputs[1].contiguous();
  const Shape& in = call.outputs[0].shape;
  const int device = grad.device().index;
  DeviceGuard on(device);
  const cudaStream_t stream = current_stream(device);
  Tensor dx = Tensor::empty(in, grad.dtype(), grad.device());
  if (dx.numel() == 0) return {dx};
  check(cudaMemsetAsync(dx.mutable_raw_data(), 0, dx.nbytes(), stream), "cudaMemsetAsync", device);
  const int64_t planes = in[0] * in[1], per_in = in[2] * in[3], per_out = grad.size(2) * grad.size(3);
  if (grad.numel() == 0) return {dx};
  dispatch_floating("max_pool2d_backward", grad.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      const T* g = static_cast<const T*>(grad.raw_data());
      const int64_t* at = device_read<int64_t>(index);
      T* d = static_cast<T*>(dx.mutable_raw_data());
      if (deterministic_kernels())
        pool_backward_ordered<<<blocks_for(planes), kThreads, 0, stream>>>(g, at, d, per_out, per_in, planes);
      else
        pool_backward_atomic<<<blocks_for(grad.numel()), kThreads, 0, stream>>>(g, at, d, per_out, per_in,
                                                                                 grad.numel());
    } else {
      throw DeviceError("max_pool2d_backward: no cuda kernel for " + grad.meta().str());
    }
  });
  check_launch("max_pool2d_backward", device);
  return {dx};
}

const OpRegistrar max_pool2d_kernel{"max_pool2d", DeviceType::cuda, max_pool2d_cuda};
const OpRegistrar max_pool2d_backward_kernel{"max_pool2d_backward", DeviceType::cuda, max_pool2d_backward_cuda};

}  // namespace

}  // namespace troupe::cuda
