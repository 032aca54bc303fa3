// Reductions on cuda: sum, mean, max, min and argmax (devices/cpu/reduce.cpp has the semantics).
// The reduced dims are moved last and each row of them is reduced by one block, always in the same
// order for a given shape (deterministic). sum accumulates in float for the 16-bit floats, double
// for f64, int64 for integers (inference gives bool/u8/i32 an i64 result, so inputs are converted
// to the output dtype first); mean in double, like the CPU. max, min and argmax propagate NaN;
// argmax picks the first maximum.
#include "devices/cuda/kernel_util.cuh"
#include "devices/registry.h"

namespace troupe::cuda {

namespace {

// x with its kept dims first and reduced dims last, contiguous in dtype: `count` rows of `n`.
struct Rows {
  Tensor rows;
  int64_t count = 0, n = 1;
};

Rows reduced_rows(const char* op, const Tensor& x, const std::vector<int64_t>& dims, DType dtype, int64_t count) {
  std::vector<bool> reduced(x.dim(), dims.empty());  // no dims given reduces them all
  for (int64_t d : dims) {
    const int64_t w = wrap_dim(op, d, x.dim());
    if (x.dim() > 0) reduced[w] = true;  // a 0-d tensor's dim 0 is itself: nothing to move
  }
  std::vector<int64_t> order;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (!reduced[d]) order.push_back(d);
  const size_t kept = order.size();
  for (int64_t d = 0; d < x.dim(); ++d)
    if (reduced[d]) order.push_back(d);
  Rows r;
  r.rows = x.permute(order).to(dtype).contiguous();
  for (size_t i = kept; i < order.size(); ++i) r.n *= x.size(order[i]);
  r.count = count;
  if (count > INT32_MAX) throw DeviceError(std::string(op) + ": too many rows for the cuda kernel: " + x.meta().str());
  return r;
}

template <class T, class A, bool Mean>
__global__ void sum_rows(const T* in, T* out, int64_t n) {
  const T* row = in + blockIdx.x * n;
  A sum = 0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) sum += convert_to<A>(row[j]);
  sum = block_reduce(sum, SumOp{});
  if (threadIdx.x == 0) out[blockIdx.x] = convert_to<T>(Mean ? sum / A(n) : sum);  // mean of nothing: NaN
}

template <bool Mean>
std::vector<Tensor> sum_cuda(const OpCall& call) {
  const char* op = Mean ? "mean" : "sum";
  const Tensor& x = call.inputs[0];
  const TensorMeta& meta = call.outputs[0];
  const int device = x.device().index;
  DeviceGuard on(device);
  Tensor out = Tensor::empty(meta.shape, meta.dtype, x.device());
  if (out.numel() == 0) return {out};
  if (meta.dtype == DType::boolean) throw DeviceError(std::string(op) + ": no cuda kernel for a bool result");
  const Rows r = reduced_rows(op, x, call.attrs.get<std::vector<int64_t>>("dims"), meta.dtype, out.numel());
  dispatch_device(meta.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = std::conditional_t<Mean, double, Acc<T>>;
    sum_rows<T, A, Mean><<<static_cast<unsigned>(r.count), row_threads(r.n), 0, current_stream(device)>>>(
        static_cast<const T*>(r.rows.raw_data()), static_cast<T*>(out.mutable_raw_data()), r.n);
  });
  check_launch(op, device);
  return {out};
}

const OpRegistrar sum_kernel{"sum", DeviceType::cuda, sum_cuda<false>};
const OpRegistrar mean_kernel{"mean", DeviceType::cuda, sum_cuda<true>};

// The NaN-propagating picks of reduce.cpp: a NaN, once seen, stays.
struct NanMaxOp {
  template <class A> __device__ A operator()(A a, A b) const { return (b > a || b != b) ? b : a; }
};
struct NanMinOp {
  template <class A> __device__ A operator()(A a, A b) const { return (b < a || b != b) ? b : a; }
};

// Rows of n >= 1 (inference refuses empty reductions): each thread starts from the row's first element.
template <class T, class Pick>
__global__ void pick_rows(const T* in, T* out, int64_t n, Pick pick) {
  using A = Acc<T>;
  const T* row = in + blockIdx.x * n;
  A best = convert_to<A>(row[0]);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) best = pick(best, convert_to<A>(row[j]));
  best = block_reduce(best, pick);
  if (threadIdx.x == 0) out[blockIdx.x] = convert_to<T>(best);
}

template <class Pick>
std::vector<Tensor> extreme_cuda(const OpCall& call, Pick pick) {
  const std::string op(call.op);
  const Tensor& x = call.inputs[0];
  const TensorMeta& meta = call.outputs[0];
  const int device = x.device().index;
  DeviceGuard on(device);
  Tensor out = Tensor::empty(meta.shape, meta.dtype, x.device());
  if (out.numel() == 0) return {out};
  const Rows r = reduced_rows(op.c_str(), x, call.attrs.get<std::vector<int64_t>>("dims"), x.dtype(), out.numel());
  dispatch_device(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    pick_rows<<<static_cast<unsigned>(r.count), row_threads(r.n), 0, current_stream(device)>>>(
        static_cast<const T*>(r.rows.raw_data()), static_cast<T*>(out.mutable_raw_data()), r.n, pick);
  });
  check_launch(op.c_str(), device);
  return {out};
}

const OpRegistrar max_kernel{"max", DeviceType::cuda, [](const OpCall& c) { return extreme_cuda(c, NanMaxOp{}); }};
const OpRegistrar min_kernel{"min", DeviceType::cuda, [](const OpCall& c) { return extreme_cuda(c, NanMinOp{}); }};

// argmax's order: a larger value, or a NaN over a number; equal values (or two NaNs) go to the
// smaller index, so the first maximum wins whichever thread saw it.
template <class A>
__device__ void take_better(A& best, int64_t& at, A v, int64_t v_at) {
  const bool v_beats = v > best || (v != v && best == best);
  const bool best_beats = best > v || (best != best && v == v);
  if (v_beats || (!best_beats && v_at < at)) {
    best = v;
    at = v_at;
  }
}

template <class T>
__global__ void argmax_rows(const T* in, int64_t* out, int64_t n) {
  using A = Acc<T>;
  const T* row = in + blockIdx.x * n;
  A best = convert_to<A>(row[0]);
  int64_t at = 0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) take_better(best, at, convert_to<A>(row[j]), j);
  for (int offset = 16; offset > 0; offset >>= 1) {
    const A other = static_cast<A>(__shfl_xor_sync(0xffffffffu, best, offset));
    const int64_t other_at = __shfl_xor_sync(0xffffffffu, at, offset);
    take_better(best, at, other, other_at);
  }
  __shared__ A warp_best[32];
  __shared__ int64_t warp_at[32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_best[warp] = best, warp_at[warp] = at;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) take_better(best, at, warp_best[w], warp_at[w]);
    out[blockIdx.x] = at;
  }
}

std::vector<Tensor> argmax_cuda(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  const TensorMeta& meta = call.outputs[0];
  const int device = x.device().index;
  DeviceGuard on(device);
  Tensor out = Tensor::empty(meta.shape, DType::i64, x.device());
  if (out.numel() == 0) return {out};
  const Rows r = reduced_rows("argmax", x, call.attrs.get<std::vector<int64_t>>("dims"), x.dtype(), out.numel());
  dispatch_device(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    argmax_rows<<<static_cast<unsigned>(r.count), row_threads(r.n), 0, current_stream(device)>>>(
        static_cast<const T*>(r.rows.raw_data()), static_cast<int64_t*>(out.mutable_raw_data()), r.n);
  });
  check_launch("argmax", device);
  return {out};
}

const OpRegistrar argmax_kernel{"argmax", DeviceType::cuda, argmax_cuda};

}  // namespace

}  // namespace troupe::cuda
