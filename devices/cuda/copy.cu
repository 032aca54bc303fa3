// Strided, dtype-converting copies on the device: what contiguous(), clone() and to(dtype) of a
// cuda tensor run, so they never leave the GPU.
#include "devices/cuda/kernel_util.cuh"

namespace troupe::cuda {

namespace {

template <class S, class D>
__global__ void gather_convert(const S* src, Strided<1> layout, D* dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[1];
    layout.offsets(i, off);
    dst[i] = convert_to<D>(src[off[0]]);
  }
}

}  // namespace

// dst: contiguous, same device and numel as src. False when src has too many uncollapsible dims
// (the caller then goes through the host).
bool copy_elements_on_device(const Tensor& src, Tensor& dst) {
  const int device = src.device().index;
  const int64_t n = src.numel();
  if (n == 0) return true;
  DeviceGuard on(device);
  const cudaStream_t stream = current_stream(device);
  void* out = dst.mutable_raw_data();
  if (src.is_contiguous() && src.dtype() == dst.dtype()) {
    check(cudaMemcpyAsync(out, src.raw_data(), src.nbytes(), cudaMemcpyDeviceToDevice, stream), "cudaMemcpyAsync",
          device);
    return true;
  }
  Strided<1> layout;
  if (!make_strided<1>(src.shape(), {&src.strides()}, layout)) return false;
  dispatch_device(src.dtype(), [&](auto stag) {
    using S = typename decltype(stag)::type;
    dispatch_device(dst.dtype(), [&](auto dtag) {
      using D = typename decltype(dtag)::type;
      gather_convert<S, D><<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const S*>(src.raw_data()), layout,
                                                                    static_cast<D*>(out), n);
    });
  });
  check_launch("copy_elements", device);
  return true;
}

}  // namespace troupe::cuda
