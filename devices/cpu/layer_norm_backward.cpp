// layer_norm_backward(grad, x[, weight]): the gradients of layer_norm over the trailing dims named
// by normalized_shape. Per row of n elements, with xhat = (x - mean) * rstd and gw = grad * weight:
// dx = rstd * (gw - mean(gw) - xhat * mean(gw * xhat)); d weight and d bias sum grad * xhat and
// grad over the rows. Outputs: dx, then d weight and d bias when `affine` (weight given; the
// bias gradient is returned whether or not the forward had a bias). f32 and f64, accumulated in f64.
#include <cmath>
#include <string>
#include <vector>

#include "devices/op_defs/norms.h"
#include "devices/registry.h"

namespace troupe {
namespace {

template <class T>
void rows_backward(const T* g, const T* x, const T* w, T* dx, T* dw, T* db, int64_t rows, int64_t n, double eps) {
  std::vector<double> sum_w(dw ? n : 0, 0.0), sum_b(dw ? n : 0, 0.0), xhat(n), gw(n);
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * n;
    const T* gr = g + r * n;
    double mean = 0, var = 0;
    for (int64_t i = 0; i < n; ++i) mean += xr[i];
    mean /= static_cast<double>(n);
    for (int64_t i = 0; i < n; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    const double rstd = 1.0 / std::sqrt(var / static_cast<double>(n) + eps);
    double mean_gw = 0, mean_gw_xhat = 0;
    for (int64_t i = 0; i < n; ++i) {
      xhat[i] = (xr[i] - mean) * rstd;
      gw[i] = w ? double(gr[i]) * w[i] : double(gr[i]);
      mean_gw += gw[i];
      mean_gw_xhat += gw[i] * xhat[i];
      if (dw) {
        sum_w[i] += double(gr[i]) * xhat[i];
        sum_b[i] += gr[i];
      }
    }
    mean_gw /= static_cast<double>(n);
    mean_gw_xhat /= static_cast<double>(n);
    for (int64_t i = 0; i < n; ++i) dx[r * n + i] = static_cast<T>(rstd * (gw[i] - mean_gw - xhat[i] * mean_gw_xhat));
  }
  for (size_t i = 0; i < sum_w.size(); ++i) dw[i] = static_cast<T>(sum_w[i]), db[i] = static_cast<T>(sum_b[i]);
}

std::vector<Tensor> layer_norm_backward_cpu(const OpCall& call) {
  const Tensor g = call.inputs[0].contiguous(), x = call.inputs[1].contiguous();
  const bool affine = call.inputs.size() > 2;
  const Tensor w = affine ? call.inputs[2].contiguous() : Tensor();
  const LayerNormAttrs attrs = layer_norm_attrs(call.attrs);
  const int64_t n = attrs.row_size();
  const int64_t rows = n == 0 ? 0 : x.numel() / n;
  Tensor dx = Tensor::empty(x.shape(), x.dtype());
  Tensor dw = affine ? Tensor::empty(w.shape(), w.dtype()) : Tensor();
  Tensor db = affine ? Tensor::empty(w.shape(), w.dtype()) : Tensor();
  const double eps = attrs.eps;
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>)
      rows_backward<T>(g.data<T>(), x.data<T>(), affine ? w.data<T>() : nullptr, dx.mutable_data<T>(),
                       affine ? dw.mutable_data<T>() : nullptr, affine ? db.mutable_data<T>() : nullptr, rows, n, eps);
  });
  if (affine) return {dx, dw, db};
  return {dx};
}

const OpRegistrar layer_norm_backward_kernel{"layer_norm_backward", DeviceType::cpu, layer_norm_backward_cpu};

}  // namespace
}  // namespace troupe
