#include "devices/ops.h"

#include "devices/autograd/grad_mode.h"
#include "devices/registry.h"

namespace troupe {

namespace {

// Looks the op up once per call site; the registry's map keeps the reference valid.
#define TROUPE_OP(name)                                                  \
  static const OpDef& op_def = OpRegistry::global().get(name);           \
  auto run = [&](const std::vector<Tensor>& in, const Attrs& attrs = {}) { \
    return OpRegistry::global().call(op_def, in, attrs);                 \
  }

Tensor scalar_like(const Tensor& a, double v) {
  return Tensor::full({}, v, a.dtype(), a.device());
}

}  // namespace

#define TROUPE_BINARY(fn)                                   \
  Tensor fn(const Tensor& a, const Tensor& b) {             \
    TROUPE_OP(#fn);                                         \
    return run({a, b})[0];                                  \
  }
TROUPE_BINARY(add)
TROUPE_BINARY(sub)
TROUPE_BINARY(mul)
TROUPE_BINARY(div)
TROUPE_BINARY(maximum)
TROUPE_BINARY(minimum)
TROUPE_BINARY(eq)
TROUPE_BINARY(ne)
TROUPE_BINARY(lt)
TROUPE_BINARY(le)
TROUPE_BINARY(gt)
TROUPE_BINARY(ge)
#undef TROUPE_BINARY

Tensor add(const Tensor& a, double b) { return add(a, scalar_like(a, b)); }
Tensor mul(const Tensor& a, double b) { return mul(a, scalar_like(a, b)); }

#define TROUPE_UNARY(fn)            \
  Tensor fn(const Tensor& x) {      \
    TROUPE_OP(#fn);                 \
    return run({x})[0];             \
  }
TROUPE_UNARY(neg)
TROUPE_UNARY(abs)
TROUPE_UNARY(exp)
TROUPE_UNARY(log)
TROUPE_UNARY(sqrt)
TROUPE_UNARY(tanh)
TROUPE_UNARY(sigmoid)
TROUPE_UNARY(relu)
#undef TROUPE_UNARY

Tensor gelu(const Tensor& x, bool tanh_approximation) {
  TROUPE_OP("gelu");
  return run({x}, {{"approximate", std::string(tanh_approximation ? "tanh" : "none")}})[0];
}

Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a, bool transpose_b) {
  TROUPE_OP("matmul");
  if (!transpose_a && !transpose_b) return run({a, b})[0];
  return run({a, b}, {{"transpose_a", transpose_a}, {"transpose_b", transpose_b}})[0];
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  TROUPE_OP("bmm");
  return run({a, b})[0];
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  TROUPE_OP("linear");
  return bias.defined() ? run({x, weight, bias})[0] : run({x, weight})[0];
}

Tensor linear_bf16(const Tensor& x, const Tensor& weight, const Tensor& bias, const std::string& activation,
                   DType out_dtype) {
  TROUPE_OP("linear_bf16");
  const Attrs attrs{{"activation", activation}, {"out_dtype", std::string(name(out_dtype))}};
  return bias.defined() ? run({x, weight, bias}, attrs)[0] : run({x, weight}, attrs)[0];
}

#define TROUPE_REDUCTION(fn)                                                     \
  Tensor fn(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {   \
    TROUPE_OP(#fn);                                                              \
    return run({x}, {{"dims", dims}, {"keepdim", keepdim}})[0];                  \
  }
TROUPE_REDUCTION(sum)
TROUPE_REDUCTION(mean)
TROUPE_REDUCTION(max)
TROUPE_REDUCTION(min)
#undef TROUPE_REDUCTION

Tensor argmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  TROUPE_OP("argmax");
  Attrs attrs{{"keepdim", keepdim}};
  if (dim) attrs.set("dims", std::vector<int64_t>{*dim});
  return run({x}, attrs)[0];
}

Tensor softmax(const Tensor& x, int64_t dim) {
  TROUPE_OP("softmax");
  return run({x}, {{"dim", dim}})[0];
}

Tensor log_softmax(const Tensor& x, int64_t dim) {
  TROUPE_OP("log_softmax");
  return run({x}, {{"dim", dim}})[0];
}

Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  TROUPE_OP("layer_norm");
  Attrs attrs{{"normalized_shape", normalized_shape}, {"eps", eps}};
  if (bias.defined() && !weight.defined())
    throw ValueError("layer_norm: a bias without a weight is not supported (pass ones as the weight)");
  if (bias.defined()) return run({x, weight, bias}, attrs)[0];
  if (weight.defined()) return run({x, weight}, attrs)[0];
  return run({x}, attrs)[0];
}

namespace {

std::vector<Tensor> run_add_layer_norm(const OpDef& def, const Tensor& x, const Tensor& residual,
                                       const Tensor& weight, const Tensor& bias, double eps, bool return_sum) {
  if (bias.defined() && !weight.defined())
    throw ValueError("add_layer_norm: a bias without a weight is not supported (pass ones as the weight)");
  std::vector<Tensor> inputs{x, residual};
  if (weight.defined()) inputs.push_back(weight);
  if (bias.defined()) inputs.push_back(bias);
  if (grad_enabled())
    for (const Tensor& t : inputs)
      if (t.requires_grad())
        throw ValueError("add_layer_norm: inference only, but " + t.meta().str() +
                         " requires grad; use add and layer_norm to train, or turn grad mode off (NoGradGuard)");
  return OpRegistry::global().call(def, inputs, {{"eps", eps}, {"return_sum", return_sum}});
}

}  // namespace

Tensor add_layer_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, const Tensor& bias, double eps) {
  static const OpDef& def = OpRegistry::global().get("add_layer_norm");
  return run_add_layer_norm(def, x, residual, weight, bias, eps, false)[0];
}

std::pair<Tensor, Tensor> add_layer_norm_with_sum(const Tensor& x, const Tensor& residual, const Tensor& weight,
                                                  const Tensor& bias, double eps) {
  static const OpDef& def = OpRegistry::global().get("add_layer_norm");
  std::vector<Tensor> out = run_add_layer_norm(def, x, residual, weight, bias, eps, true);
  return {out[0], out[1]};
}

Tensor cat(const std::vector<Tensor>& xs, int64_t dim) {
  TROUPE_OP("cat");
  return run(xs, {{"dim", dim}})[0];
}

Tensor stack(const std::vector<Tensor>& xs, int64_t dim) {
  TROUPE_OP("stack");
  return run(xs, {{"dim", dim}})[0];
}

std::vector<Tensor> split(const Tensor& x, int64_t size, int64_t dim) {
  TROUPE_OP("split");
  return run({x}, {{"size", size}, {"dim", dim}});
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  TROUPE_OP("split");
  return run({x}, {{"sizes", sizes}, {"dim", dim}});
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  TROUPE_OP("chunk");
  return run({x}, {{"chunks", chunks}, {"dim", dim}});
}

Tensor flip(const Tensor& x, const std::vector<int64_t>& dims) {
  TROUPE_OP("flip");
  return run({x}, {{"dims", dims}})[0];
}

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  TROUPE_OP("index_select");
  return run({x, index}, {{"dim", dim}})[0];
}

Tensor embedding(const Tensor& indices, const Tensor& weight) {
  TROUPE_OP("embedding");
  return run({indices, weight})[0];
}

Tensor where(const Tensor& condition, const Tensor& x, const Tensor& y) {
  TROUPE_OP("where");
  return run({condition, x, y})[0];
}

Tensor gather_nd(const Tensor& data, const Tensor& indices, int64_t batch_dims) {
  TROUPE_OP("gather_nd");
  return run({data, indices}, {{"batch_dims", batch_dims}})[0];
}

Tensor packed_attention(const Tensor& qkv, const Tensor& offsets, int64_t heads, const Tensor& key_lengths) {
  TROUPE_OP("packed_attention");
  if (key_lengths.defined()) return run({qkv, offsets, key_lengths}, {{"heads", heads}})[0];
  return run({qkv, offsets}, {{"heads", heads}})[0];
}

namespace {

Attrs conv_attrs(const Conv2dOptions& o) {
  return {{"stride", o.stride}, {"padding", o.padding}, {"dilation", o.dilation}, {"groups", o.groups}};
}

Attrs loss_attrs(const std::string& reduction, int64_t ignore_index) {
  return {{"reduction", reduction}, {"ignore_index", ignore_index}};
}

std::vector<Tensor> with_optional(std::vector<Tensor> inputs, const Tensor& optional) {
  if (optional.defined()) inputs.push_back(optional);
  return inputs;
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dOptions& options) {
  TROUPE_OP("conv2d");
  return run(with_optional({x, weight}, bias), conv_attrs(options))[0];
}

std::pair<Tensor, Tensor> max_pool2d_with_indices(const Tensor& x, const std::vector<int64_t>& kernel_size,
                                                  const std::vector<int64_t>& stride,
                                                  const std::vector<int64_t>& padding) {
  TROUPE_OP("max_pool2d");
  auto out = run({x}, {{"kernel_size", kernel_size}, {"stride", stride}, {"padding", padding}});
  return {out[0], out[1]};
}

Tensor max_pool2d(const Tensor& x, const std::vector<int64_t>& kernel_size, const std::vector<int64_t>& stride,
                  const std::vector<int64_t>& padding) {
  return max_pool2d_with_indices(x, kernel_size, stride, padding).first;
}

Tensor dropout(const Tensor& x, double p, bool training) {
  TROUPE_OP("dropout");
  return run({x}, {{"p", p}, {"training", training}})[0];
}

Tensor dropout2d(const Tensor& x, double p, bool training) {
  TROUPE_OP("dropout2d");
  return run({x}, {{"p", p}, {"training", training}})[0];
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const Tensor& weight, const std::string& reduction,
                int64_t ignore_index) {
  TROUPE_OP("nll_loss");
  return run(with_optional({log_probs, target}, weight), loss_attrs(reduction, ignore_index))[0];
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& weight, const std::string& reduction,
                     int64_t ignore_index) {
  TROUPE_OP("cross_entropy");
  return run(with_optional({logits, target}, weight), loss_attrs(reduction, ignore_index))[0];
}

#define TROUPE_ACTIVATION_BACKWARD(fn)                        \
  Tensor fn(const Tensor& grad, const Tensor& saved) {        \
    TROUPE_OP(#fn);                                           \
    return run({grad, saved})[0];                             \
  }
TROUPE_ACTIVATION_BACKWARD(relu_backward)
TROUPE_ACTIVATION_BACKWARD(tanh_backward)
TROUPE_ACTIVATION_BACKWARD(sigmoid_backward)
#undef TROUPE_ACTIVATION_BACKWARD

Tensor gelu_backward(const Tensor& grad, const Tensor& x, bool tanh_approximation) {
  TROUPE_OP("gelu_backward");
  return run({grad, x}, {{"approximate", std::string(tanh_approximation ? "tanh" : "none")}})[0];
}

Tensor conv2d_backward_input(const Tensor& grad, const Tensor& weight, const Shape& input_shape,
                             const Conv2dOptions& options) {
  TROUPE_OP("conv2d_backward_input");
  return run({grad, weight}, conv_attrs(options).set("input_shape", input_shape))[0];
}

std::vector<Tensor> conv2d_backward_weight(const Tensor& grad, const Tensor& x, const Shape& weight_shape, bool bias,
                                           const Conv2dOptions& options) {
  TROUPE_OP("conv2d_backward_weight");
  return run({grad, x}, conv_attrs(options).set("weight_shape", weight_shape).set("bias", bias));
}

Tensor max_pool2d_backward(const Tensor& grad, const Tensor& indices, const Shape& input_shape) {
  TROUPE_OP("max_pool2d_backward");
  return run({grad, indices}, {{"input_shape", input_shape}})[0];
}

Tensor dropout_backward(const Tensor& grad, const Tensor& mask, double p) {
  TROUPE_OP("dropout_backward");
  return run({grad, mask}, {{"p", p}})[0];
}

Tensor nll_loss_backward(const Tensor& grad, const Tensor& log_probs, const Tensor& target, const Tensor& weight,
                         const std::string& reduction, int64_t ignore_index) {
  TROUPE_OP("nll_loss_backward");
  return run(with_optional({grad, log_probs, target}, weight), loss_attrs(reduction, ignore_index))[0];
}

Tensor cross_entropy_backward(const Tensor& grad, const Tensor& logits, const Tensor& target, const Tensor& weight,
                              const std::string& reduction, int64_t ignore_index) {
  TROUPE_OP("cross_entropy_backward");
  return run(with_optional({grad, logits, target}, weight), loss_attrs(reduction, ignore_index))[0];
}

std::vector<Tensor> layer_norm_backward(const Tensor& grad, const Tensor& x, const Shape& normalized_shape,
                                        const Tensor& weight, double eps) {
  TROUPE_OP("layer_norm_backward");
  return run(with_optional({grad, x}, weight), {{"normalized_shape", normalized_shape}, {"eps", eps}});
}

std::vector<Tensor> lstm_backward(const std::vector<Tensor>& lstm_inputs_with_states, const Tensor& grad_output,
                                  const Tensor& grad_h_n, const Tensor& grad_c_n) {
  TROUPE_OP("lstm_backward");
  std::vector<Tensor> in = lstm_inputs_with_states;
  in.insert(in.end(), {grad_output, grad_h_n, grad_c_n});
  return run(in);
}

}  // namespace troupe
