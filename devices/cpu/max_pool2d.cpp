// The CPU kernels of max_pool2d and max_pool2d_backward (the ops: devices/op_defs/max_pool2d.cpp).
// Plain loops over f32/f64: a pooling window reads a few neighbours and the indices make the
// backward a scatter, so a library primitive would gain little here.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "devices/op_defs/max_pool2d.h"
#include "devices/registry.h"

namespace troupe {
namespace {

// One output row at a time, tap by tap across the row: branch-free selects the compiler
// vectorises (a data-dependent branch per element mispredicts half the time on real data). Taps
// run in window order and only a strictly larger value (or a NaN) takes over, so the first
// maximum wins, as in PyTorch.
template <class T>
void pool_forward(const MaxPool2dGeometry& p, const T* x, T* out, int64_t* index) {
  std::vector<T> best(p.ow);
  std::vector<int64_t> at(p.ow);
  // Output columns [first[j], last[j]) have tap column j inside the input.
  std::vector<int64_t> first(p.kw), last(p.kw);
  for (int64_t j = 0; j < p.kw; ++j) {
    first[j] = std::clamp<int64_t>((p.pw - j + p.sw - 1) / p.sw, 0, p.ow);
    last[j] = std::clamp<int64_t>((p.w - 1 + p.pw - j) / p.sw + 1, first[j], p.ow);
  }
  for (int64_t plane = 0; plane < p.n * p.c; ++plane) {
    const T* in = x + plane * p.h * p.w;
    for (int64_t y = 0; y < p.oh; ++y, out += p.ow, index += p.ow) {
      const int64_t top = y * p.sh - p.ph;
      for (int64_t x_ = 0; x_ < p.ow; ++x_) {
        best[x_] = -std::numeric_limits<T>::infinity();
        at[x_] = std::max<int64_t>(top, 0) * p.w + std::max<int64_t>(x_ * p.sw - p.pw, 0);
      }
      for (int64_t i = 0; i < p.kh; ++i) {
        const int64_t iy = top + i;
        if (iy < 0 || iy >= p.h) continue;
        for (int64_t j = 0; j < p.kw; ++j) {
          const int64_t base = iy * p.w - p.pw + j;  // input index of output column 0's tap
          const T* row = in + base;
          T* b = best.data();
          int64_t* a = at.data();
          for (int64_t x_ = first[j]; x_ < last[j]; ++x_) {
            const T v = row[x_ * p.sw];
            const bool take = (v > b[x_]) | (v != v);
            b[x_] = take ? v : b[x_];
            a[x_] = take ? base + x_ * p.sw : a[x_];
          }
        }
      }
      std::copy(best.begin(), best.end(), out);
      std::copy(at.begin(), at.end(), index);
    }
  }
}

std::vector<Tensor> max_pool2d_cpu(const OpCall& call) {
  const Tensor x = call.inputs[0].contiguous();
  const MaxPool2dGeometry p = max_pool2d_geometry(call.op, x.meta(), call.attrs);
  Tensor out = Tensor::empty(call.outputs[0].shape, x.dtype());
  Tensor index = Tensor::empty(call.outputs[1].shape, DType::i64);
  int64_t* pi = index.mutable_data<int64_t>();
  if (x.dtype() == DType::f32) pool_forward(p, x.data<float>(), out.mutable_data<float>(), pi);
  else pool_forward(p, x.data<double>(), out.mutable_data<double>(), pi);
  return {out, index};
}

template <class T>
void pool_backward(const T* grad, const int64_t* index, int64_t planes, int64_t per_out, int64_t per_in, T* dx) {
  std::fill(dx, dx + planes * per_in, T(0));
  for (int64_t plane = 0; plane < planes; ++plane) {
    T* d = dx + plane * per_in;
    for (int64_t i = 0; i < per_out; ++i) d[index[i]] += grad[i];
    grad += per_out;
    index += per_out;
  }
}

std::vector<Tensor> max_pool2d_backward_cpu(const OpCall& call) {
  const Tensor g = call.inputs[0].contiguous(), index = call.inputs[1].contiguous();
  const Shape& in = call.outputs[0].shape;
  const int64_t planes = in[0] * in[1], per_in = in[2] * in[3], per_out = g.size(2) * g.size(3);
  const int64_t* pi = index.data<int64_t>();
  for (int64_t i = 0; i < index.numel(); ++i)
    if (pi[i] < 0 || pi[i] >= per_in)
      throw IndexError("max_pool2d_backward: index " + std::to_string(pi[i]) + " is outside a " +
                       std::to_string(in[2]) + "x" + std::to_string(in[3]) + " plane");
  Tensor dx = Tensor::empty(in, g.dtype());
  if (g.dtype() == DType::f32)
    pool_backward(g.data<float>(), pi, planes, per_out, per_in, dx.mutable_data<float>());
  else
    pool_backward(g.data<double>(), pi, planes, per_out, per_in, dx.mutable_data<double>());
  return {dx};
}

const OpRegistrar max_pool2d_kernel{"max_pool2d", DeviceType::cpu, max_pool2d_cpu};
const OpRegistrar max_pool2d_backward_kernel{"max_pool2d_backward", DeviceType::cpu, max_pool2d_backward_cpu};

}  // namespace
}  // namespace troupe
