// layer_norm_backward on cuda (the op: devices/op_defs/norms.cpp; f32 and
// f64, accumulated in double as there). One block per row computes the row's mean and rstd and dx;
// then, with a weight, one thread per column sums grad * xhat and grad over the rows in order, so
// the weight and bias gradients need no atomics and repeat bit for bit.
#include "devices/cuda/kernel_util.cuh"
#include "devices/op_defs/norms.h"
#include "devices/registry.h"

namespace troupe::cuda {

namespace {

template <class T>
__global__ void layer_norm_backward_rows(const T* g, const T* x, const T* w, T* dx, double* stats, int64_t n,
                                         double eps) {
  const T* xr = x + blockIdx.x * n;
  const T* gr = g + blockIdx.x * n;
  double sum = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) sum += double(xr[i]);
  const double mean = block_reduce(sum, SumOp{}) / double(n);
  double squares = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) squares += (double(xr[i]) - mean) * (double(xr[i]) - mean);
  const double rstd = 1.0 / ::sqrt(block_reduce(squares, SumOp{}) / double(n) + eps);
  double sum_gw = 0, sum_gw_xhat = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const double gw = w ? double(gr[i]) * double(w[i]) : double(gr[i]);
    sum_gw += gw;
    sum_gw_xhat += gw * ((double(xr[i]) - mean) * rstd);
  }
  const double mean_gw = block_reduce(sum_gw, SumOp{}) / double(n);
  const double mean_gw_xhat = block_reduce(sum_gw_xhat, SumOp{}) / double(n);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const double xhat = (double(xr[i]) - mean) * rstd;
    const double gw = w ? double(gr[i]) * double(w[i]) : double(gr[i]);
    dx[blockIdx.x * n + i] = static_cast<T>(rstd * (gw - mean_gw - xhat * mean_gw_xhat));
  }
  if (threadIdx.x == 0) {
    stats[2 * blockIdx.x] = mean;
    stats[2 * blockIdx.x + 1] = rstd;
  }
}

template <class T>
__global__ void layer_norm_backward_columns(const T* g, const T* x, const double* stats, T* dw, T* db, int64_t rows,
                                            int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    double sum_w = 0, sum_b = 0;
    for (int64_t r = 0; r < rows; ++r) {
      const double gri = double(g[r * n + i]);
      sum_w += gri * ((double(x[r * n + i]) - stats[2 * r]) * stats[2 * r + 1]);
      sum_b += gri;
    }
    dw[i] = static_cast<T>(sum_w);
    db[i] = static_cast<T>(sum_b);
  }
}

std::vector<Tensor> layer_norm_backward_cuda(const OpCall& call) {
  const Tensor g = call.inputs[0].contiguous(), x = call.inputs[1].contiguous();
  const bool affine = call.inputs.size() > 2;
  const Tensor w = affine ? call.inputs[2].contiguous() : Tensor();
  const LayerNormAttrs attrs = layer_norm_attrs(call.attrs);
  const int64_t n = attrs.row_size();
  const int64_t rows = n == 0 ? 0 : x.numel() / n;
  const int device = x.device().index;
  DeviceGuard on(device);
  const cudaStream_t stream = current_stream(device);
  Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor dw = affine ? Tensor::empty(w.shape(), w.dtype(), x.device()) : Tensor();
  Tensor db = affine ? Tensor::empty(w.shape(), w.dtype(), x.device()) : Tensor();
  if (rows > INT32_MAX) throw DeviceError("layer_norm_backward: too many rows for the cuda kernel: " + x.meta().str());
  Tensor stats = Tensor::empty({std::max<int64_t>(rows, 1), 2}, DType::f64, x.device());
  dispatch_floating("layer_norm_backward", x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      const T* pw = affine ? static_cast<const T*>(w.raw_data()) : nullptr;
      if (rows > 0)
        layer_norm_backward_rows<<<static_cast<unsigned>(rows), row_threads(n), 0, stream>>>(
            static_cast<const T*>(g.raw_data()), static_cast<const T*>(x.raw_data()), pw,
            static_cast<T*>(dx.mutable_raw_data()), device_write<double>(stats), n, attrs.eps);
      if (affine && n > 0)
        layer_norm_backward_columns<<<blocks_for(n), kThreads, 0, stream>>>(
            static_cast<const T*>(g.raw_data()), static_cast<const T*>(x.raw_data()), device_read<double>(stats),
            static_cast<T*>(dw.mutable_raw_data()), static_cast<T*>(db.mutable_raw_data()), rows, n);
    } else {
      throw DeviceError("layer_norm_backward: no cuda kernel for " + x.meta().str());
    }
  });
  check_launch("layer_norm_backward", device);
  if (affine) return {dx, dw, db};
  return {dx};
}

const OpRegistrar layer_norm_backward_kernel{"layer_norm_backward", DeviceType::cuda, layer_norm_backward_cuda};

}  // namespace

}  // namespace troupe::cuda
