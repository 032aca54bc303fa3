// Backward kernels of the activations on cuda (devices/op_defs/activation_backward.cpp has the
// formulas): relu_backward(grad, y), tanh_backward(grad, y), sigmoid_backward(grad, y) from the
// forward output y, gelu_backward(grad, x) from the forward input. One fused pass over two floating
// tensors of one shape and dtype, read through their strides; f16/bf16 compute in f32.
#include "devices/cuda/kernel_util.cuh"
#include "devices/op_defs/elementwise.h"
#include "devices/registry.h"

namespace troupe::cuda {

namespace {

struct ReluGrad {
  template <class A> __device__ A operator()(A g, A y) const { return y > A(0) ? g : A(0); }
};
struct TanhGrad {
  template <class A> __device__ A operator()(A g, A y) const { return g * (A(1) - y * y); }
};
struct SigmoidGrad {
  template <class A> __device__ A operator()(A g, A y) const { return g * y * (A(1) - y); }
};
struct GeluGrad {  // d/dx x * Phi(x) = Phi(x) + x * phi(x)
  template <class A> __device__ A operator()(A g, A x) const {
    const A cdf = A(0.5) * (A(1) + erf_of(x * A(0.70710678118654752)));
    const A pdf = exp_of(A(-0.5) * x * x) * A(0.39894228040143268);  // 1 / sqrt(2 pi)
    return g * (cdf + x * pdf);
  }
};
struct GeluTanhGrad {  // gelu ~ 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3)
  template <class A> __device__ A operator()(A g, A x) const {
    const A k = A(0.79788456080286536), c = A(0.044715);
    const A t = tanh_of(k * (x + c * x * x * x));
    return g * (A(0.5) * (A(1) + t) + A(0.5) * x * (A(1) - t * t) * k * (A(1) + A(3) * c * x * x));
  }
};

template <class T, class Op>
__global__ void backward_kernel(const T* grad, const T* saved, T* out, Strided<2> layout, int64_t n, Op op) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[2];
    layout.offsets(i, off);
    out[i] = convert_to<T>(op(convert_to<Acc<T>>(grad[off[0]]), convert_to<Acc<T>>(saved[off[1]])));
  }
}

template <class Op>
std::vector<Tensor> run_backward(const OpCall& call, Op op) {
  const std::string name(call.op);
  Tensor grad = call.inputs[0], saved = call.inputs[1];
  const int device = grad.device().index;
  DeviceGuard on(device);
  Tensor out = Tensor::empty(grad.shape(), grad.dtype(), grad.device());
  const int64_t n = out.numel();
  if (n == 0) return {out};
  Strided<2> layout;
  if (!make_strided<2>(grad.shape(), {&grad.strides(), &saved.strides()}, layout)) {
    grad = grad.contiguous();  // too many dims for the kernel's index
    saved = saved.contiguous();
    make_strided<2>(grad.shape(), {&grad.strides(), &saved.strides()}, layout);
  }
  dispatch_floating(name.c_str(), grad.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    backward_kernel<<<blocks_for(n), kThreads, 0, current_stream(device)>>>(
        static_cast<const T*>(grad.raw_data()), static_cast<const T*>(saved.raw_data()),
        static_cast<T*>(out.mutable_raw_data()), layout, n, op);
  });
  check_launch(name.c_str(), device);
  return {out};
}

template <class Op>
KernelFn backward(Op op) {
  return [op](const OpCall& call) { return run_backward(call, op); };
}

const OpRegistrar relu_backward_cuda{"relu_backward", DeviceType::cuda, backward(ReluGrad{})};
const OpRegistrar tanh_backward_cuda{"tanh_backward", DeviceType::cuda, backward(TanhGrad{})};
const OpRegistrar sigmoid_backward_cuda{"sigmoid_backward", DeviceType::cuda, backward(SigmoidGrad{})};
const OpRegistrar gelu_backward_cuda{"gelu_backward", DeviceType::cuda, [](const OpCall& call) {
  if (gelu_form("gelu_backward", call.attrs) == GeluForm::tanh) return run_backward(call, GeluTanhGrad{});
  return run_backward(call, GeluGrad{});  // inference has refused anything but "none" and "tanh"
}};

}  // namespace

}  // namespace troupe::cuda
