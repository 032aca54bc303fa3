// Unary elementwise ops on the CPU. neg, abs and relu keep the dtype (not bool, like PyTorch);
// exp, log, sqrt, tanh, sigmoid and gelu are floating: integer and bool inputs give f32, f16/bf16
// compute in f32, and f32 runs through the vectorised activations.
#include <cmath>
#include <string>
#include <type_traits>

#include "devices/cpu/activations.h"
#include "devices/cpu/loops.h"
#include "devices/cpu/parallel_ranges.h"
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
OpDef same_dtype_op(std::string name, std::string doc) {
  auto infer = [](const OpInfer& c) {
    const TensorMeta& x = c.inputs[0];
    if (x.dtype == DType::boolean)
      throw DTypeError(std::string(c.op) + ": not defined for bool tensors, got " + x.str());
    return std::vector<TensorMeta>{x};
  };
  auto kernel = [](const OpCall& call) {
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
  return OpDef{.name = std::move(name), .doc = std::move(doc), .attrs = {}, .infer = infer,
               .kernels = {{DeviceType::cpu, kernel}}};
}

const OpRegistrar neg_op{same_dtype_op<Neg>("neg", "-x elementwise (integers wrap; not bool)")};
const OpRegistrar abs_op{same_dtype_op<Abs>("abs", "|x| elementwise (not bool)")};
const OpRegistrar relu_op{same_dtype_op<Relu>("relu", "max(x, 0) elementwise (not bool)")};

// --- floating ops ---

using F32Fn = void (*)(const float*, float*, int64_t);
using F64Fn = double (*)(double);

DType floating_result(DType t) { return is_floating(t) ? t : DType::f32; }

std::vector<TensorMeta> infer_floating(const OpInfer& c) {
  TensorMeta out = c.inputs[0];
  out.dtype = floating_result(out.dtype);
  return {out};
}

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

OpDef floating_op(std::string name, std::string doc, F32Fn f32, F64Fn f64) {
  auto kernel = [f32, f64](const OpCall& call) { return run_floating(call, f32, f64); };
  return OpDef{.name = std::move(name), .doc = std::move(doc), .attrs = {}, .infer = infer_floating,
               .kernels = {{DeviceType::cpu, kernel}}};
}

const OpRegistrar exp_op{floating_op("exp", "e^x elementwise (integers give f32)", exp_f32,
                                     [](double x) { return std::exp(x); })};
const OpRegistrar log_op{floating_op("log", "natural log elementwise (integers give f32)", log_f32,
                                     [](double x) { return std::log(x); })};
const OpRegistrar sqrt_op{floating_op("sqrt", "square root elementwise (integers give f32)", sqrt_f32,
                                      [](double x) { return std::sqrt(x); })};
const OpRegistrar tanh_op{floating_op("tanh", "tanh elementwise (integers give f32)", tanh_f32,
                                      [](double x) { return std::tanh(x); })};
const OpRegistrar sigmoid_op{floating_op("sigmoid", "1 / (1 + e^-x) elementwise (integers give f32)", sigmoid_f32,
                                         sigmoid_f64)};

const OpRegistrar gelu_op{OpDef{
    .name = "gelu",
    .doc = "x * Phi(x) elementwise; approximate=\"tanh\" uses the tanh formula (integers give f32)",
    .attrs = {{"approximate", AttrType::string, std::string("none"), "\"none\" (erf form) or \"tanh\""}},
    .infer =
        [](const OpInfer& c) {
          const std::string& approximate = c.attrs.get<std::string>("approximate");
          if (approximate != "none" && approximate != "tanh")
            throw ValueError("gelu: approximate must be \"none\" or \"tanh\", got \"" + approximate + "\" for " +
                             c.inputs[0].str());
          return infer_floating(c);
        },
    .kernels = {{DeviceType::cpu, [](const OpCall& call) {
                   if (call.attrs.get<std::string>("approximate") == "tanh")
                     return run_floating(call, gelu_tanh_f32, gelu_tanh_f64);
                   return run_floating(call, gelu_f32, gelu_f64);
                 }}}}};

}  // namespace

}  // namespace troupe
