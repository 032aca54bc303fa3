// Binary elementwise kernels on the CPU (the ops: devices/op_defs/elementwise.cpp). Integer
// arithmetic wraps around like PyTorch's; f16/bf16 compute in f32. Contiguous and scalar-broadcast operands
// run as one flat loop the compiler vectorises.
#include <string>
#include <type_traits>

#include "devices/cpu/loops.h"
#include "devices/cpu/parallel_ranges.h"
#include "devices/op_defs/elementwise.h"
#include "devices/registry.h"

namespace troupe {

namespace {

template <class A>
constexpr bool is_int = std::is_integral_v<A> && !std::is_same_v<A, bool>;

// Signed overflow is undefined in C++: integers add, subtract and multiply as unsigned.
template <class A, class F>
A wrapping(A x, A y, F f) {
  using U = std::make_unsigned_t<A>;
  return static_cast<A>(f(static_cast<U>(x), static_cast<U>(y)));
}

struct Add {
  template <class A> static constexpr bool supports = true;
  template <class A> A operator()(A x, A y) const {
    if constexpr (std::is_same_v<A, bool>) return x || y;
    else if constexpr (is_int<A>) return wrapping(x, y, [](auto u, auto v) { return u + v; });
    else return x + y;
  }
};
struct Sub {
  template <class A> static constexpr bool supports = !std::is_same_v<A, bool>;  // like PyTorch
  template <class A> A operator()(A x, A y) const {
    if constexpr (is_int<A>) return wrapping(x, y, [](auto u, auto v) { return u - v; });
    else return x - y;
  }
};
struct Mul {
  template <class A> static constexpr bool supports = true;
  template <class A> A operator()(A x, A y) const {
    if constexpr (std::is_same_v<A, bool>) return x && y;
    else if constexpr (is_int<A>) return wrapping(x, y, [](auto u, auto v) { return u * v; });
    else return x * y;
  }
};
struct Div {  // inference makes the compute type floating
  template <class A> static constexpr bool supports = std::is_floating_point_v<A>;
  template <class A> A operator()(A x, A y) const { return x / y; }
};
struct Maximum {
  template <class A> static constexpr bool supports = true;
  template <class A> A operator()(A x, A y) const { return NanMax{}(x, y); }
};
struct Minimum {
  template <class A> static constexpr bool supports = true;
  template <class A> A operator()(A x, A y) const { return NanMin{}(x, y); }
};

#define TROUPE_COMPARISON(Name, expr)                                         \
  struct Name {                                                               \
    template <class A> static constexpr bool supports = true;                 \
    template <class A> bool operator()(A x, A y) const { return expr; }       \
  };
TROUPE_COMPARISON(Eq, x == y)
TROUPE_COMPARISON(Ne, x != y)
TROUPE_COMPARISON(Lt, x < y)
TROUPE_COMPARISON(Le, x <= y)
TROUPE_COMPARISON(Gt, x > y)
TROUPE_COMPARISON(Ge, x >= y)
#undef TROUPE_COMPARISON

// out[i] = op(a[i], b[i]) over out's shape; a and b have dtype T (any strides, broadcast).
template <class T, class O, class Op>
void run_binary(const Tensor& a, const Tensor& b, Tensor& out, Op op) {
  using A = compute_t<T>;
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  O* po = out.mutable_data<O>();
  const Shape& shape = out.shape();
  if (a.is_contiguous() && b.is_contiguous() && a.shape() == shape && b.shape() == shape) {
    // The common large case (a residual add): one flat loop, split over the intra-op threads.
    parallel_ranges(out.numel(), 1 << 16, 64, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) po[i] = convert<O>(op(A(pa[i]), A(pb[i])));
    });
    return;
  }
  for_each_run<2>(shape, {broadcast_strides(a, shape), broadcast_strides(b, shape)},
                  [&](const auto& at, const auto& step, int64_t n) {
                    const T* x = pa + at[0];
                    const T* y = pb + at[1];
                    if (step[0] == 1 && step[1] == 1) {
                      for (int64_t i = 0; i < n; ++i) po[i] = convert<O>(op(A(x[i]), A(y[i])));
                    } else if (step[0] == 1 && step[1] == 0) {
                      const A yv = A(*y);
                      for (int64_t i = 0; i < n; ++i) po[i] = convert<O>(op(A(x[i]), yv));
                    } else if (step[0] == 0 && step[1] == 1) {
                      const A xv = A(*x);
                      for (int64_t i = 0; i < n; ++i) po[i] = convert<O>(op(xv, A(y[i])));
                    } else {
                      for (int64_t i = 0; i < n; ++i) po[i] = convert<O>(op(A(x[i * step[0]]), A(y[i * step[1]])));
                    }
                    po += n;
                  });
}

template <class Op>
KernelFn binary_kernel(bool true_division = false) {
  constexpr bool comparison = std::is_same_v<decltype(Op{}(0.0f, 0.0f)), bool>;
  return [true_division](const OpCall& call) {
    const TensorMeta& meta = call.outputs[0];
    Tensor out = Tensor::empty(meta.shape, meta.dtype);
    if (out.numel() == 0) return std::vector<Tensor>{out};
    const DType compute = binary_compute_dtype(call.inputs[0].dtype(), call.inputs[1].dtype(), true_division);
    const Tensor a = call.inputs[0].to(compute);
    const Tensor b = call.inputs[1].to(compute);
    dispatch(compute, [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (Op::template supports<compute_t<T>>)
        run_binary<T, std::conditional_t<comparison, bool, T>>(a, b, out, Op{});
      else
        throw DTypeError(std::string(call.op) + ": not defined for " + troupe::name(compute) + " operands");
    });
    return std::vector<Tensor>{out};
  };
}

const OpRegistrar add_kernel{"add", DeviceType::cpu, binary_kernel<Add>()};
const OpRegistrar sub_kernel{"sub", DeviceType::cpu, binary_kernel<Sub>()};
const OpRegistrar mul_kernel{"mul", DeviceType::cpu, binary_kernel<Mul>()};
const OpRegistrar div_kernel{"div", DeviceType::cpu, binary_kernel<Div>(true)};
const OpRegistrar maximum_kernel{"maximum", DeviceType::cpu, binary_kernel<Maximum>()};
const OpRegistrar minimum_kernel{"minimum", DeviceType::cpu, binary_kernel<Minimum>()};
const OpRegistrar eq_kernel{"eq", DeviceType::cpu, binary_kernel<Eq>()};
const OpRegistrar ne_kernel{"ne", DeviceType::cpu, binary_kernel<Ne>()};
const OpRegistrar lt_kernel{"lt", DeviceType::cpu, binary_kernel<Lt>()};
const OpRegistrar le_kernel{"le", DeviceType::cpu, binary_kernel<Le>()};
const OpRegistrar gt_kernel{"gt", DeviceType::cpu, binary_kernel<Gt>()};
const OpRegistrar ge_kernel{"ge", DeviceType::cpu, binary_kernel<Ge>()};

}  // namespace

}  // namespace troupe
