// nll_loss and cross_entropy (PyTorch's F.nll_loss / F.cross_entropy on input [N, C] and class
// targets [N]), with their backward kernels. nll_loss reads log-probabilities, cross_entropy
// logits (a log_softmax over C first). Per sample i: loss_i = -w[t_i] * logp[i, t_i], 0 where
// t_i == ignore_index. reduction "mean" divides the sum by the summed weights of the counted
// samples, "sum" sums, "none" returns [N]. Class weights [C] are optional (all 1).
#include <cmath>
#include <string>
#include <vector>

#include "devices/registry.h"

namespace troupe {
namespace {

enum class Reduction { none, mean, sum };

Reduction reduction_of(std::string_view op, const Attrs& attrs) {
  const std::string& r = attrs.get<std::string>("reduction");
  if (r == "mean") return Reduction::mean;
  if (r == "sum") return Reduction::sum;
  if (r == "none") return Reduction::none;
  throw ValueError(std::string(op) + ": reduction must be \"mean\", \"sum\" or \"none\", got \"" + r + "\"");
}

// Validates (input, target, weight?) starting at inputs[first]; returns the loss meta.
TensorMeta check(std::string_view op, const std::vector<TensorMeta>& in, size_t first, const Attrs& attrs) {
  const TensorMeta &x = in[first], &target = in[first + 1];
  if (x.dtype != DType::f32 && x.dtype != DType::f64)
    throw DTypeError(std::string(op) + ": the input must be f32 or f64, got " + x.str());
  if (target.dtype != DType::i64 && target.dtype != DType::i32)
    throw DTypeError(std::string(op) + ": the target must hold class indices (i64 or i32), got " + target.str());
  if (x.shape.size() != 2) throw ShapeError(std::string(op) + ": the input must be [N, C], got " + x.str());
  if (target.shape != Shape{x.shape[0]})
    throw ShapeError(std::string(op) + ": the target must be [" + std::to_string(x.shape[0]) + "] for input " +
                     x.str() + ", got " + target.str());
  if (in.size() > first + 2) {
    const TensorMeta& w = in[first + 2];
    if (w.dtype != x.dtype) throw DTypeError(std::string(op) + ": the weight " + w.str() + " does not match the input " + x.str());
    if (w.shape != Shape{x.shape[1]})
      throw ShapeError(std::string(op) + ": the weight must be [" + std::to_string(x.shape[1]) + "] for input " +
                       x.str() + ", got " + w.str());
  }
  const Reduction r = reduction_of(op, attrs);
  return {x.dtype, r == Reduction::none ? Shape{x.shape[0]} : Shape{}, x.device};
}

struct Problem {
  int64_t n, c;
  std::vector<int64_t> target;  // validated; ignored samples hold ignore_index
  std::vector<double> weight;   // per class
  int64_t ignore_index;
  Reduction reduction;
  double total_weight = 0;      // summed weights of counted samples
};

Problem problem(std::string_view op, const std::vector<Tensor>& in, size_t first, const Attrs& attrs) {
  const Tensor &x = in[first], &target = in[first + 1];
  Problem p;
  p.n = x.size(0), p.c = x.size(1);
  p.target = target.to_vector<int64_t>();
  p.weight = in.size() > first + 2 ? in[first + 2].to_vector<double>() : std::vector<double>(p.c, 1.0);
  p.ignore_index = attrs.get<int64_t>("ignore_index");
  p.reduction = reduction_of(op, attrs);
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
    if (p.reduction == Reduction::none)
      for (int64_t i = 0; i < p.n; ++i) po[i] = convert<T>(losses[i]);
    else
      po[0] = convert<T>(p.reduction == Reduction::sum ? total : total / p.total_weight);
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
    double gi = p.reduction == Reduction::none ? g[i] : g[0];
    if (p.reduction == Reduction::mean) gi /= p.total_weight;
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

std::vector<AttrSpec> loss_attrs() {
  return {{"reduction", AttrType::string, std::string("mean"), "\"mean\" (weighted), \"sum\" or \"none\""},
          {"ignore_index", AttrType::integer, int64_t{-100}, "samples with this target count for nothing"}};
}

const OpRegistrar nll_loss_op{OpDef{
    .name = "nll_loss",
    .doc = "negative log-likelihood of class targets [N] under log-probabilities [N, C] (class weights [C] optional)",
    .min_inputs = 2,
    .max_inputs = 3,
    .attrs = loss_attrs(),
    .infer = [](const OpInfer& c) { return std::vector<TensorMeta>{check(c.op, c.inputs, 0, c.attrs)}; },
    .kernels = {{DeviceType::cpu, [](const OpCall& c) { return loss_cpu(c, false); }}}}};

const OpRegistrar cross_entropy_op{OpDef{
    .name = "cross_entropy",
    .doc = "nll_loss(log_softmax(logits [N, C], 1), targets [N]) (class weights [C] optional)",
    .min_inputs = 2,
    .max_inputs = 3,
    .attrs = loss_attrs(),
    .infer = [](const OpInfer& c) { return std::vector<TensorMeta>{check(c.op, c.inputs, 0, c.attrs)}; },
    .kernels = {{DeviceType::cpu, [](const OpCall& c) { return loss_cpu(c, true); }}}}};

std::vector<TensorMeta> infer_loss_backward(const OpInfer& c) {
  const TensorMeta& loss = check(c.op, c.inputs, 1, c.attrs);
  const TensorMeta& g = c.inputs[0];
  if (g.dtype != loss.dtype || g.shape != loss.shape)
    throw ShapeError(std::string(c.op) + ": the gradient " + g.str() + " does not match the loss " + loss.str());
  return {c.inputs[1]};
}

const OpRegistrar nll_loss_backward_op{OpDef{
    .name = "nll_loss_backward",
    .doc = "gradient of nll_loss: (grad, input, target[, weight]) -> d input",
    .min_inputs = 3,
    .max_inputs = 4,
    .attrs = loss_attrs(),
    .infer = infer_loss_backward,
    .kernels = {{DeviceType::cpu, [](const OpCall& c) { return loss_backward_cpu(c, false); }}},
    .not_differentiable = kGradientKernel}};

const OpRegistrar cross_entropy_backward_op{OpDef{
    .name = "cross_entropy_backward",
    .doc = "gradient of cross_entropy: (grad, logits, target[, weight]) -> d logits",
    .min_inputs = 3,
    .max_inputs = 4,
    .attrs = loss_attrs(),
    .infer = infer_loss_backward,
    .kernels = {{DeviceType::cpu, [](const OpCall& c) { return loss_backward_cpu(c, true); }}},
    .not_differentiable = kGradientKernel}};

}  // namespace
}  // namespace troupe
