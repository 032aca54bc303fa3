// layer_norm on the CPU: normalises x over its trailing dims named by normalized_shape (biased
// variance, like PyTorch), then scales by weight and shifts by bias when given. Floating inputs;
// f16/bf16 compute in f32. Rows are contiguous: two vectorised passes (mean, then variance of
// the centred row, which keeps precision when the mean is large) and one to write.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "devices/cpu/loops.h"
#include "devices/cpu/parallel_ranges.h"
#include "devices/op_defs/norms.h"
#include "devices/registry.h"

namespace troupe {

namespace {

template <class T>
T sum_squares_row(const T* x, int64_t n) {
  constexpr int64_t kLanes = 16;
  T lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int64_t j = 0; j < kLanes; ++j) lanes[j] += x[i + j] * x[i + j];
  T total = 0;
  for (; i < n; ++i) total += x[i] * x[i];
  for (int64_t j = 0; j < kLanes; ++j) total += lanes[j];
  return total;
}

// y = (x - mean) / sqrt(var + eps) * weight + bias for each row of n; weight and bias may be null.
template <class T>
void layer_norm_rows(const T* x, const T* weight, const T* bias, T* y, int64_t rows, int64_t n, T eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* in = x + r * n;
    T* out = y + r * n;
    const T mean = sum_row<T>(in, n) / static_cast<T>(n);
    for (int64_t i = 0; i < n; ++i) out[i] = in[i] - mean;
    const T var = sum_squares_row(out, n) / static_cast<T>(n);
    const T rstd = T(1) / std::sqrt(var + eps);
    if (weight && bias) {
      for (int64_t i = 0; i < n; ++i) out[i] = out[i] * rstd * weight[i] + bias[i];
    } else if (weight) {
      for (int64_t i = 0; i < n; ++i) out[i] = out[i] * rstd * weight[i];
    } else {
      for (int64_t i = 0; i < n; ++i) out[i] *= rstd;
    }
  }
}

std::vector<Tensor> layer_norm_kernel(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  const LayerNormAttrs attrs = layer_norm_attrs(call.attrs);
  const int64_t n = attrs.row_size();
  const DType compute = x.dtype() == DType::f64 ? DType::f64 : DType::f32;
  Tensor out = Tensor::empty(x.shape(), compute);
  if (out.numel() == 0) return {out.to(x.dtype())};
  const Tensor in = x.to(compute).contiguous();
  std::vector<Tensor> params;  // weight, bias as contiguous compute-dtype tensors
  for (size_t i = 1; i < call.inputs.size(); ++i) params.push_back(call.inputs[i].to(compute).contiguous());
  auto run = [&](auto* y) {
    using T = std::remove_pointer_t<decltype(y)>;
    const T* weight = params.size() > 0 ? params[0].data<T>() : nullptr;
    const T* bias = params.size() > 1 ? params[1].data<T>() : nullptr;
    const T* rows = in.data<T>();
    const T eps = static_cast<T>(attrs.eps);
    parallel_ranges(out.numel() / n, std::max<int64_t>(1, (1 << 16) / n), 1, [&](int64_t begin, int64_t end) {
      layer_norm_rows(rows + begin * n, weight, bias, y + begin * n, end - begin, n, eps);
    });
  };
  if (compute == DType::f64) run(out.mutable_data<double>());
  else run(out.mutable_data<float>());
  return {out.to(x.dtype())};
}

const OpRegistrar layer_norm_cpu{"layer_norm", DeviceType::cpu, layer_norm_kernel};

}  // namespace

}  // namespace troupe
