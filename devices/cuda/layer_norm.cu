// layer_norm on cuda: one block per row of the normalised trailing dims; mean, then the biased
// variance from a second pass over the row (no cancellation), in float (double for f64).
#include "devices/cuda/kernel_util.cuh"
#include "devices/op_defs/norms.h"
#include "devices/registry.h"

namespace troupe::cuda {

namespace {

template <class T>
__global__ void layer_norm_rows(const T* in, const T* weight, const T* bias, T* out, int64_t n, double eps) {
  using A = Acc<T>;
  const T* row = in + blockIdx.x * n;
  T* out_row = out + blockIdx.x * n;
  A sum = 0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) sum += convert_to<A>(row[j]);
  const A mean = block_reduce(sum, SumOp{}) / A(n);
  A squares = 0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const A d = convert_to<A>(row[j]) - mean;
    squares += d * d;
  }
  const A inv_std = rsqrt_of(block_reduce(squares, SumOp{}) / A(n) + A(eps));
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    A y = (convert_to<A>(row[j]) - mean) * inv_std;
    if (weight) y *= convert_to<A>(weight[j]);
    if (bias) y += convert_to<A>(bias[j]);
    out_row[j] = convert_to<T>(y);
  }
}

std::vector<Tensor> layer_norm_cuda(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  const TensorMeta& meta = call.outputs[0];
  const int device = x.device().index;
  DeviceGuard on(device);
  const LayerNormAttrs attrs = layer_norm_attrs(call.attrs);
  const int64_t n = attrs.row_size();
  const Tensor in = x.to(meta.dtype).contiguous();
  // Weight and bias as contiguous vectors of x's dtype.
  auto operand = [&](size_t i) { return call.inputs.size() > i ? call.inputs[i].to(meta.dtype).contiguous() : Tensor(); };
  const Tensor weight = operand(1), bias = operand(2);
  Tensor out = Tensor::empty(meta.shape, meta.dtype, x.device());
  if (out.numel() == 0) return {out};
  const int64_t rows = out.numel() / n;
  if (rows > INT32_MAX) throw DeviceError("layer_norm: too many rows for the cuda kernel: " + x.meta().str());
  dispatch_floating("layer_norm", meta.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    auto data = [](const Tensor& t) { return t.defined() ? static_cast<const T*>(t.raw_data()) : nullptr; };
    layer_norm_rows<<<static_cast<unsigned>(rows), row_threads(n), 0, current_stream(device)>>>(
        data(in), data(weight), data(bias), static_cast<T*>(out.mutable_raw_data()), n,
        attrs.eps);
  });
  check_launch("layer_norm", device);
  return {out};
}

const OpRegistrar layer_norm_kernel{"layer_norm", DeviceType::cuda, layer_norm_cuda};

}  // namespace

}  // namespace troupe::cuda
