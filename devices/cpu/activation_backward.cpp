// Backward kernels of the activations on the CPU, one fused pass each (the ops:
// devices/op_defs/activation_backward.cpp); f16/bf16 compute in f32.
#include <cmath>
#include <string>

#include "devices/cpu/loops.h"
#include "devices/op_defs/elementwise.h"
#include "devices/registry.h"

namespace troupe {
namespace {

struct ReluGrad {
  template <class A> A operator()(A g, A y) const { return y > A(0) ? g : A(0); }
};
struct TanhGrad {
  template <class A> A operator()(A g, A y) const { return g * (A(1) - y * y); }
};
struct SigmoidGrad {
  template <class A> A operator()(A g, A y) const { return g * y * (A(1) - y); }
};
struct GeluGrad {  // d/dx x * Phi(x) = Phi(x) + x * phi(x)
  template <class A> A operator()(A g, A x) const {
    const A cdf = A(0.5) * (A(1) + std::erf(x * A(M_SQRT1_2)));
    const A pdf = std::exp(A(-0.5) * x * x) * A(0.5 * M_2_SQRTPI * M_SQRT1_2);
    return g * (cdf + x * pdf);
  }
};
struct GeluTanhGrad {  // gelu ~ 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3)
  template <class A> A operator()(A g, A x) const {
    const A k = A(M_2_SQRTPI * M_SQRT1_2), c = A(0.044715);
    const A t = std::tanh(k * (x + c * x * x * x));
    return g * (A(0.5) * (A(1) + t) + A(0.5) * x * (A(1) - t * t) * k * (A(1) + A(3) * c * x * x));
  }
};

template <class Op>
Tensor apply(const Tensor& grad, const Tensor& saved) {
  Tensor out = Tensor::empty(grad.shape(), grad.dtype());
  dispatch(grad.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<compute_t<T>, float> || std::is_same_v<T, double>) {
      using A = compute_t<T>;
      const T* pg = grad.data<T>();
      const T* ps = saved.data<T>();
      T* po = out.mutable_data<T>();
      for_each_run<2>(grad.shape(), {grad.strides(), saved.strides()},
                      [&](const auto& at, const auto& step, int64_t n) {
                        const T* g = pg + at[0];
                        const T* s = ps + at[1];
                        if (step[0] == 1 && step[1] == 1)
                          for (int64_t i = 0; i < n; ++i) po[i] = convert<T>(Op{}(A(g[i]), A(s[i])));
                        else
                          for (int64_t i = 0; i < n; ++i)
                            po[i] = convert<T>(Op{}(A(g[i * step[0]]), A(s[i * step[1]])));
                        po += n;
                      });
    }
  });
  return out;
}

template <class Op>
std::vector<Tensor> backward_kernel(const OpCall& c) {
  return {apply<Op>(c.inputs[0], c.inputs[1])};
}

std::vector<Tensor> gelu_backward_cpu(const OpCall& c) {
  if (gelu_form(c.op, c.attrs) == GeluForm::tanh) return {apply<GeluTanhGrad>(c.inputs[0], c.inputs[1])};
  return {apply<GeluGrad>(c.inputs[0], c.inputs[1])};
}

const OpRegistrar relu_backward_kernel{"relu_backward", DeviceType::cpu, backward_kernel<ReluGrad>};
const OpRegistrar tanh_backward_kernel{"tanh_backward", DeviceType::cpu, backward_kernel<TanhGrad>};
const OpRegistrar sigmoid_backward_kernel{"sigmoid_backward", DeviceType::cpu, backward_kernel<SigmoidGrad>};
const OpRegistrar gelu_backward_kernel{"gelu_backward", DeviceType::cpu, gelu_backward_cpu};

}  // namespace
}  // namespace troupe
