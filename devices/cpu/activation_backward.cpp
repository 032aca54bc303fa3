// Backward kernels of the activations, one fused pass each: relu_backward(grad, y) = grad * (y > 0),
// tanh_backward(grad, y) = grad * (1 - y^2), sigmoid_backward(grad, y) = grad * y * (1 - y) (y the
// forward output), gelu_backward(grad, x) = grad * gelu'(x) (x the forward input). Floating
// tensors of one shape and dtype; f16/bf16 compute in f32.
#include <cmath>
#include <string>

#include "devices/cpu/loops.h"
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

std::vector<TensorMeta> infer_pair(const OpInfer& c) {
  const TensorMeta &g = c.inputs[0], &y = c.inputs[1];
  if (!is_floating(g.dtype) || g.dtype != y.dtype)
    throw DTypeError(std::string(c.op) + ": expects two floating tensors of one dtype, got " + g.str() + " and " +
                     y.str());
  if (g.shape != y.shape)
    throw ShapeError(std::string(c.op) + ": the gradient " + g.str() + " and the saved tensor " + y.str() +
                     " differ in shape");
  return {g};
}

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
OpDef backward_op(std::string name, std::string doc) {
  return OpDef{.name = std::move(name),
               .doc = std::move(doc),
               .min_inputs = 2,
               .max_inputs = 2,
               .attrs = {},
               .infer = infer_pair,
               .kernels = {{DeviceType::cpu, [](const OpCall& c) {
                              return std::vector<Tensor>{apply<Op>(c.inputs[0], c.inputs[1])};
                            }}},
               .not_differentiable = kGradientKernel};
}

const OpRegistrar relu_backward_op{backward_op<ReluGrad>("relu_backward", "grad * (y > 0), y = relu(x)")};
const OpRegistrar tanh_backward_op{backward_op<TanhGrad>("tanh_backward", "grad * (1 - y^2), y = tanh(x)")};
const OpRegistrar sigmoid_backward_op{
    backward_op<SigmoidGrad>("sigmoid_backward", "grad * y * (1 - y), y = sigmoid(x)")};
const OpRegistrar gelu_backward_op{OpDef{
    .name = "gelu_backward",
    .doc = "grad * gelu'(x), x the forward input",
    .min_inputs = 2,
    .max_inputs = 2,
    .attrs = {{"approximate", AttrType::string, std::string("none"), "\"none\" (erf form) or \"tanh\""}},
    .infer =
        [](const OpInfer& c) {
          const std::string& a = c.attrs.get<std::string>("approximate");
          if (a != "none" && a != "tanh")
            throw ValueError("gelu_backward: approximate must be \"none\" or \"tanh\", got \"" + a + "\"");
          return infer_pair(c);
        },
    .kernels = {{DeviceType::cpu, [](const OpCall& c) {
                   const bool tanh_form = c.attrs.get<std::string>("approximate") == "tanh";
                   return std::vector<Tensor>{tanh_form ? apply<GeluTanhGrad>(c.inputs[0], c.inputs[1])
                                                        : apply<GeluGrad>(c.inputs[0], c.inputs[1])};
                 }}},
    .not_differentiable = kGradientKernel}};

}  // namespace
}  // namespace troupe
