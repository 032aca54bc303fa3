// Unary elementwise kernels on the CPU (the ops: devices/op_defs/elementwise.cpp). f16/bf16
// compute in f32, and f32 runs through the vectorised activations.
#include <cmath>
#include <string>
#include <type_traits>

#include "devices/cpu/activations.h"
#include "devices/cpu/loops.h"
#include "devices/cpu/parallel_ranges.h"
#include "devices/op_defs/elementwise.h"
#include "devices/registry.h"

namespace troupe {

namespace {

// --- same-dtype ops ---

struct Neg {
  template <class A> A operator()(A x) const {
    if constexpr (std::is_integral_v<A>)  // wraps (the most negative value stays), like PyTorch
      return static_cast<A>(std::make_unsigned_t<A>(0) - static_cast<std::make_unsigned_t<A>>(x));
    else return -x;
  }
};
struct Abs {
  template <class A> A operator()(A x) const {
    if constexpr (std::is_unsigned_v<A>) return x;
    else if constexpr (std::is_integral_v<A>) return x < 0 ? Neg{}(x) : x;
    else return std::fabs(x);
  }
};
struct Relu {
  template <class A> A operator()(A x) const {
    if constexpr (std::is_unsigned_v<A>) return x;
    else return x < A(0) ? A(0) : x;  // NaN stays NaN
  }
};

template <class Op>
KernelFn same_dtype_kernel() {
  return [](const OpCall& call) {
    const Tensor& x = call.inputs[0];
    Tensor out = Tensor::empty(x.shape(), x.dtype());
    dispatch(x.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (!std::is_same_v<T, bool>) {  // inference refused bool
        using A = compute_t<T>;
        const T* px = x.data<T>();
        T* po = out.mutable_data<T>();
        for_each_run<1>(x.shape(), {x.strides()}, [&](const auto& at, const auto& step, int64_t n) {
          const T* in = px + at[0];
          if (step[0] == 1)
            for (int64_t i = 0; i < n; ++i) po[i] = convert<T>(Op{}(A(in[i])));
          else
            for (int64_t i = 0; i < n; ++i) po[i] = convert<T>(Op{}(A(in[i * step[0]])));
          po += n;
        });
      }
    });
    return std::vector<Tensor>{out};
  };
}

const OpRegistrar neg_kernel{"neg", DeviceType::cpu, same_dtype_kernel<Neg>()};
const OpRegistrar abs_kernel{"abs", DeviceType::cpu, same_dtype_kernel<Abs>()};
const OpRegistrar relu_kernel{"relu", DeviceType::cpu, same_dtype_kernel<Relu>()};

// --- floating ops ---

using F32Fn = void (*)(const float*, float*, int64_t);
using F64Fn = double (*)(double);

// Runs f32 (on f32, f16, bf16 and integer inputs, converted) or f64 over a contiguous copy.
std::vector<Tensor> run_floating(const OpCall& call, F32Fn f32, F64Fn f64) {
  const Tensor& x = call.inputs[0];
  const DType out_dtype = call.outputs[0].dtype;
  const DType compute = out_dtype == DType::f64 ? DType::f64 : DType::f32;
  const Tensor in = x.to(compute).contiguous();
  Tensor out = Tensor::empty(x.shape(), compute);
  const int64_t n = out.numel();
  if (compute == DType::f32) {
    const float* px = in.data<float>();
    float* po = out.mutable_data<float>();
    parallel_ranges(n, 1 << 16, 64, [&](int64_t begin, int64_t end) { f32(px + begin, po + begin, end - begin); });
  } else {
    const double* px = in.data<double>();
    double* po = out.mutable_data<double>();
    for (int64_t i = 0; i < n; ++i) po[i] = f64(px[i]);
  }
  return {out.to(out_dtype)};
}

void log_f32(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::log(x[i]);
}
void sqrt_f32(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::sqrt(x[i]);
}
double sigmoid_f64(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double gelu_f64(double x) { return 0.5 * x * std::erfc(-x * 0.70710678118654752440); }
double gelu_tanh_f64(double x) {
  const double u = 0.79788456080286535588 * (x + 0.044715 * x * x * x);  // sqrt(2/pi) (x + 0.044715 x^3)
  return x / (1.0 + std::exp(-2.0 * u));                                 // 0.5 x (1 + tanh u)
}

KernelFn floating_kernel(F32Fn f32, F64Fn f64) {
  return [f32, f64](const OpCall& call) { return run_floating(call, f32, f64); };
}

const OpRegistrar exp_kernel{"exp", DeviceType::cpu, floating_kernel(exp_f32, [](double x) { return std::exp(x); })};
const OpRegistrar log_kernel{"log", DeviceType::cpu, floating_kernel(log_f32, [](double x) { return std::log(x); })};
const OpRegistrar sqrt_kernel{"sqrt", DeviceType::cpu, floating_kernel(sqrt_f32, [](double x) { return std::sqrt(x); })};
const OpRegistrar tanh_kernel{"tanh", DeviceType::cpu, floating_kernel(tanh_f32, [](double x) { return std::tanh(x); })};
const OpRegistrar sigmoid_kernel{"sigmoid", DeviceType::cpu, floating_kernel(sigmoid_f32, sigmoid_f64)};
const OpRegistrar gelu_kernel{"gelu", DeviceType::cpu, [](const OpCall& call) {
                                if (gelu_form(call.op, call.attrs) == GeluForm::tanh)
                                  return run_floating(call, gelu_tanh_f32, gelu_tanh_f64);
                                return run_floating(call, gelu_f32, gelu_f64);
                              }};

}  // namespace

}  // namespace troupe
