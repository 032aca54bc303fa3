// max_pool2d: x [N, C, H, W] -> (values [N, C, OH, OW], indices i64 [N, C, OH, OW]), PyTorch's
// F.max_pool2d(..., return_indices=True): each index is the winner's position h * W + w in its
// input plane (the first maximum; NaN wins, as in PyTorch). Padding counts as -inf. The backward,
// max_pool2d_backward(grad, indices), sends each output gradient to the input its index names.
// Plain loops over f32/f64: a pooling window reads a few neighbours and the indices make the
// backward a scatter, so a library primitive would gain little here.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "devices/registry.h"

namespace troupe {
namespace {

struct Pool {
  int64_t n, c, h, w, kh, kw, sh, sw, ph, pw, oh, ow;
};

std::pair<int64_t, int64_t> pair_attr(std::string_view op, const Attrs& attrs, const char* name, int64_t min,
                                      std::pair<int64_t, int64_t> fallback) {
  const auto& v = attrs.get<std::vector<int64_t>>(name);
  if (v.empty()) return fallback;
  if (v.size() > 2)
    throw ValueError(std::string(op) + ": " + name + " takes one or two values, got " + to_string(AttrValue(v)));
  const int64_t a = v[0], b = v.size() == 2 ? v[1] : v[0];
  if (a < min || b < min)
    throw ValueError(std::string(op) + ": " + name + " must be >= " + std::to_string(min) + ", got " +
                     to_string(AttrValue(v)));
  return {a, b};
}

Pool plan(std::string_view op, const TensorMeta& x, const Attrs& attrs) {
  if (x.dtype != DType::f32 && x.dtype != DType::f64)
    throw DTypeError(std::string(op) + ": expects an f32 or f64 tensor, got " + x.str());
  if (x.shape.size() != 4) throw ShapeError(std::string(op) + ": the input must be [N, C, H, W], got " + x.str());
  Pool p{};
  p.n = x.shape[0], p.c = x.shape[1], p.h = x.shape[2], p.w = x.shape[3];
  const auto& k = attrs.get<std::vector<int64_t>>("kernel_size");
  if (k.empty()) throw ValueError(std::string(op) + ": kernel_size is required");
  std::tie(p.kh, p.kw) = pair_attr(op, attrs, "kernel_size", 1, {0, 0});
  std::tie(p.sh, p.sw) = pair_attr(op, attrs, "stride", 1, {p.kh, p.kw});
  std::tie(p.ph, p.pw) = pair_attr(op, attrs, "padding", 0, {0, 0});
  if (2 * p.ph > p.kh || 2 * p.pw > p.kw)
    throw ValueError(std::string(op) + ": padding " + std::to_string(p.ph) + "x" + std::to_string(p.pw) +
                     " must be at most half the kernel " + std::to_string(p.kh) + "x" + std::to_string(p.kw));
  if (p.h + 2 * p.ph < p.kh || p.w + 2 * p.pw < p.kw)
    throw ShapeError(std::string(op) + ": the kernel " + std::to_string(p.kh) + "x" + std::to_string(p.kw) +
                     " is larger than the padded input of " + x.str());
  p.oh = (p.h + 2 * p.ph - p.kh) / p.sh + 1;
  p.ow = (p.w + 2 * p.pw - p.kw) / p.sw + 1;
  return p;
}

// One output row at a time, tap by tap across the row: branch-free selects the compiler
// vectorises (a data-dependent branch per element mispredicts half the time on real data). Taps
// run in window order and only a strictly larger value (or a NaN) takes over, so the first
// maximum wins, as in PyTorch.
template <class T>
void pool_forward(const Pool& p, const T* x, T* out, int64_t* index) {
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

std::vector<AttrSpec> pool_attrs() {
  return {{"kernel_size", AttrType::int_list, std::nullopt, "window; one value or (height, width)"},
          {"stride", AttrType::int_list, std::vector<int64_t>{}, "window step (default: the kernel size)"},
          {"padding", AttrType::int_list, std::vector<int64_t>{0, 0}, "-inf added on each side, at most half the kernel"}};
}

const OpRegistrar max_pool2d_op{OpDef{
    .name = "max_pool2d",
    .doc = "2-d max pooling of x [N,C,H,W] -> (values, i64 indices h*W+w of each maximum in its plane)",
    .attrs = pool_attrs(),
    .infer =
        [](const OpInfer& c) {
          const TensorMeta& x = c.inputs[0];
          const Pool p = plan(c.op, x, c.attrs);
          const Shape out{p.n, p.c, p.oh, p.ow};
          return std::vector<TensorMeta>{{x.dtype, out, x.device}, {DType::i64, out, x.device}};
        },
    .kernels = {{DeviceType::cpu, [](const OpCall& call) {
                   const Tensor x = call.inputs[0].contiguous();
                   const Pool p = plan(call.op, x.meta(), call.attrs);
                   Tensor out = Tensor::empty(call.outputs[0].shape, x.dtype());
                   Tensor index = Tensor::empty(call.outputs[1].shape, DType::i64);
                   int64_t* pi = index.mutable_data<int64_t>();
                   if (x.dtype() == DType::f32) pool_forward(p, x.data<float>(), out.mutable_data<float>(), pi);
                   else pool_forward(p, x.data<double>(), out.mutable_data<double>(), pi);
                   return std::vector<Tensor>{out, index};
                 }}}}};

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

const OpRegistrar max_pool2d_backward_op{OpDef{
    .name = "max_pool2d_backward",
    .doc = "gradient of max_pool2d: (grad, indices) -> dx [input_shape], each gradient added at its index",
    .min_inputs = 2,
    .max_inputs = 2,
    .attrs = {{"input_shape", AttrType::int_list, std::nullopt, "the forward input's shape [N,C,H,W]"}},
    .infer =
        [](const OpInfer& c) {
          const TensorMeta &g = c.inputs[0], &index = c.inputs[1];
          const Shape input = c.attrs.get<std::vector<int64_t>>("input_shape");
          if (g.dtype != DType::f32 && g.dtype != DType::f64)
            throw DTypeError("max_pool2d_backward: expects an f32 or f64 gradient, got " + g.str());
          if (index.dtype != DType::i64)
            throw DTypeError("max_pool2d_backward: indices must be i64, got " + index.str());
          if (g.shape.size() != 4 || g.shape != index.shape || input.size() != 4 || input[0] != g.shape[0] ||
              input[1] != g.shape[1])
            throw ShapeError("max_pool2d_backward: gradient " + g.str() + " and indices " + index.str() +
                             " do not pool input " + to_string(input));
          return std::vector<TensorMeta>{{g.dtype, input, g.device}};
        },
    .kernels = {{DeviceType::cpu, [](const OpCall& call) {
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
                   return std::vector<Tensor>{dx};
                 }}},
    .not_differentiable = kGradientKernel}};

}  // namespace
}  // namespace troupe
