// sum on cuda: the reduced dims are moved last and each row of them is summed by one block, in
// float for the 16-bit floats, double for f64, int64 for integers (inference gives bool/u8/i32 an
// i64 result, so inputs are converted to the output dtype first).
#include "devices/cuda/kernel_util.cuh"
#include "devices/registry.h"

namespace troupe::cuda {

namespace {

template <class T>
__global__ void sum_rows(const T* in, T* out, int64_t n) {
  using A = Acc<T>;
  const T* row = in + blockIdx.x * n;
  A sum = 0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) sum += convert_to<A>(row[j]);
  sum = block_reduce(sum, SumOp{});
  if (threadIdx.x == 0) out[blockIdx.x] = convert_to<T>(sum);
}

std::vector<Tensor> sum_cuda(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  const TensorMeta& meta = call.outputs[0];
  const int device = x.device().index;
  DeviceGuard on(device);
  // Kept dims first, reduced dims last; no dims given reduces them all.
  std::vector<bool> reduced(x.dim(), call.attrs.get<std::vector<int64_t>>("dims").empty());
  for (int64_t d : call.attrs.get<std::vector<int64_t>>("dims")) reduced[wrap_dim("sum", d, x.dim())] = true;
  std::vector<int64_t> order;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (!reduced[d]) order.push_back(d);
  const size_t kept = order.size();
  for (int64_t d = 0; d < x.dim(); ++d)
    if (reduced[d]) order.push_back(d);
  const Tensor rows = x.permute(order).to(meta.dtype).contiguous();
  int64_t n = 1;
  for (size_t i = kept; i < order.size(); ++i) n *= x.size(order[i]);
  Tensor out = Tensor::empty(meta.shape, meta.dtype, x.device());
  const int64_t count = out.numel();
  if (count == 0) return {out};
  if (count > INT32_MAX) throw DeviceError("sum: too many rows for the cuda kernel: " + x.meta().str());
  if (meta.dtype == DType::boolean) throw DeviceError("sum: no cuda kernel for a bool result");
  dispatch_device(meta.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    sum_rows<<<static_cast<unsigned>(count), row_threads(n), 0, current_stream(device)>>>(
        static_cast<const T*>(rows.raw_data()), static_cast<T*>(out.mutable_raw_data()), n);
  });
  check_launch("sum", device);
  return {out};
}

const OpRegistrar sum_kernel{"sum", DeviceType::cuda, sum_cuda};

}  // namespace

}  // namespace troupe::cuda
