// softmax and log_softmax over one dim on the CPU: floating inputs only, f16/bf16 computed in f32.
// Numerically stable: each fibre's maximum is subtracted before exp. The usual case, the last dim
// of a contiguous tensor, runs row by row through the vectorised exp; another dim runs as
// columns, vectorised across the dims after it.
#include <cmath>
#include <string>
#include <vector>

#include "devices/cpu/activations.h"
#include "devices/cpu/loops.h"
#include "devices/registry.h"

namespace troupe {

namespace {

void exp_in_place(float* y, int64_t n) { exp_f32(y, y, n); }
void exp_in_place(double* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = std::exp(y[i]);
}

template <class T>
void softmax_row(const T* x, T* y, int64_t n, bool log) {
  const T top = fold_row<T>(x, n, NanMax{});
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] - top;
  exp_in_place(y, n);
  const T total = sum_row<T>(y, n);
  if (log) {
    const T log_total = std::log(total);
    for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - top) - log_total;
  } else {
    const T scale = T(1) / total;
    for (int64_t i = 0; i < n; ++i) y[i] *= scale;
  }
}

// x and y are [n, inner] slabs; the softmax runs down each column.
template <class T>
void softmax_columns(const T* x, T* y, int64_t n, int64_t inner, bool log, std::vector<T>& top,
                     std::vector<T>& total) {
  std::copy(x, x + inner, top.begin());
  for (int64_t r = 1; r < n; ++r)
    for (int64_t i = 0; i < inner; ++i) top[i] = NanMax{}(top[i], x[r * inner + i]);
  std::fill(total.begin(), total.end(), T(0));
  for (int64_t r = 0; r < n; ++r) {
    T* row = y + r * inner;
    for (int64_t i = 0; i < inner; ++i) row[i] = x[r * inner + i] - top[i];
    exp_in_place(row, inner);
    for (int64_t i = 0; i < inner; ++i) total[i] += row[i];
  }
  if (log) {
    for (int64_t i = 0; i < inner; ++i) total[i] = std::log(total[i]);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t i = 0; i < inner; ++i) y[r * inner + i] = (x[r * inner + i] - top[i]) - total[i];
  } else {
    for (int64_t i = 0; i < inner; ++i) total[i] = T(1) / total[i];
    for (int64_t r = 0; r < n; ++r)
      for (int64_t i = 0; i < inner; ++i) y[r * inner + i] *= total[i];
  }
}

std::vector<Tensor> softmax_kernel(const OpCall& call, bool log) {
  const Tensor& x = call.inputs[0];
  const int64_t dim = wrap_dim(std::string(call.op).c_str(), call.attrs.get<int64_t>("dim"), x.dim());
  int64_t outer = 1, n = 1, inner = 1;
  for (int64_t d = 0; d < x.dim(); ++d) (d < dim ? outer : d == dim ? n : inner) *= x.shape()[d];
  const DType compute = x.dtype() == DType::f64 ? DType::f64 : DType::f32;
  const Tensor in = x.to(compute).contiguous();
  Tensor out = Tensor::empty(x.shape(), compute);
  if (out.numel() == 0) return {out.to(x.dtype())};
  auto run = [&](auto* y) {
    using T = std::remove_pointer_t<decltype(y)>;
    const T* px = in.data<T>();
    if (inner == 1) {
      for (int64_t o = 0; o < outer; ++o) softmax_row(px + o * n, y + o * n, n, log);
      return;
    }
    std::vector<T> top(inner), total(inner);
    for (int64_t o = 0; o < outer; ++o)
      softmax_columns(px + o * n * inner, y + o * n * inner, n, inner, log, top, total);
  };
  if (compute == DType::f64) run(out.mutable_data<double>());
  else run(out.mutable_data<float>());
  return {out.to(x.dtype())};
}

std::vector<Tensor> softmax_cpu(const OpCall& c) { return softmax_kernel(c, false); }
std::vector<Tensor> log_softmax_cpu(const OpCall& c) { return softmax_kernel(c, true); }

const OpRegistrar softmax_cpu_kernel{"softmax", DeviceType::cpu, softmax_cpu};
const OpRegistrar log_softmax_cpu_kernel{"log_softmax", DeviceType::cpu, log_softmax_cpu};

}  // namespace

}  // namespace troupe
