// nll_loss, cross_entropy and their backward kernels on cuda (devices/op_defs/losses.cpp has the
// semantics: class weights, ignore_index, reductions "mean" / "sum" / "none"). Everything is
// computed in double, like the CPU kernels. One block per sample works out its loss (for logits, the
// row's log-sum-exp first); then one block sums the samples in a fixed order, so the reduced loss
// is the same on every run. A target outside [0, C) (and not ignore_index) counts for nothing and
// is an IndexError at the host's next wait for the device (cuda/kernel_errors.h).
#include "devices/cuda/gather_util.cuh"
#include "devices/cuda/kernel_errors.h"
#include "devices/cuda/kernel_util.cuh"
#include "devices/op_defs/losses.h"
#include "devices/registry.h"

namespace troupe::cuda {

namespace {

enum Reduction : int { kNone, kMean, kSum };  // LossReduction as the kernels take it

Reduction reduction_of(LossReduction r) { return r == LossReduction::none ? kNone : r == LossReduction::sum ? kSum : kMean; }

// f32 or f64: inference refuses the rest.
template <class Fn>
void dispatch_loss(DType t, Fn&& fn) {
  if (t == DType::f64) fn(TypeTag<double>{});
  else fn(TypeTag<float>{});
}

// log(sum(exp(row))) over the block; every thread of the block must call it.
template <class T>
__device__ double log_sum_exp(const T* row, int64_t c) {
  double top = -INFINITY;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) top = MaxOp{}(top, double(row[j]));
  top = block_reduce(top, MaxOp{});
  double total = 0;
  for (int64_t j = threadIdx.x; j < c; j += blockDim.x) total += ::exp(double(row[j]) - top);
  return top + ::log(block_reduce(total, SumOp{}));
}

struct LossArgs {
  int64_t c = 0;
  int64_t ignore_index = -100;
  bool from_logits = false;
  Reduction reduction = kMean;
};

// Block i: loss[i] = -w[t] * logp[i, t] and counted[i] = w[t] (both 0 for an ignored or bad target).
template <class T, class I>
__global__ void sample_losses(const T* x, const I* target, const T* weight, double* loss, double* counted,
                              LossArgs a, KernelError* error, const char* op) {
  const int64_t i = blockIdx.x;
  const T* row = x + i * a.c;
  const double shift = a.from_logits ? log_sum_exp(row, a.c) : 0.0;
  if (threadIdx.x != 0) return;
  const int64_t t = target[i];
  const bool valid = t != a.ignore_index && t >= 0 && t < a.c;
  if (t != a.ignore_index && !valid) report_index_error(error, op, t, a.c, 1, i);
  const double w = valid ? (weight ? double(weight[t]) : 1.0) : 0.0;
  loss[i] = valid ? -w * (double(row[t]) - shift) : 0.0;
  counted[i] = w;
}

// One block: the per-sample losses, their sum, or their weighted mean.
template <class T>
__global__ void finish_loss(const double* loss, const double* counted, T* out, int64_t n, Reduction reduction) {
  if (reduction == kNone) {
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) out[i] = T(loss[i]);
    return;
  }
  double total = 0, weights = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) total += loss[i], weights += counted[i];
  total = block_reduce(total, SumOp{});
  weights = block_reduce(weights, SumOp{});
  if (threadIdx.x == 0) out[0] = T(reduction == kSum ? total : total / weights);  // no counted sample: NaN
}

LossArgs loss_args(const OpCall& call, const Tensor& x, bool from_logits) {
  LossArgs a;
  a.c = x.size(1);
  const LossAttrs attrs = loss_attrs(call.op, call.attrs);
  a.ignore_index = attrs.ignore_index;
  a.from_logits = from_logits;
  a.reduction = reduction_of(attrs.reduction);
  return a;
}

// Threads per sample block: a row's worth for log-sum-exp, one warp to read one element otherwise.
int sample_threads(const LossArgs& a) { return a.from_logits ? row_threads(a.c) : 32; }

// What the forward and backward kernels both read: x, target and the optional weight, from the
// call's inputs at `first` (after grad in the backward), contiguous, and the launch's device and stream.
struct LossInputs {
  LossInputs(const OpCall& call, size_t first, bool from_logits, const char* op_name)
      : op(op_name),
        x(call.inputs[first].contiguous()),
        target(call.inputs[first + 1].contiguous()),
        weight(call.inputs.size() > first + 2 ? call.inputs[first + 2].contiguous() : Tensor()),
        device(x.device().index),
        on(device),
        stream(current_stream(device)),
        a(loss_args(call, x, from_logits)),
        n(x.size(0)) {
    if (n > INT32_MAX) throw DeviceError(std::string(op) + ": too many samples for the cuda kernel: " + x.meta().str());
  }
  const char* op;
  const Tensor x, target, weight;
  const int device;
  DeviceGuard on;
  const cudaStream_t stream;
  const LossArgs a;
  const int64_t n;
};

std::vector<Tensor> loss_cuda(const OpCall& call, bool from_logits) {
  const LossInputs in(call, 0, from_logits, from_logits ? "cross_entropy" : "nll_loss");
  const auto& [op, x, target, weight, device, on, stream, a, n] = in;
  const TensorMeta& meta = call.outputs[0];
  Tensor out = Tensor::empty(meta.shape, meta.dtype, x.device());
  if (out.numel() == 0) return {out};
  Tensor loss = Tensor::empty({n}, DType::f64, x.device()), counted = Tensor::empty({n}, DType::f64, x.device());
  auto* loss_data = static_cast<double*>(loss.mutable_raw_data());
  auto* counted_data = static_cast<double*>(counted.mutable_raw_data());
  dispatch_loss(meta.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if (n > 0) {
      KernelError* error = kernel_error_word(device);
      dispatch_index(target.dtype(), [&](auto itag) {
        using I = typename decltype(itag)::type;
        sample_losses<<<static_cast<unsigned>(n), sample_threads(a), 0, stream>>>(
            static_cast<const T*>(x.raw_data()), static_cast<const I*>(target.raw_data()),
            weight.defined() ? static_cast<const T*>(weight.raw_data()) : nullptr, loss_data, counted_data, a, error,
            op);
      });
      check_launch(op, device);
    }
    finish_loss<<<1, kThreads, 0, stream>>>(loss_data, counted_data, static_cast<T*>(out.mutable_raw_data()), n,
                                            a.reduction);
  });
  check_launch(op, device);
  return {out};
}

// One block: the summed weights of the counted samples ("mean" divides by them).
template <class T, class I>
__global__ void total_weight(const I* target, const T* weight, double* total, int64_t n, LossArgs a) {
  double sum = 0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const int64_t t = target[i];
    if (t != a.ignore_index && t >= 0 && t < a.c) sum += weight ? double(weight[t]) : 1.0;
  }
  sum = block_reduce(sum, SumOp{});
  if (threadIdx.x == 0) *total = sum;
}

// Block i writes row i of d input: nll puts -w[t] * g_i at t; cross_entropy spreads
// w[t] * g_i * (softmax(x_i) - onehot(t)) over the row. g_i is divided by the total weight for "mean".
template <class T, class I>
__global__ void loss_grad_rows(const T* grad, const T* x, const I* target, const T* weight, const double* total,
                               T* dx, LossArgs a, KernelError* error, const char* op) {
  const int64_t i = blockIdx.x;
  const T* row = x + i * a.c;
  T* out = dx + i * a.c;
  const int64_t t = target[i];  // the same for the whole block, so the branches below are uniform
  const bool valid = t != a.ignore_index && t >= 0 && t < a.c;
  if (threadIdx.x == 0 && t != a.ignore_index && !valid) report_index_error(error, op, t, a.c, 1, i);
  if (!valid) {
    for (int64_t j = threadIdx.x; j < a.c; j += blockDim.x) out[j] = T(0);
    return;
  }
  double g = double(a.reduction == kNone ? grad[i] : grad[0]);
  if (a.reduction == kMean) g /= *total;
  const double scale = (weight ? double(weight[t]) : 1.0) * g;
  const double shift = a.from_logits ? log_sum_exp(row, a.c) : 0.0;
  for (int64_t j = threadIdx.x; j < a.c; j += blockDim.x) {
    double d = a.from_logits ? scale * ::exp(double(row[j]) - shift) : 0.0;
    if (j == t) d -= scale;
    out[j] = T(d);
  }
}

std::vector<Tensor> loss_backward_cuda(const OpCall& call, bool from_logits) {
  const LossInputs in(call, 1, from_logits, from_logits ? "cross_entropy_backward" : "nll_loss_backward");
  const auto& [op, x, target, weight, device, on, stream, a, n] = in;
  const Tensor grad = call.inputs[0].contiguous();
  const TensorMeta& meta = call.outputs[0];
  Tensor dx = Tensor::empty(meta.shape, meta.dtype, x.device());
  if (dx.numel() == 0) return {dx};
  Tensor total = Tensor::empty({1}, DType::f64, x.device());
  auto* total_data = static_cast<double*>(total.mutable_raw_data());
  KernelError* error = kernel_error_word(device);
  dispatch_loss(meta.dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* w = weight.defined() ? static_cast<const T*>(weight.raw_data()) : nullptr;
    dispatch_index(target.dtype(), [&](auto itag) {
      using I = typename decltype(itag)::type;
      const I* t = static_cast<const I*>(target.raw_data());
      total_weight<<<1, kThreads, 0, stream>>>(t, w, total_data, n, a);
      loss_grad_rows<<<static_cast<unsigned>(n), sample_threads(a), 0, stream>>>(
          static_cast<const T*>(grad.raw_data()), static_cast<const T*>(x.raw_data()), t, w, total_data,
          static_cast<T*>(dx.mutable_raw_data()), a, error, op);
    });
  });
  check_launch(op, device);
  return {dx};
}

const OpRegistrar nll_loss_kernel{"nll_loss", DeviceType::cuda, [](const OpCall& c) { return loss_cuda(c, false); }};
const OpRegistrar cross_entropy_kernel{"cross_entropy", DeviceType::cuda,
                                       [](const OpCall& c) { return loss_cuda(c, true); }};
const OpRegistrar nll_loss_backward_kernel{"nll_loss_backward", DeviceType::cuda,
                                           [](const OpCall& c) { return loss_backward_cuda(c, false); }};
const OpRegistrar cross_entropy_backward_kernel{"cross_entropy_backward", DeviceType::cuda,
                                                [](const OpCall& c) { return loss_backward_cuda(c, true); }};

}  // namespace

}  // namespace troupe::cuda
