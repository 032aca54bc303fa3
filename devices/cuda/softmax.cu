// softmax and log_softmax on cuda: one block per row, max-subtracted, in float (double for f64).
// Any dim: other dims than the last are moved last, normalised, and moved back.
#include "devices/cuda/kernel_util.cuh"
#include "devices/registry.h"

namespace troupe::cuda {

namespace {

template <class T, bool Log>
__global__ void softmax_rows(const T* in, T* out, int64_t n) {
  using A = Acc<T>;
  const T* row = in + blockIdx.x * n;
  T* out_row = out + blockIdx.x * n;
  A max = -INFINITY;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) max = MaxOp{}(max, convert_to<A>(row[j]));
  max = block_reduce(max, MaxOp{});
  A sum = 0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) sum += exp_of(convert_to<A>(row[j]) - max);
  sum = block_reduce(sum, SumOp{});
  if constexpr (Log) {
    const A log_sum = log_of(sum);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
      out_row[j] = convert_to<T>((convert_to<A>(row[j]) - max) - log_sum);
  } else {
    const A scale = A(1) / sum;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
      out_row[j] = convert_to<T>(exp_of(convert_to<A>(row[j]) - max) * scale);
  }
}

template <bool Log>
std::vector<Tensor> softmax_cuda(const OpCall& call) {
  const char* op = Log ? "log_softmax" : "softmax";
  const Tensor& x = call.inputs[0];
  const TensorMeta& meta = call.outputs[0];
  const int64_t last = x.dim() - 1;
  const int64_t dim = x.dim() == 0 ? 0 : wrap_dim(op, call.attrs.get<int64_t>("dim"), x.dim());
  const int device = x.device().index;
  DeviceGuard on(device);
  // Rows along the normalised dim, contiguous; a 0-d tensor is one row of one.
  const Tensor rows = (dim == last || x.dim() == 0 ? x : x.transpose(dim, last)).to(meta.dtype).contiguous();
  Tensor out = Tensor::empty(rows.shape(), meta.dtype, x.device());
  const int64_t n = x.dim() == 0 ? 1 : rows.size(-1);
  if (out.numel() > 0) {
    const int64_t count = out.numel() / n;
    if (count > INT32_MAX)
      throw DeviceError(std::string(op) + ": too many rows for the cuda kernel: " + x.meta().str());
    dispatch_floating(op, meta.dtype, [&](auto tag) {
      using T = typename decltype(tag)::type;
      softmax_rows<T, Log><<<static_cast<unsigned>(count), row_threads(n), 0, current_stream(device)>>>(
          static_cast<const T*>(rows.raw_data()), static_cast<T*>(out.mutable_raw_data()), n);
    });
    check_launch(op, device);
  }
  return {dim == last || x.dim() == 0 ? out : out.transpose(dim, last).contiguous()};
}

const OpRegistrar softmax_kernel{"softmax", DeviceType::cuda, softmax_cuda<false>};
const OpRegistrar log_softmax_kernel{"log_softmax", DeviceType::cuda, softmax_cuda<true>};

}  // namespace

}  // namespace troupe::cuda
