// add_layer_norm on cuda (the op: devices/op_defs/norms.cpp): one block per row;
// the row's sum x + residual is made once, in float (double for f64), and kept in shared memory
// for the mean, the centred variance and the output, so x and residual are read once and the
// sum is never rounded before it is normalised. Rows whose length is a multiple of a 16-byte
// pack and whose pointers are aligned move in 128-bit loads (8 bf16 at a time).
#include "devices/cuda/packed_access.cuh"
#include "devices/op_defs/norms.h"
#include "devices/registry.h"

namespace troupe::cuda {

namespace {

// Rows longer than this keep no copy of the sum in shared memory: it is recomputed from x + r.
constexpr size_t kSharedRowBytes = 48 << 10;

template <class T, bool Packed>
__global__ void add_layer_norm_rows(const T* x, const T* r, const Acc<T>* weight, const Acc<T>* bias, T* y,
                                    T* sum_out, int n, double eps, bool cached) {
  using A = Acc<T>;
  using P = Pack<T>;
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  A* s = reinterpret_cast<A*>(shared_bytes);
  const size_t base = static_cast<size_t>(blockIdx.x) * n;
  x += base;
  r += base;
  y += base;
  if (sum_out) sum_out += base;
  auto sum_at = [&](int j) { return cached ? s[j] : convert_to<A>(x[j]) + convert_to<A>(r[j]); };
  A total = 0;
  if constexpr (Packed) {
    for (int p = threadIdx.x; p < n / P::kSize; p += blockDim.x) {
      const P a = P::load(x + p * P::kSize), b = P::load(r + p * P::kSize);
      P out;
#pragma unroll
      for (int k = 0; k < P::kSize; ++k) {
        const A v = convert_to<A>(a.v[k]) + convert_to<A>(b.v[k]);
        if (cached) s[p * P::kSize + k] = v;
        out.v[k] = convert_to<T>(v);
        total += v;
      }
      if (sum_out) out.store(sum_out + p * P::kSize);
    }
  } else {
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
      const A v = convert_to<A>(x[j]) + convert_to<A>(r[j]);
      if (cached) s[j] = v;
      if (sum_out) sum_out[j] = convert_to<T>(v);
      total += v;
    }
  }
  const A mean = block_reduce(total, SumOp{}) / A(n);  // its __syncthreads also publish s
  A squares = 0;
  for (int j = threadIdx.x; j < n; j += blockDim.x) {
    const A d = sum_at(j) - mean;
    squares += d * d;
  }
  const A rstd = rsqrt_of(block_reduce(squares, SumOp{}) / A(n) + A(eps));
  auto normed = [&](int j) {
    A v = (sum_at(j) - mean) * rstd;
    if (weight) v *= weight[j];
    if (bias) v += bias[j];
    return convert_to<T>(v);
  };
  if constexpr (Packed) {
    for (int p = threadIdx.x; p < n / P::kSize; p += blockDim.x) {
      P out;
#pragma unroll
      for (int k = 0; k < P::kSize; ++k) out.v[k] = normed(p * P::kSize + k);
      out.store(y + p * P::kSize);
    }
  } else {
    for (int j = threadIdx.x; j < n; j += blockDim.x) y[j] = normed(j);
  }
}

std::vector<Tensor> add_layer_norm_cuda(const OpCall& call) {
  const TensorMeta& meta = call.outputs[0];
  const bool return_sum = call.outputs.size() > 1;
  const int device = call.inputs[0].device().index;
  DeviceGuard on(device);
  const Tensor x = call.inputs[0].contiguous(), r = call.inputs[1].contiguous();
  Tensor y = Tensor::empty(meta.shape, meta.dtype, x.device());
  Tensor sum = return_sum ? Tensor::empty(meta.shape, meta.dtype, x.device()) : Tensor();
  // Built last: a second handle on y's bytes would make mutable_raw_data() copy them first.
  auto outputs = [&] { return return_sum ? std::vector<Tensor>{y, sum} : std::vector<Tensor>{y}; };
  if (y.numel() == 0) return outputs();
  const int64_t n = meta.shape.back(), rows = y.numel() / n;
  if (n > INT32_MAX || rows > INT32_MAX)
    throw DeviceError("add_layer_norm: rows too long or too many for the cuda kernel: " + x.meta().str());
  const DType compute = meta.dtype == DType::f64 ? DType::f64 : DType::f32;
  auto param = [&](size_t i) { return call.inputs.size() > i ? call.inputs[i].to(compute).contiguous() : Tensor(); };
  const Tensor weight = param(2), bias = param(3);
  dispatch_floating("add_layer_norm", meta.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = Acc<T>;
    const size_t row_bytes = sizeof(A) * static_cast<size_t>(n);
    const bool cached = row_bytes <= kSharedRowBytes;
    const T* px = static_cast<const T*>(x.raw_data());
    const T* pr = static_cast<const T*>(r.raw_data());
    T* py = static_cast<T*>(y.mutable_raw_data());
    T* ps = return_sum ? static_cast<T*>(sum.mutable_raw_data()) : nullptr;
    const A* pw = weight.defined() ? static_cast<const A*>(weight.raw_data()) : nullptr;
    const A* pb = bias.defined() ? static_cast<const A*>(bias.raw_data()) : nullptr;
    // Every row starts 16-byte aligned when the first does and rows are whole packs.
    const bool packed = n % Pack<T>::kSize == 0 && vectorisable(0, {px, pr, py, ps});
    const unsigned grid = static_cast<unsigned>(rows);
    const int threads = row_threads(packed ? n / Pack<T>::kSize : n);
    const size_t shared = cached ? row_bytes : 0;
    const cudaStream_t stream = current_stream(device);
    const double eps = add_layer_norm_attrs(call.attrs).eps;
    if (packed)
      add_layer_norm_rows<T, true><<<grid, threads, shared, stream>>>(px, pr, pw, pb, py, ps, static_cast<int>(n), eps, cached);
    else
      add_layer_norm_rows<T, false><<<grid, threads, shared, stream>>>(px, pr, pw, pb, py, ps, static_cast<int>(n), eps, cached);
  });
  check_launch("add_layer_norm", device);
  return outputs();
}

const OpRegistrar add_layer_norm_kernel{"add_layer_norm", DeviceType::cuda, add_layer_norm_cuda};

}  // namespace

}  // namespace troupe::cuda
