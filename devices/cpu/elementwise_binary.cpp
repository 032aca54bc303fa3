// Binary elementwise ops on the CPU, NumPy broadcasting and PyTorch type promotion: add, sub,
// mul, div (true division: integer and bool operands give f32), maximum, minimum, and the
// comparisons eq ne lt le gt ge (bool results, compared in the promoted type). Integer arithmetic
// wraps around like PyTorch's; f16/bf16 compute in f32. Contiguous and scalar-broadcast operands
// run as one flat loop the compiler vectorises.
#include <string>
#include <type_traits>

#include "devices/cpu/loops.h"
#include "devices/cpu/parallel_ranges.h"
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

// The dtype both operands are converted to before the op runs.
DType compute_dtype(DType a, DType b, bool true_division) {
  const DType promoted = promote(a, b);
  return true_division && !is_floating(promoted) ? DType::f32 : promoted;
}

template <class Op>
bool supports(DType t) {
  return dispatch(t, [](auto tag) { return Op::template supports<compute_t<typename decltype(tag)::type>>; });
}

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
OpDef binary_op(std::string name, std::string doc, bool true_division = false) {
  constexpr bool comparison = std::is_same_v<decltype(Op{}(0.0f, 0.0f)), bool>;
  auto infer = [true_division](const OpInfer& c) {
    const std::string op(c.op);
    const TensorMeta& a = c.inputs[0];
    const TensorMeta& b = c.inputs[1];
    const Shape shape = broadcast_shapes(op.c_str(), a.shape, b.shape);
    const DType compute = compute_dtype(a.dtype, b.dtype, true_division);
    if (!supports<Op>(compute))
      throw DTypeError(op + ": not defined for " + troupe::name(compute) + " operands (" + a.str() + ", " + b.str() + ")");
    return std::vector<TensorMeta>{{comparison ? DType::boolean : compute, shape, a.device}};
  };
  auto kernel = [true_division](const OpCall& call) {
    const TensorMeta& meta = call.outputs[0];
    Tensor out = Tensor::empty(meta.shape, meta.dtype);
    if (out.numel() == 0) return std::vector<Tensor>{out};
    const DType compute = compute_dtype(call.inputs[0].dtype(), call.inputs[1].dtype(), true_division);
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
  return OpDef{.name = std::move(name),
               .doc = std::move(doc),
               .min_inputs = 2,
               .max_inputs = 2,
               .attrs = {},
               .infer = infer,
               .kernels = {{DeviceType::cpu, kernel}},
               .not_differentiable = comparison ? "comparison: bool output" : ""};
}

const OpRegistrar add_op{binary_op<Add>("add", "a + b elementwise (broadcasting, type promotion; bool: or)")};
const OpRegistrar sub_op{binary_op<Sub>("sub", "a - b elementwise (broadcasting, type promotion; not bool)")};
const OpRegistrar mul_op{binary_op<Mul>("mul", "a * b elementwise (broadcasting, type promotion; bool: and)")};
const OpRegistrar div_op{binary_op<Div>("div", "a / b elementwise, true division (integers give f32)", true)};
const OpRegistrar maximum_op{binary_op<Maximum>("maximum", "elementwise maximum (NaN wins)")};
const OpRegistrar minimum_op{binary_op<Minimum>("minimum", "elementwise minimum (NaN wins)")};
const OpRegistrar eq_op{binary_op<Eq>("eq", "a == b elementwise, bool result")};
const OpRegistrar ne_op{binary_op<Ne>("ne", "a != b elementwise, bool result")};
const OpRegistrar lt_op{binary_op<Lt>("lt", "a < b elementwise, bool result")};
const OpRegistrar le_op{binary_op<Le>("le", "a <= b elementwise, bool result")};
const OpRegistrar gt_op{binary_op<Gt>("gt", "a > b elementwise, bool result")};
const OpRegistrar ge_op{binary_op<Ge>("ge", "a >= b elementwise, bool result")};

}  // namespace

}  // namespace troupe
