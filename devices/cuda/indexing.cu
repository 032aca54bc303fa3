// index_select, embedding and where on cuda (devices/cpu/index_select.cpp and where.cpp have the
// semantics). index_select and embedding are one gather of whole runs: out[o, j, :] =
// x[o, index[j], :], one thread per output element. Indices outside [0, size) give zeros and an
// IndexError at the host's next wait for the device (cuda/kernel_errors.h), as on the CPU without
// the host reading the index.
#include "devices/cuda/gather_util.cuh"
#include "devices/cuda/kernel_errors.h"
#include "devices/cuda/kernel_util.cuh"
#include "devices/registry.h"

namespace troupe::cuda {

namespace {

// x as a contiguous [outer, rows, run] block, picked along rows by `picks` indices.
struct Runs {
  int64_t rows = 1, picks = 1, run = 1;
  int dim = 0;  // the dim of x the index picks along, for the error message
};

template <class E, class I>
__global__ void gather_runs(const E* x, const I* index, E* out, Runs r, int64_t n, KernelError* error,
                            const char* op) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t within = i % r.run, pick = i / r.run % r.picks, o = i / (r.run * r.picks);
    const int64_t row = index[pick];
    if (row < 0 || row >= r.rows) {
      if (within == 0 && o == 0) report_index_error(error, op, row, r.rows, r.dim, pick);
      out[i] = E(0);
      continue;
    }
    out[i] = x[(o * r.rows + row) * r.run + within];
  }
}

Tensor gather(const char* op, const Tensor& x_in, int64_t dim, const Tensor& index_in, const TensorMeta& meta) {
  const int device = x_in.device().index;
  DeviceGuard on(device);
  Tensor out = Tensor::empty(meta.shape, meta.dtype, x_in.device());
  const int64_t n = out.numel();
  if (n == 0) return out;
  const Tensor x = x_in.contiguous(), index = index_in.contiguous();
  Runs r;
  r.rows = x.size(dim);
  r.picks = index.numel();
  r.dim = static_cast<int>(dim);
  for (int64_t d = dim + 1; d < x.dim(); ++d) r.run *= x.size(d);
  KernelError* error = kernel_error_word(device);
  dispatch_width(itemsize(x.dtype()), [&](auto etag) {
    using E = typename decltype(etag)::type;
    dispatch_index(index.dtype(), [&](auto itag) {
      using I = typename decltype(itag)::type;
      gather_runs<<<blocks_for(n), kThreads, 0, current_stream(device)>>>(
          static_cast<const E*>(x.raw_data()), static_cast<const I*>(index.raw_data()),
          static_cast<E*>(out.mutable_raw_data()), r, n, error, op);
    });
  });
  check_launch(op, device);
  return out;
}

std::vector<Tensor> index_select_cuda(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  const int64_t dim = wrap_dim("index_select", call.attrs.get<int64_t>("dim"), x.dim());
  return {gather("index_select", x, dim, call.inputs[1], call.outputs[0])};
}

std::vector<Tensor> embedding_cuda(const OpCall& call) {
  return {gather("embedding", call.inputs[1], 0, call.inputs[0], call.outputs[0])};
}

const OpRegistrar index_select_cuda_kernel{"index_select", DeviceType::cuda, index_select_cuda};
const OpRegistrar embedding_cuda_kernel{"embedding", DeviceType::cuda, embedding_cuda};

template <class T>
__global__ void where_kernel(const bool* condition, const T* x, const T* y, T* out, Strided<3> layout, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[3];
    layout.offsets(i, off);
    out[i] = condition[off[0]] ? x[off[1]] : y[off[2]];
  }
}

// The three inputs broadcast through stride-0 views; x and y are promoted before expanding, so a
// conversion touches each input element once.
std::vector<Tensor> where_cuda(const OpCall& call) {
  const TensorMeta& meta = call.outputs[0];
  const int device = call.inputs[0].device().index;
  DeviceGuard on(device);
  Tensor out = Tensor::empty(meta.shape, meta.dtype, call.inputs[0].device());
  const int64_t n = out.numel();
  if (n == 0) return {out};
  Tensor condition = call.inputs[0].expand(meta.shape);
  Tensor x = call.inputs[1].to(meta.dtype).expand(meta.shape);
  Tensor y = call.inputs[2].to(meta.dtype).expand(meta.shape);
  Strided<3> layout;
  if (!make_strided<3>(meta.shape, {&condition.strides(), &x.strides(), &y.strides()}, layout)) {
    condition = condition.contiguous();  // too many dims for the kernel's index: materialise the broadcast
    x = x.contiguous();
    y = y.contiguous();
    make_strided<3>(meta.shape, {&condition.strides(), &x.strides(), &y.strides()}, layout);
  }
  dispatch_device(meta.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    where_kernel<<<blocks_for(n), kThreads, 0, current_stream(device)>>>(
        static_cast<const bool*>(condition.raw_data()), static_cast<const T*>(x.raw_data()),
        static_cast<const T*>(y.raw_data()), static_cast<T*>(out.mutable_raw_data()), layout, n);
  });
  check_launch("where", device);
  return {out};
}

const OpRegistrar where_cuda_kernel{"where", DeviceType::cuda, where_cuda};

}  // namespace

}  // namespace troupe::cuda
