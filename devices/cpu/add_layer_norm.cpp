// add_layer_norm: layer_norm(x + residual) over the last dim in one pass over the rows, the
// transformer's residual connection and norm without the sum's round trip through memory (and,
// in bf16, without rounding the sum before it is normalised: it stays f32 inside the row). With
// return_sum the sum comes back too (pre-norm layers carry it on). Inference only: the op refuses
// inputs that require grad (ops.cpp); training composes add and layer_norm, which have gradients.
// The CPU kernel; the CUDA one is devices/cuda/add_layer_norm.cu.
#include <cmath>
#include <string>
#include <vector>

#include "devices/cpu/loops.h"
#include "devices/cpu/parallel_ranges.h"
#include "devices/registry.h"

namespace troupe {

namespace {

std::vector<TensorMeta> infer_add_layer_norm(const OpInfer& c) {
  const TensorMeta& x = c.inputs[0];
  const TensorMeta& residual = c.inputs[1];
  const std::string operands = x.str() + " + " + residual.str();
  if (!is_floating(x.dtype))
    throw DTypeError("add_layer_norm: needs floating tensors, got " + operands);
  if (residual.dtype != x.dtype || residual.shape != x.shape)
    throw ShapeError("add_layer_norm: x and residual must have one dtype and shape, got " + operands);
  if (x.shape.empty()) throw ShapeError("add_layer_norm: x must have at least one dim, got " + x.str());
  const double eps = c.attrs.get<double>("eps");
  if (!(eps >= 0.0) || !std::isfinite(eps))
    throw ValueError("add_layer_norm: eps must be finite and >= 0, got " + std::to_string(eps));
  const char* roles[] = {"", "", "weight", "bias"};
  for (size_t i = 2; i < c.inputs.size(); ++i) {
    const TensorMeta& p = c.inputs[i];
    if (!is_floating(p.dtype))
      throw DTypeError(std::string("add_layer_norm: ") + roles[i] + " must be floating, got " + p.str());
    if (p.shape != Shape{x.shape.back()})
      throw ShapeError(std::string("add_layer_norm: ") + roles[i] + " " + p.str() + " must be [" +
                       std::to_string(x.shape.back()) + "] for " + operands);
  }
  if (c.attrs.get<bool>("return_sum")) return {x, x};
  return {x};
}

// One row: s = x + r in the compute type A, mean, variance of the centred row (no cancellation),
// then y = (s - mean) * rstd * weight + bias.
template <class T, class A>
void add_layer_norm_row(const T* x, const T* r, const A* weight, const A* bias, A eps, int64_t n, A* s, T* y,
                        T* sum_out) {
  for (int64_t i = 0; i < n; ++i) s[i] = static_cast<A>(x[i]) + static_cast<A>(r[i]);
  if (sum_out)
    for (int64_t i = 0; i < n; ++i) sum_out[i] = static_cast<T>(s[i]);
  const A mean = sum_row<A>(s, n) / static_cast<A>(n);
  A squares = 0;
  for (int64_t i = 0; i < n; ++i) squares += (s[i] - mean) * (s[i] - mean);
  const A rstd = A(1) / std::sqrt(squares / static_cast<A>(n) + eps);
  for (int64_t i = 0; i < n; ++i) {
    A v = (s[i] - mean) * rstd;
    if (weight) v *= weight[i];
    if (bias) v += bias[i];
    y[i] = static_cast<T>(v);
  }
}

std::vector<Tensor> add_layer_norm_cpu(const OpCall& call) {
  const TensorMeta& meta = call.outputs[0];
  const bool return_sum = call.outputs.size() > 1;
  const Tensor x = call.inputs[0].contiguous(), r = call.inputs[1].contiguous();
  Tensor y = Tensor::empty(meta.shape, meta.dtype);
  Tensor sum = return_sum ? Tensor::empty(meta.shape, meta.dtype) : Tensor();
  const int64_t n = meta.shape.back();
  if (y.numel() == 0) return return_sum ? std::vector<Tensor>{y, sum} : std::vector<Tensor>{y};
  const DType compute = meta.dtype == DType::f64 ? DType::f64 : DType::f32;
  auto param = [&](size_t i) { return call.inputs.size() > i ? call.inputs[i].to(compute).contiguous() : Tensor(); };
  const Tensor weight = param(2), bias = param(3);
  const double eps = call.attrs.get<double>("eps");
  dispatch(meta.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, Half> ||
                  std::is_same_v<T, BFloat16>) {
      using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
      const A* pw = weight.defined() ? weight.data<A>() : nullptr;
      const A* pb = bias.defined() ? bias.data<A>() : nullptr;
      const T* px = x.data<T>();
      const T* pr = r.data<T>();
      T* py = y.mutable_data<T>();
      T* ps = return_sum ? sum.mutable_data<T>() : nullptr;
      parallel_ranges(y.numel() / n, std::max<int64_t>(1, (1 << 16) / n), 1, [&](int64_t begin, int64_t end) {
        std::vector<A> row(static_cast<size_t>(n));
        for (int64_t i = begin; i < end; ++i)
          add_layer_norm_row<T, A>(px + i * n, pr + i * n, pw, pb, static_cast<A>(eps), n, row.data(), py + i * n,
                                   ps ? ps + i * n : nullptr);
      });
    }
  });
  return return_sum ? std::vector<Tensor>{y, sum} : std::vector<Tensor>{y};
}

const OpRegistrar add_layer_norm_op{OpDef{
    .name = "add_layer_norm",
    .doc = "layer_norm(x + residual) over the last dim, inputs x, residual [, weight [, bias]] (weight and bias [d] "
           "in any floating dtype); the sum is normalised in f32 (f64 for f64) before any rounding; with return_sum, "
           "the sum x + residual as a second output; inference only",
    .min_inputs = 2,
    .max_inputs = 4,
    .attrs = {{"eps", AttrType::real, 1e-5, "added to the variance"},
              {"return_sum", AttrType::boolean, false, "also return x + residual (pre-norm layers)"}},
    .infer = infer_add_layer_norm,
    .kernels = {{DeviceType::cpu, add_layer_norm_cpu}},
    .not_differentiable = "an inference kernel: train with add and layer_norm, whose gradients are defined"}};

}  // namespace

}  // namespace troupe
