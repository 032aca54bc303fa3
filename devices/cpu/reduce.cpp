// Reductions on the CPU: sum, mean, max, min over `dims` (empty: all; negative dims wrap;
// duplicates are an error) with `keepdim`, and argmax (over the flattened tensor or one dim).
// sum of bool and integers gives i64 (PyTorch); floating sums accumulate in f64. mean needs a
// floating tensor. max/min/argmax propagate NaN and refuse an empty reduction.
//
// Each kernel views its input as a contiguous [outer, reduced, inner] block: when the reduced
// dims are adjacent that is the input itself (rows when inner == 1, vectorised columns
// otherwise); when they are not, a permuted copy with the reduced dims last.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "devices/cpu/loops.h"
#include "devices/op_defs/reduce.h"
#include "devices/registry.h"

namespace troupe {

namespace {

// x as a contiguous [outer, reduced, inner] block.
struct Blocked {
  Tensor x;
  int64_t outer = 1, reduced = 1, inner = 1;
};

Blocked block(const Tensor& x, const std::vector<bool>& reduced) {
  // Size-1 dims are irrelevant to the layout; the rest must read kept* reduced* kept*.
  int phase = 0;  // 0: leading kept dims, 1: in the reduced block, 2: trailing kept dims
  bool adjacent = true;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (x.shape()[d] == 1) continue;
    if (reduced[d] && phase == 2) adjacent = false;
    if (reduced[d] && phase == 0) phase = 1;
    if (!reduced[d] && phase == 1) phase = 2;
  }
  Blocked b;
  if (adjacent) {
    b.x = x.contiguous();
    int64_t* part = &b.outer;
    for (int64_t d = 0; d < x.dim(); ++d) {
      if (x.shape()[d] == 1) continue;
      if (reduced[d]) part = &b.reduced;
      else if (part == &b.reduced) part = &b.inner;
      *part *= x.shape()[d];
    }
    return b;
  }
  std::vector<int64_t> order;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (!reduced[d]) order.push_back(d), b.outer *= x.shape()[d];
  for (int64_t d = 0; d < x.dim(); ++d)
    if (reduced[d]) order.push_back(d), b.reduced *= x.shape()[d];
  b.x = x.permute(order).contiguous();
  return b;
}

// out[o * inner + i] = sum over r of x[o, r, i], in Acc.
template <class Acc, class T>
void sum_block(const T* x, const Blocked& b, Acc* out) {
  for (int64_t o = 0; o < b.outer; ++o) {
    const T* slab = x + o * b.reduced * b.inner;
    Acc* dst = out + o * b.inner;
    if (b.inner == 1) {
      dst[0] = sum_row<Acc>(slab, b.reduced);
      continue;
    }
    std::fill(dst, dst + b.inner, Acc(0));
    for (int64_t r = 0; r < b.reduced; ++r) {
      const T* row = slab + r * b.inner;
      for (int64_t i = 0; i < b.inner; ++i) dst[i] += static_cast<Acc>(row[i]);
    }
  }
}

// out[o * inner + i] = pick folded over r of x[o, r, i]; reduced >= 1.
template <class Acc, class T, class Pick>
void fold_block(const T* x, const Blocked& b, Acc* out, Pick pick) {
  for (int64_t o = 0; o < b.outer; ++o) {
    const T* slab = x + o * b.reduced * b.inner;
    Acc* dst = out + o * b.inner;
    if (b.inner == 1) {
      dst[0] = fold_row<Acc>(slab, b.reduced, pick);
      continue;
    }
    for (int64_t i = 0; i < b.inner; ++i) dst[i] = static_cast<Acc>(slab[i]);
    for (int64_t r = 1; r < b.reduced; ++r) {
      const T* row = slab + r * b.inner;
      for (int64_t i = 0; i < b.inner; ++i) dst[i] = pick(dst[i], static_cast<Acc>(row[i]));
    }
  }
}

// Floating sums accumulate in f64; integer ones in u64, which wraps like PyTorch's i64.
template <class T>
using sum_acc_t = std::conditional_t<std::is_integral_v<T>, uint64_t, double>;

std::vector<Tensor> sum_or_mean(const OpCall& call, bool mean) {
  const Tensor& x = call.inputs[0];
  const TensorMeta& meta = call.outputs[0];
  const Reduction plan = plan_reduction(std::string(call.op), x.meta(), call.attrs.get<std::vector<int64_t>>("dims"),
                                        call.attrs.get<bool>("keepdim"));
  Tensor out = Tensor::empty(meta.shape, meta.dtype);
  if (out.numel() == 0) return {out};
  const Blocked b = block(x, plan.reduced);
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using Acc = sum_acc_t<T>;
    std::vector<Acc> acc(static_cast<size_t>(out.numel()));
    sum_block<Acc>(b.x.data<T>(), b, acc.data());
    if constexpr (std::is_integral_v<T>) {
      int64_t* dst = out.mutable_data<int64_t>();
      for (size_t i = 0; i < acc.size(); ++i) dst[i] = static_cast<int64_t>(acc[i]);
    } else {
      T* dst = out.mutable_data<T>();
      const double count = static_cast<double>(plan.count);  // 0 for an empty mean: NaN like PyTorch
      for (size_t i = 0; i < acc.size(); ++i) dst[i] = convert<T>(mean ? acc[i] / count : acc[i]);
    }
  });
  return {out};
}

template <bool Max>
std::vector<Tensor> max_or_min(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  const Reduction plan = plan_reduction(std::string(call.op), x.meta(), call.attrs.get<std::vector<int64_t>>("dims"),
                                        call.attrs.get<bool>("keepdim"));
  Tensor out = Tensor::empty(call.outputs[0].shape, x.dtype());
  if (out.numel() == 0) return {out};
  const Blocked b = block(x, plan.reduced);
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = compute_t<T>;
    const int64_t count = out.numel();
    auto acc = std::make_unique<A[]>(count);  // not std::vector: A may be bool
    if constexpr (Max)
      fold_block<A>(b.x.data<T>(), b, acc.get(), NanMax{});
    else
      fold_block<A>(b.x.data<T>(), b, acc.get(), NanMin{});
    T* dst = out.mutable_data<T>();
    for (int64_t i = 0; i < count; ++i) dst[i] = convert<T>(acc[i]);
  });
  return {out};
}

// First index of the maximum; a NaN beats every number.
template <class A>
inline bool beats(A v, A best) {
  return v > best || (v != v && best == best);
}

std::vector<Tensor> argmax_kernel(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  const Reduction plan = plan_reduction("argmax", x.meta(), call.attrs.get<std::vector<int64_t>>("dims"),
                                        call.attrs.get<bool>("keepdim"));
  Tensor out = Tensor::empty(call.outputs[0].shape, DType::i64);
  if (out.numel() == 0) return {out};
  const Blocked b = block(x, plan.reduced);
  int64_t* dst = out.mutable_data<int64_t>();
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using A = compute_t<T>;
    const T* px = b.x.data<T>();
    auto best = std::make_unique<A[]>(b.inner);  // not std::vector: A may be bool
    for (int64_t o = 0; o < b.outer; ++o) {
      const T* slab = px + o * b.reduced * b.inner;
      int64_t* at = dst + o * b.inner;
      for (int64_t i = 0; i < b.inner; ++i) best[i] = static_cast<A>(slab[i]), at[i] = 0;
      for (int64_t r = 1; r < b.reduced; ++r) {
        const T* row = slab + r * b.inner;
        for (int64_t i = 0; i < b.inner; ++i) {
          const A v = static_cast<A>(row[i]);
          if (beats(v, best[i])) best[i] = v, at[i] = r;
        }
      }
    }
  });
  return {out};
}

std::vector<Tensor> sum_cpu(const OpCall& call) { return sum_or_mean(call, false); }
std::vector<Tensor> mean_cpu(const OpCall& call) { return sum_or_mean(call, true); }

const OpRegistrar sum_kernel{"sum", DeviceType::cpu, sum_cpu};
const OpRegistrar mean_kernel{"mean", DeviceType::cpu, mean_cpu};
const OpRegistrar max_kernel{"max", DeviceType::cpu, max_or_min<true>};
const OpRegistrar min_kernel{"min", DeviceType::cpu, max_or_min<false>};
const OpRegistrar argmax_cpu{"argmax", DeviceType::cpu, argmax_kernel};

}  // namespace

}  // namespace troupe
