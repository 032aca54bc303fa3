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
#include "devices/op_defs/norms.h"
#include "devices/registry.h"

namespace troupe {

namespace {

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
  const double eps = add_layer_norm_attrs(call.attrs).eps;
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

const OpRegistrar add_layer_norm_kernel{"add_layer_norm", DeviceType::cpu, add_layer_norm_cpu};

}  // namespace

}  // namespace troupe
