// gather_nd on cuda (ONNX GatherND; devices/cpu/gather_nd.cpp has the semantics): one thread per
// output element adds up its index row's slice offset in data and copies one element, so a row's
// slice is read by consecutive threads (coalesced) whatever its length. Indices are checked on the
// device: an index outside [-n, n) gives its slice zeros and an IndexError at the host's next wait
// for the device (cuda/kernel_errors.h); the host never reads indices.
#include "devices/cuda/gather_util.cuh"
#include "devices/cuda/kernel_errors.h"
#include "devices/cuda/kernel_util.cuh"
#include "devices/registry.h"

namespace troupe::cuda {

namespace {

// data is contiguous: a batch entry is a block of batch_elems, index k steps by stride[k].
struct GatherNdLayout {
  int m = 0;                   // indices per row
  int b = 0;                   // batch dims
  int64_t slice = 1;           // elements per slice
  int64_t rows_per_batch = 1;  // index rows per batch entry
  int64_t batch_elems = 1;     // elements of data per batch entry
  int64_t size[kMaxDims] = {};
  int64_t stride[kMaxDims] = {};
};

template <class E, class I>
__global__ void gather_nd_kernel(const E* data, const I* indices, E* out, GatherNdLayout g, int64_t n,
                                 KernelError* error, const char* op) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = i / g.slice, j = i - row * g.slice;
    int64_t offset = row / g.rows_per_batch * g.batch_elems;
    bool in_range = true;
    for (int k = 0; k < g.m; ++k) {
      int64_t v = indices[row * g.m + k];
      const int64_t size = g.size[k];
      if (v < -size || v >= size) {
        if (j == 0) report_index_error(error, op, v, size, g.b + k, row * g.m + k);  // once per row
        in_range = false;
        break;
      }
      offset += (v < 0 ? v + size : v) * g.stride[k];
    }
    out[i] = in_range ? data[offset + j] : E{};
  }
}

std::vector<Tensor> gather_nd_cuda(const OpCall& call) {
  const Tensor data = call.inputs[0].contiguous();
  const Tensor& indices_in = call.inputs[1];
  const TensorMeta& meta = call.outputs[0];
  const int device = data.device().index;
  DeviceGuard on(device);
  Tensor out = Tensor::empty(meta.shape, meta.dtype, data.device());
  const int64_t n = out.numel();
  if (n == 0) return {out};
  const int64_t b = call.attrs.get<int64_t>("batch_dims");
  const int64_t m = indices_in.size(-1);
  if (m > kMaxDims)
    throw DeviceError("gather_nd: the cuda kernel takes at most " + std::to_string(kMaxDims) +
                      " indices per row, got " + indices_in.meta().str());
  GatherNdLayout g;
  g.m = static_cast<int>(m);
  g.b = static_cast<int>(b);
  for (int64_t d = b + m; d < data.dim(); ++d) g.slice *= data.size(d);
  for (int64_t d = b; d < data.dim(); ++d) g.batch_elems *= data.size(d);
  for (int64_t k = 0; k < m; ++k) {
    g.size[k] = data.size(b + k);
    g.stride[k] = data.strides()[b + k];
  }
  int64_t batches = 1;
  for (int64_t d = 0; d < b; ++d) batches *= indices_in.size(d);
  g.rows_per_batch = indices_in.numel() / m / batches;
  // Each thread moves the widest unit (up to 16 bytes) that every slice, offset and pointer is a
  // multiple of: a row of 256 floats is 64 loads of 16 bytes instead of 256 of 4.
  const int64_t item = static_cast<int64_t>(itemsize(data.dtype()));
  int64_t width = 16;
  auto fits = [&](int64_t w) {
    if ((g.slice * item) % w || (g.batch_elems * item) % w) return false;
    for (int k = 0; k < g.m; ++k)
      if ((g.stride[k] * item) % w) return false;
    return reinterpret_cast<uintptr_t>(data.raw_data()) % w == 0 && reinterpret_cast<uintptr_t>(out.raw_data()) % w == 0;
  };
  while (width > item && !fits(width)) width /= 2;
  if (width > item) {
    const int64_t scale = width / item;
    g.slice /= scale;
    g.batch_elems /= scale;
    for (int k = 0; k < g.m; ++k) g.stride[k] /= scale;
  }
  const int64_t units = n * item / width;
  const Tensor indices = indices_in.contiguous();
  KernelError* error = kernel_error_word(device);
  auto launch = [&](auto etag) {
    using E = typename decltype(etag)::type;
    dispatch_index(indices.dtype(), [&](auto itag) {
      using I = typename decltype(itag)::type;
      gather_nd_kernel<<<blocks_for(units), kThreads, 0, current_stream(device)>>>(
          static_cast<const E*>(data.raw_data()), static_cast<const I*>(indices.raw_data()),
          static_cast<E*>(out.mutable_raw_data()), g, units, error, "gather_nd");
    });
  };
  if (width == 16) launch(TypeTag<uint4>{});
  else dispatch_width(static_cast<size_t>(std::max(width, item)), launch);
  check_launch("gather_nd", device);
  return {out};
}

const OpRegistrar gather_nd_kernel_cuda{"gather_nd", DeviceType::cuda, gather_nd_cuda};

}  // namespace

}  // namespace troupe::cuda
