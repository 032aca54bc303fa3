// dropout, dropout2d and dropout_backward on cuda (devices/op_defs/dropout.cpp has the semantics: the
// outputs are y and the bool keep-mask that dropout_backward applies again). Each call takes one
// draw from the calling thread's generator (devices/random.h) as the key of a counter-based
// generator, Philox4x32-10: mask element i keeps when the uniform made from counter i is >= p, so
// the mask depends on the seed and the element only, not on launch shapes, and manual_seed()
// repeats it. The masks differ from the CPU's (another generator), with the same distribution.
#include "devices/cuda/kernel_util.cuh"
#include "devices/random.h"
#include "devices/op_defs/dropout.h"
#include "devices/registry.h"

namespace troupe::cuda {

namespace {

// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011).
__device__ uint4 philox(uint4 counter, uint2 key) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u, kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const uint32_t hi0 = __umulhi(kMul0, counter.x), lo0 = kMul0 * counter.x;
    const uint32_t hi1 = __umulhi(kMul1, counter.z), lo1 = kMul1 * counter.z;
    counter = make_uint4(hi1 ^ counter.y ^ key.x, lo1, hi0 ^ counter.w ^ key.y, lo0);
    key.x += kWeyl0;
    key.y += kWeyl1;
  }
  return counter;
}

// mask[i] = uniform(seed, i) >= p, the uniform in [0, 1) with 53 random bits like Generator::uniform.
__global__ void draw_mask(bool* mask, int64_t n, uint64_t seed, double p) {
  const uint2 key = make_uint2(static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const uint4 r = philox(make_uint4(static_cast<uint32_t>(i), static_cast<uint32_t>(uint64_t(i) >> 32), 0, 0), key);
    const uint64_t bits = (uint64_t(r.x) << 32 | r.y) >> 11;
    mask[i] = static_cast<double>(bits) * 0x1.0p-53 >= p;
  }
}

// out = x * mask * scale, the mask broadcast over x (stride 0 in the dims it lacks).
template <class T>
__global__ void apply_mask(const T* x, const bool* mask, T* out, Strided<2> layout, int64_t n, double scale) {
  using A = Acc<T>;
  const A s = static_cast<A>(scale);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[2];
    layout.offsets(i, off);
    out[i] = convert_to<T>(mask[off[1]] ? convert_to<A>(x[off[0]]) * s : A(0));
  }
}

Tensor masked(const char* op, const Tensor& x, const Tensor& mask_in, double p) {
  const int device = x.device().index;
  DeviceGuard on(device);
  Tensor out = Tensor::empty(x.shape(), x.dtype(), x.device());
  const int64_t n = out.numel();
  if (n == 0) return out;
  Tensor in = x, mask = mask_in.expand(x.shape());
  Strided<2> layout;
  if (!make_strided<2>(x.shape(), {&in.strides(), &mask.strides()}, layout)) {
    in = in.contiguous();  // too many dims for the kernel's index
    mask = mask.contiguous();
    make_strided<2>(x.shape(), {&in.strides(), &mask.strides()}, layout);
  }
  dispatch_floating(op, x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    apply_mask<<<blocks_for(n), kThreads, 0, current_stream(device)>>>(
        static_cast<const T*>(in.raw_data()), static_cast<const bool*>(mask.raw_data()),
        static_cast<T*>(out.mutable_raw_data()), layout, n, p < 1.0 ? 1.0 / (1.0 - p) : 0.0);
  });
  check_launch(op, device);
  return out;
}

std::vector<Tensor> dropout_cuda(const OpCall& call) {
  const std::string op(call.op);
  const Tensor& x = call.inputs[0];
  const DropoutAttrs a = dropout_attrs(op, call.attrs);
  const double p = a.p;
  if (!a.active()) return {x, Tensor::empty({0}, DType::boolean, x.device())};
  const int device = x.device().index;
  DeviceGuard on(device);
  Tensor mask = Tensor::empty(call.outputs[1].shape, DType::boolean, x.device());
  const int64_t n = mask.numel();
  // Drawn even for an empty x, so the thread's stream does not depend on shapes.
  const uint64_t seed = thread_generator().next();
  if (n > 0) {
    draw_mask<<<blocks_for(n), kThreads, 0, current_stream(device)>>>(static_cast<bool*>(mask.mutable_raw_data()), n,
                                                                       seed, p);
    check_launch(op.c_str(), device);
  }
  return {masked(op.c_str(), x, mask, p), mask};
}

std::vector<Tensor> dropout_backward_cuda(const OpCall& call) {
  const Tensor &g = call.inputs[0], &mask = call.inputs[1];
  if (mask.numel() == 0) return {g};
  return {masked("dropout_backward", g, mask, dropout_attrs("dropout_backward", call.attrs).p)};
}

const OpRegistrar dropout_kernel{"dropout", DeviceType::cuda, dropout_cuda};
const OpRegistrar dropout2d_kernel{"dropout2d", DeviceType::cuda, dropout_cuda};
const OpRegistrar dropout_backward_kernel{"dropout_backward", DeviceType::cuda, dropout_backward_cuda};

}  // namespace

}  // namespace troupe::cuda
