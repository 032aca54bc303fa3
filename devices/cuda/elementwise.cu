// Elementwise cuda kernels: add, sub, mul, div, maximum, minimum and the comparisons eq ne lt le gt
// ge with NumPy broadcasting, and the unary neg, abs, relu, exp, log, sqrt, tanh, sigmoid, gelu.
// Inputs are first converted to the dtype the op computes in (the output dtype inference chose:
// type promotion, integer division giving f32; for comparisons the promoted inputs' dtype, the
// output being bool), so each kernel sees one element type.
//
// Three kernels per op, chosen per call: contiguous operands of one shape (no broadcast) whose
// pointers are 16-byte aligned and whose size fits 32 bits take 128-bit loads and stores (4 floats,
// 8 bf16 per instruction) with 32-bit indices; other layouts that fit 32 bits map an output index
// to operand offsets with 32-bit division (Strided32); only tensors past 2^31 elements or offsets
// pay for 64-bit division (Strided).
#include <cmath>

#include "devices/cuda/packed_access.cuh"
#include "devices/op_defs/elementwise.h"
#include "devices/registry.h"

namespace troupe::cuda {

namespace {

struct AddOp { template <class A> __device__ A operator()(A x, A y) const { return x + y; } };
struct SubOp { template <class A> __device__ A operator()(A x, A y) const { return x - y; } };
struct MulOp { template <class A> __device__ A operator()(A x, A y) const { return x * y; } };
struct DivOp { template <class A> __device__ A operator()(A x, A y) const { return x / y; } };
// NaN wins, like the CPU's NanMax/NanMin.
struct MaximumOp { template <class A> __device__ A operator()(A x, A y) const { return (y > x || y != y) ? y : x; } };
struct MinimumOp { template <class A> __device__ A operator()(A x, A y) const { return (y < x || y != y) ? y : x; } };
struct EqOp { template <class A> __device__ bool operator()(A x, A y) const { return x == y; } };
struct NeOp { template <class A> __device__ bool operator()(A x, A y) const { return x != y; } };
struct LtOp { template <class A> __device__ bool operator()(A x, A y) const { return x < y; } };
struct LeOp { template <class A> __device__ bool operator()(A x, A y) const { return x <= y; } };
struct GtOp { template <class A> __device__ bool operator()(A x, A y) const { return x > y; } };
struct GeOp { template <class A> __device__ bool operator()(A x, A y) const { return x >= y; } };

template <class T, class O, class Op>
__global__ void binary_kernel(const T* a, const T* b, O* out, Strided<2> layout, int64_t n, Op op) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[2];
    layout.offsets(i, off);
    out[i] = convert_to<O>(op(convert_to<Acc<T>>(a[off[0]]), convert_to<Acc<T>>(b[off[1]])));
  }
}

// n < 2^31 and every offset too (fits_int32). Indices are unsigned: i + stride stays below 2^32.
template <class T, class O, class Op>
__global__ void binary_kernel32(const T* a, const T* b, O* out, Strided32<2> layout, uint32_t n, Op op) {
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    int32_t off[2];
    layout.offsets(i, off);
    out[i] = convert_to<O>(op(convert_to<Acc<T>>(a[off[0]]), convert_to<Acc<T>>(b[off[1]])));
  }
}

// Contiguous a, b and out of n elements (vectorisable): whole packs, then the tail one by one.
template <class T, class Op>
__global__ void binary_packed(const T* a, const T* b, T* out, uint32_t n, Op op) {
  using P = Pack<T>;
  const uint32_t first = blockIdx.x * blockDim.x + threadIdx.x, step = gridDim.x * blockDim.x;
  const uint32_t packs = n / P::kSize;
  for (uint32_t p = first; p < packs; p += step) {
    const P x = P::load(a + p * P::kSize), y = P::load(b + p * P::kSize);
    P r;
#pragma unroll
    for (int j = 0; j < P::kSize; ++j) r.v[j] = convert_to<T>(op(convert_to<Acc<T>>(x.v[j]), convert_to<Acc<T>>(y.v[j])));
    r.store(out + p * P::kSize);
  }
  for (uint32_t i = packs * P::kSize + first; i < n; i += step)
    out[i] = convert_to<T>(op(convert_to<Acc<T>>(a[i]), convert_to<Acc<T>>(b[i])));
}

// Both operands walk the output's order with unit stride: no broadcast, no view.
bool contiguous_layout(const Strided<2>& layout) {
  return layout.rank == 0 || (layout.rank == 1 && layout.stride[0][0] == 1 && layout.stride[1][0] == 1);
}

// The input as the compute dtype, broadcast (stride 0) to the output's shape.
Tensor as_operand(const Tensor& x, DType compute, const Shape& shape) {
  return (x.dtype() == compute ? x : x.to(compute)).expand(shape);
}

enum class Operands { any, floating, comparison };

template <class Op>
KernelFn binary(Op op, Operands kind) {
  return [op, kind](const OpCall& call) {
    const TensorMeta& meta = call.outputs[0];
    const int device = call.inputs[0].device().index;
    DeviceGuard on(device);
    Tensor out = Tensor::empty(meta.shape, meta.dtype, call.inputs[0].device());
    const int64_t n = out.numel();
    if (n == 0) return std::vector<Tensor>{out};
    const DType compute =
        kind == Operands::comparison ? promote(call.inputs[0].dtype(), call.inputs[1].dtype()) : meta.dtype;
    if (kind == Operands::floating && !is_floating(compute))
      throw DeviceError(std::string(call.op) + ": no cuda kernel for " + name(compute));
    Tensor a = as_operand(call.inputs[0], compute, meta.shape), b = as_operand(call.inputs[1], compute, meta.shape);
    Strided<2> layout;
    if (!make_strided<2>(meta.shape, {&a.strides(), &b.strides()}, layout)) {
      a = a.contiguous();  // too many dims for the kernel's index: materialise the broadcast
      b = b.contiguous();
      make_strided<2>(meta.shape, {&a.strides(), &b.strides()}, layout);
    }
    const cudaStream_t stream = current_stream(device);
    dispatch_device(compute, [&](auto tag) {
      using T = typename decltype(tag)::type;
      using O = std::conditional_t<std::is_same_v<decltype(op(Acc<T>{}, Acc<T>{})), bool>, bool, T>;
      const T* pa = static_cast<const T*>(a.raw_data());
      const T* pb = static_cast<const T*>(b.raw_data());
      O* po = static_cast<O*>(out.mutable_raw_data());
      if constexpr (std::is_same_v<O, T>) {
        if (contiguous_layout(layout) && vectorisable(n, {pa, pb, po})) {
          binary_packed<<<blocks_for_packs<T>(n), kThreads, 0, stream>>>(pa, pb, po, static_cast<uint32_t>(n), op);
          return;
        }
      }
      if (fits_int32(layout, n))
        binary_kernel32<<<blocks_for(n), kThreads, 0, stream>>>(pa, pb, po, Strided32<2>(layout), static_cast<uint32_t>(n), op);
      else
        binary_kernel<<<blocks_for(n), kThreads, 0, stream>>>(pa, pb, po, layout, n, op);
    });
    check_launch(std::string(call.op).c_str(), device);
    return std::vector<Tensor>{out};
  };
}

const OpRegistrar add_cuda{"add", DeviceType::cuda, binary(AddOp{}, Operands::any)};
const OpRegistrar sub_cuda{"sub", DeviceType::cuda, binary(SubOp{}, Operands::any)};
const OpRegistrar mul_cuda{"mul", DeviceType::cuda, binary(MulOp{}, Operands::any)};
const OpRegistrar div_cuda{"div", DeviceType::cuda, binary(DivOp{}, Operands::floating)};
const OpRegistrar maximum_cuda{"maximum", DeviceType::cuda, binary(MaximumOp{}, Operands::any)};
const OpRegistrar minimum_cuda{"minimum", DeviceType::cuda, binary(MinimumOp{}, Operands::any)};
const OpRegistrar eq_cuda{"eq", DeviceType::cuda, binary(EqOp{}, Operands::comparison)};
const OpRegistrar ne_cuda{"ne", DeviceType::cuda, binary(NeOp{}, Operands::comparison)};
const OpRegistrar lt_cuda{"lt", DeviceType::cuda, binary(LtOp{}, Operands::comparison)};
const OpRegistrar le_cuda{"le", DeviceType::cuda, binary(LeOp{}, Operands::comparison)};
const OpRegistrar gt_cuda{"gt", DeviceType::cuda, binary(GtOp{}, Operands::comparison)};
const OpRegistrar ge_cuda{"ge", DeviceType::cuda, binary(GeOp{}, Operands::comparison)};

struct NegOp { template <class A> __device__ A operator()(A x) const { return -x; } };
struct AbsOp {
  template <class A> __device__ A operator()(A x) const {
    if constexpr (std::is_unsigned_v<A>) return x;
    else if constexpr (std::is_floating_point_v<A>) return ::fabs(x);  // -0 gives +0, NaN stays NaN
    else return x < A(0) ? -x : x;
  }
};
struct ReluOp {
  template <class A> __device__ A operator()(A x) const {
    if constexpr (std::is_unsigned_v<A>) return x; else return x < A(0) ? A(0) : x;  // NaN stays NaN
  }
};
struct ExpOp { template <class A> __device__ A operator()(A x) const { return exp_of(x); } };
struct LogOp { template <class A> __device__ A operator()(A x) const { return log_of(x); } };
struct SqrtOp { template <class A> __device__ A operator()(A x) const { return sqrt_of(x); } };
struct TanhOp { template <class A> __device__ A operator()(A x) const { return tanh_of(x); } };
struct SigmoidOp { template <class A> __device__ A operator()(A x) const { return A(1) / (A(1) + exp_of(-x)); } };
struct GeluErfOp {
  template <class A> __device__ A operator()(A x) const {
    if constexpr (std::is_same_v<A, float>) return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    else return 0.5 * x * (1.0 + ::erf(x * 0.70710678118654752));
  }
};
struct GeluTanhOp {
  template <class A> __device__ A operator()(A x) const {
    const A inner = A(0.79788456080286536) * (x + A(0.044715) * x * x * x);  // sqrt(2/pi) (x + 0.044715 x^3)
    return A(0.5) * x * (A(1) + tanh_of(inner));
  }
};

template <class T, class Op>
__global__ void unary_kernel(const T* in, T* out, int64_t n, Op op) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = convert_to<T>(op(convert_to<Acc<T>>(in[i])));
}

// in and out contiguous, 16-byte aligned, n < 2^31 (vectorisable): whole packs, then the tail.
template <class T, class Op>
__global__ void unary_packed(const T* in, T* out, uint32_t n, Op op) {
  using P = Pack<T>;
  const uint32_t first = blockIdx.x * blockDim.x + threadIdx.x, step = gridDim.x * blockDim.x;
  const uint32_t packs = n / P::kSize;
  for (uint32_t p = first; p < packs; p += step) {
    P x = P::load(in + p * P::kSize);
#pragma unroll
    for (int j = 0; j < P::kSize; ++j) x.v[j] = convert_to<T>(op(convert_to<Acc<T>>(x.v[j])));
    x.store(out + p * P::kSize);
  }
  for (uint32_t i = packs * P::kSize + first; i < n; i += step) out[i] = convert_to<T>(op(convert_to<Acc<T>>(in[i])));
}

template <class T, class Op>
void launch_unary(const Tensor& in, Tensor& out, Op op, int device) {
  const T* pi = static_cast<const T*>(in.raw_data());
  T* po = static_cast<T*>(out.mutable_raw_data());
  const int64_t n = in.numel();
  if (vectorisable(n, {pi, po}))
    unary_packed<<<blocks_for_packs<T>(n), kThreads, 0, current_stream(device)>>>(pi, po, static_cast<uint32_t>(n), op);
  else
    unary_kernel<<<blocks_for(n), kThreads, 0, current_stream(device)>>>(pi, po, n, op);
}

// Runs op over x converted to the output dtype. Ops defined on floating types only (exp, tanh, ...)
// are not instantiated for integers: inference has already turned integer inputs into f32.
template <bool Integers, class Op>
std::vector<Tensor> run_unary(const OpCall& call, Op op) {
  const TensorMeta& meta = call.outputs[0];
  const Tensor& x = call.inputs[0];
  const int device = x.device().index;
  const std::string op_name(call.op);
  DeviceGuard on(device);
  Tensor out = Tensor::empty(meta.shape, meta.dtype, x.device());
  if (out.numel() == 0) return {out};
  const Tensor in = (x.dtype() == meta.dtype ? x : x.to(meta.dtype)).contiguous();
  auto launch = [&](auto tag) { launch_unary<typename decltype(tag)::type>(in, out, op, device); };
  if constexpr (Integers) {
    if (meta.dtype == DType::boolean) throw DeviceError(op_name + ": no cuda kernel for bool");
    dispatch_device(meta.dtype, launch);
  } else {
    dispatch_floating(op_name.c_str(), meta.dtype, launch);
  }
  check_launch(op_name.c_str(), device);
  return {out};
}

template <bool Integers, class Op>
KernelFn unary(Op op) {
  return [op](const OpCall& call) { return run_unary<Integers>(call, op); };
}

const OpRegistrar neg_cuda{"neg", DeviceType::cuda, unary<true>(NegOp{})};
const OpRegistrar abs_cuda{"abs", DeviceType::cuda, unary<true>(AbsOp{})};
const OpRegistrar relu_cuda{"relu", DeviceType::cuda, unary<true>(ReluOp{})};
const OpRegistrar exp_cuda{"exp", DeviceType::cuda, unary<false>(ExpOp{})};
const OpRegistrar log_cuda{"log", DeviceType::cuda, unary<false>(LogOp{})};
const OpRegistrar sqrt_cuda{"sqrt", DeviceType::cuda, unary<false>(SqrtOp{})};
const OpRegistrar tanh_cuda{"tanh", DeviceType::cuda, unary<false>(TanhOp{})};
const OpRegistrar sigmoid_cuda{"sigmoid", DeviceType::cuda, unary<false>(SigmoidOp{})};
const OpRegistrar gelu_cuda{"gelu", DeviceType::cuda, [](const OpCall& call) {
  if (gelu_form("gelu", call.attrs) == GeluForm::tanh) return run_unary<false>(call, GeluTanhOp{});
  return run_unary<false>(call, GeluErfOp{});
}};

}  // namespace

}  // namespace troupe::cuda
