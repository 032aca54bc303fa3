// nll_loss and cross_entropy (PyTorch's F.nll_loss / F.cross_entropy on input [N, C] and class
// targets [N]), with their backward kernels. nll_loss reads log-probabilities, cross_entropy
// logits (a log_softmax over C first). Per sample i: loss_i = -w[t_i] * logp[i, t_i], 0 where
// t_i == ignore_index. reduction "mean" divides the sum by the summed weights of the counted
// samples, "sum" sums, "none" returns [N]. Class weights [C] are optional (all 1).
#include <cmath>
#include <string>
#include <vector>

#include "devices/op_defs/losses.h"
#include "devices/registry.h"

namespace troupe {
namespace {

struct Problem {
  int64_t n, c;
  std::vector<int64_t> target;  // validated; ignored samples hold ignore_index
  std::vector<double> weight;   // per class
  int64_t ignore_index;
  LossReduction reduction;
  double total_weight = 0;      // summed weights of counted samples
};

Problem problem(std::string_view op, const std::vector<Tensor>& in, size_t first, const Attrs& attrs) {
  const Tensor &x = in[first], &target = in[first + 1];
  Problem p;
  p.n = x.size(0), p.c = x.size(1);
  p.target = target.to_vector<int64_t>();
  p.weight = in.size() > first + 2 ? in[first + 2].to_vector<double>() : std::vector<double>(p.c, 1.0);
  const LossAttrs a = loss_attrs(op, attrs);
  p.ignore_index = a.ignore_index;
  p.reduction = a.reduction;
  for (int64_t i = 0; i < p.n; ++i) {
    const int64_t t = p.target[i];
    if (t == p.ignore_index) continue;
    if (t < 0 || t >= p.c)
      throw IndexError(std::string(op) + ": target " + std::to_string(t) + " of sample " + std::to_string(i) +
                       " is not a class in [0, " + std::to_string(p.c) + ")");
    p.total_weight += p.weight[t];
  }
  return p;
}

// Log-probabilities as doubles, row-major [n, c]: the input itself, or its log_softmax.
std::vector<double> log_probs(const Tensor& x, bool from_logits) {
  std::vector<double> lp = x.to_vector<double>();
  if (!from_logits) return lp;
  const int64_t n = x.size(0), c = x.size(1);
  for (int64_t i = 0; i < n; ++i) {
    double* row = lp.data() + i * c;
    double top = -INFINITY;
    for (int64_t j = 0; j < c; ++j) top = std::max(top, row[j]);
    double total = 0;
    for (int64_t j = 0; j < c; ++j) total += std::exp(row[j] - top);
    const double shift = top + std::log(total);
    for (int64_t j = 0; j < c; ++j) row[j] -= shift;
  }
  return lp;
}

std::vector<Tensor> loss_cpu(const OpCall& call, bool from_logits) {
  const Problem p = problem(call.op, call.inputs, 0, call.attrs);
  const std::vector<double> lp = log_probs(call.inputs[0], from_logits);
  std::vector<double> losses(p.n, 0.0);
  double total = 0;
  for (int64_t i = 0; i < p.n; ++i) {
    const int64_t t = p.target[i];
    if (t == p.ignore_index) continue;
    losses[i] = -p.weight[t] * lp[i * p.c + t];
    total += losses[i];
  }
  const DType dtype = call.outputs[0].dtype;
  Tensor out = Tensor::empty(call.outputs[0].shape, dtype);
  dispatch(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* po = out.mutable_data<T>();
    if (p.reduction == LossReduction::none)
      for (int64_t i = 0; i < p.n; ++i) po[i] = convert<T>(losses[i]);
    else
      po[0] = convert<T>(p.reduction == LossReduction::sum ? total : total / p.total_weight);
  });
  return {out};
}

// d loss / d input: nll puts -w[t_i] * g_i at [i, t_i]; cross_entropy spreads it over the row as
// w[t_i] * g_i * (softmax(x_i) - onehot(t_i)). g_i is the output gradient (divided by the total
// weight for "mean").
std::vector<Tensor> loss_backward_cpu(const OpCall& call, bool from_logits) {
  const Tensor& grad = call.inputs[0];
  const Problem p = problem(call.op, call.inputs, 1, call.attrs);
  const std::vector<double> g = grad.to_vector<double>();
  std::vector<double> dx(p.n * p.c, 0.0);
  const std::vector<double> lp = from_logits ? log_probs(call.inputs[1], true) : std::vector<double>();
  for (int64_t i = 0; i < p.n; ++i) {
    const int64_t t = p.target[i];
    if (t == p.ignore_index) continue;
    double gi = p.reduction == LossReduction::none ? g[i] : g[0];
    if (p.reduction == LossReduction::mean) gi /= p.total_weight;
    const double scale = p.weight[t] * gi;
    if (from_logits)
      for (int64_t j = 0; j < p.c; ++j) dx[i * p.c + j] = scale * std::exp(lp[i * p.c + j]);
    dx[i * p.c + t] -= scale;
  }
  const DType dtype = call.outputs[0].dtype;
  Tensor out = Tensor::empty(call.outputs[0].shape, dtype);
  dispatch(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* po = out.mutable_data<T>();
    for (size_t i = 0; i < dx.size(); ++i) po[i] = convert<T>(dx[i]);
  });
  return {out};
}

std::vector<Tensor> nll_loss_cpu(const OpCall& c) { return loss_cpu(c, false); }
std::vector<Tensor> cross_entropy_cpu(const OpCall& c) { return loss_cpu(c, true); }
std::vector<Tensor> nll_loss_backward_cpu(const OpCall& c) { return loss_backward_cpu(c, false); }
std::vector<Tensor> cross_entropy_backward_cpu(const OpCall& c) { return loss_backward_cpu(c, true); }

const OpRegistrar nll_loss_kernel{"nll_loss", DeviceType::cpu, nll_loss_cpu};
const OpRegistrar cross_entropy_kernel{"cross_entropy", DeviceType::cpu, cross_entropy_cpu};
const OpRegistrar nll_loss_backward_kernel{"nll_loss_backward", DeviceType::cpu, nll_loss_backward_cpu};
const OpRegistrar cross_entropy_backward_kernel{"cross_entropy_backward", DeviceType::cpu, cross_entropy_backward_cpu};

}  // namespace
}  // namespace troupe
