// dropout and dropout2d (PyTorch's F.dropout and F.dropout2d): while training, each element
// (dropout) or each whole channel x[n, c] (dropout2d) is zeroed with probability p and the rest
// scaled by 1 / (1 - p). Outputs: y and the bool keep-mask (x's shape, or [N, C, 1, ...] for
// dropout2d) that dropout_backward(grad, mask) applies again. Not training, or p = 0: y is x and
// the mask is empty. Draws come from the calling thread's generator (devices/random.h).
#include <string>

#include "devices/cpu/loops.h"
#include "devices/random.h"
#include "devices/registry.h"

namespace troupe {
namespace {

double checked_p(std::string_view op, const Attrs& attrs) {
  const double p = attrs.get<double>("p");
  if (!(p >= 0.0 && p <= 1.0)) throw ValueError(std::string(op) + ": p must be in [0, 1], got " + std::to_string(p));
  return p;
}

bool active(const Attrs& attrs) { return attrs.get<bool>("training") && attrs.get<double>("p") > 0.0; }

Shape mask_shape(std::string_view op, const TensorMeta& x, const Attrs& attrs) {
  if (!active(attrs)) return {0};
  if (op == "dropout") return x.shape;
  Shape s = x.shape;
  for (size_t d = 2; d < s.size(); ++d) s[d] = 1;
  return s;
}

std::vector<TensorMeta> infer_dropout(const OpInfer& c) {
  const TensorMeta& x = c.inputs[0];
  checked_p(c.op, c.attrs);
  if (!is_floating(x.dtype)) throw DTypeError(std::string(c.op) + ": expects a floating tensor, got " + x.str());
  if (c.op == "dropout2d" && x.shape.size() < 3)
    throw ShapeError("dropout2d: expects [N, C, H, W] (or [N, C, L...]), got " + x.str());
  return {x, {DType::boolean, mask_shape(c.op, x, c.attrs), x.device}};
}

// y = x * mask * scale with the mask broadcast over x.
Tensor apply_mask(const Tensor& x, const Tensor& mask, double scale) {
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  dispatch(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<compute_t<T>, float> || std::is_same_v<T, double>) {
      using A = compute_t<T>;
      const A s = static_cast<A>(scale);
      const T* px = x.data<T>();
      const bool* pm = mask.data<bool>();
      T* po = out.mutable_data<T>();
      for_each_run<2>(x.shape(), {x.strides(), broadcast_strides(mask, x.shape())},
                      [&](const auto& at, const auto& step, int64_t n) {
                        const T* in = px + at[0];
                        const bool* m = pm + at[1];
                        for (int64_t i = 0; i < n; ++i)
                          po[i] = convert<T>(m[i * step[1]] ? A(in[i * step[0]]) * s : A(0));
                        po += n;
                      });
    }
  });
  return out;
}

std::vector<Tensor> dropout_cpu(const OpCall& call) {
  const Tensor& x = call.inputs[0];
  if (!active(call.attrs)) return {x, Tensor::empty({0}, DType::boolean)};
  const double p = call.attrs.get<double>("p");
  Tensor mask = Tensor::empty(call.outputs[1].shape, DType::boolean);
  bool* m = mask.mutable_data<bool>();
  Generator& g = thread_generator();
  for (int64_t i = 0; i < mask.numel(); ++i) m[i] = g.uniform() >= p;
  return {apply_mask(x, mask, p < 1.0 ? 1.0 / (1.0 - p) : 0.0), mask};
}

std::vector<AttrSpec> dropout_attrs() {
  return {{"p", AttrType::real, 0.5, "probability of zeroing"},
          {"training", AttrType::boolean, true, "false: the identity"}};
}

const OpRegistrar dropout_op{OpDef{.name = "dropout",
                                   .doc = "zeroes elements with probability p while training, scales the rest by "
                                          "1/(1-p) -> (y, bool keep-mask)",
                                   .attrs = dropout_attrs(),
                                   .infer = infer_dropout,
                                   .kernels = {{DeviceType::cpu, dropout_cpu}}}};

const OpRegistrar dropout2d_op{OpDef{.name = "dropout2d",
                                     .doc = "zeroes whole channels x[n, c] with probability p while training, "
                                            "scales the rest by 1/(1-p) -> (y, bool keep-mask [N, C, 1, ...])",
                                     .attrs = dropout_attrs(),
                                     .infer = infer_dropout,
                                     .kernels = {{DeviceType::cpu, dropout_cpu}}}};

const OpRegistrar dropout_backward_op{OpDef{
    .name = "dropout_backward",
    .doc = "gradient of dropout/dropout2d: grad * mask / (1 - p) (grad itself for an empty mask)",
    .min_inputs = 2,
    .max_inputs = 2,
    .attrs = {{"p", AttrType::real, 0.5, "the forward call's p"}},
    .infer =
        [](const OpInfer& c) {
          const TensorMeta &g = c.inputs[0], &mask = c.inputs[1];
          checked_p(c.op, c.attrs);
          if (!is_floating(g.dtype) || mask.dtype != DType::boolean)
            throw DTypeError("dropout_backward: expects a floating gradient and a bool mask, got " + g.str() + " and " +
                             mask.str());
          if (numel(mask.shape) != 0) broadcast_shapes("dropout_backward", mask.shape, g.shape);
          return std::vector<TensorMeta>{g};
        },
    .kernels = {{DeviceType::cpu, [](const OpCall& call) {
                   const Tensor &g = call.inputs[0], &mask = call.inputs[1];
                   if (mask.numel() == 0) return std::vector<Tensor>{g};
                   const double p = call.attrs.get<double>("p");
                   return std::vector<Tensor>{apply_mask(g, mask, p < 1.0 ? 1.0 / (1.0 - p) : 0.0)};
                 }}},
    .not_differentiable = kGradientKernel}};

}  // namespace
}  // namespace troupe
