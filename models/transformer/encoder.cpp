#include "models/transformer/encoder.h"

#include <cmath>
#include <limits>
#include <string>

#include "devices/autograd/grad_mode.h"
#include "devices/error.h"
#include "devices/ops.h"
#include "devices/random.h"

namespace troupe::models {

namespace {

std::string shape_str(const Tensor& t) { return t.defined() ? t.meta().str() : "undefined"; }

// 0 for tokens, -inf for padding, shaped [B, 1, 1, S] to broadcast over heads and queries.
Tensor padding_bias(const Tensor& key_padding_mask) {
  const int64_t B = key_padding_mask.shape()[0], S = key_padding_mask.shape()[1];
  const Device device = key_padding_mask.device();
  Tensor bias = where(key_padding_mask, Tensor::full({}, -std::numeric_limits<double>::infinity(), DType::f32, device),
                      Tensor::zeros({}, DType::f32, device));
  return bias.reshape({B, 1, 1, S});
}

Tensor activate(const std::string& activation, const Tensor& x) { return activation == "gelu" ? gelu(x) : relu(x); }

}  // namespace

DType fastpath_activation_dtype(DType fastpath_dtype, Device device) {
  return fastpath_dtype == DType::bf16 && device.is_cuda() ? DType::bf16 : DType::f32;
}

PackedSequences::PackedSequences(const std::vector<int64_t>& offsets, const std::vector<int64_t>& lengths, Device device)
    : starts(Tensor::from_vector(offsets, {static_cast<int64_t>(offsets.size())}).to(device)) {
  if (!lengths.empty()) key_lengths = Tensor::from_vector(lengths, {static_cast<int64_t>(lengths.size())}).to(device);
}

LayerNorm::LayerNorm(int64_t d, double eps_) : weight(Tensor::ones({d})), bias(Tensor::zeros({d})), eps(eps_) {
  register_parameter("weight", weight);
  register_parameter("bias", bias);
}

Tensor LayerNorm::forward(const Tensor& x) const { return layer_norm(x, {weight.shape()[0]}, weight, bias, eps); }

MultiheadAttention::MultiheadAttention(int64_t d, int64_t heads, double dropout_, Generator& generator)
    : embed_dim(d), num_heads(heads), dropout(dropout_), out_proj(d, d, true, DType::f32, generator) {
  if (d <= 0 || heads <= 0 || d % heads != 0)
    throw ValueError("MultiheadAttention: embed_dim " + std::to_string(d) + " must be a positive multiple of num_heads " +
                     std::to_string(heads));
  const double bound = std::sqrt(6.0 / static_cast<double>(d + 3 * d));  // xavier_uniform_, like PyTorch
  in_proj_weight = rand_uniform({3 * d, d}, -bound, bound, DType::f32, generator);
  in_proj_bias = Tensor::zeros({3 * d});
  out_proj.bias = Tensor::zeros({d});
  register_parameter("in_proj_weight", in_proj_weight);
  register_parameter("in_proj_bias", in_proj_bias);
  register_module("out_proj", out_proj);
}

Tensor MultiheadAttention::forward(const Tensor& x, const Tensor& key_padding_mask) const {
  const int64_t B = x.shape()[0], S = x.shape()[1], d = embed_dim, H = num_heads, hd = d / H;
  const Tensor qkv = linear(x, in_proj_weight, in_proj_bias);  // [B, S, 3d]
  auto heads = [&](int64_t part) { return qkv.slice(2, part * d, (part + 1) * d).reshape({B, S, H, hd}).permute({0, 2, 1, 3}); };
  Tensor scores = mul(matmul(heads(0), heads(1), false, true), 1.0 / std::sqrt(static_cast<double>(hd)));  // [B,H,S,S]
  if (key_padding_mask.defined()) scores = add(scores, padding_bias(key_padding_mask));
  Tensor weights = softmax(scores, -1);
  if (dropout > 0 && is_training()) weights = troupe::dropout(weights, dropout, true);
  const Tensor context = matmul(weights, heads(2)).permute({0, 2, 1, 3}).reshape({B, S, d});
  return out_proj(context);
}

Tensor MultiheadAttention::forward_packed(const Tensor& tokens, const std::vector<int64_t>& offsets,
                                          const std::vector<int64_t>& key_lengths, DType matmul_dtype) const {
  return forward_packed(tokens, PackedSequences(offsets, key_lengths, tokens.device()), matmul_dtype);
}

Tensor MultiheadAttention::forward_packed(const Tensor& tokens, const PackedSequences& packing, DType matmul_dtype) const {
  if (matmul_dtype != DType::bf16) {
    const Tensor qkv = linear(tokens, in_proj_weight, in_proj_bias);  // one GEMM over real tokens: [rows, 3d]
    return out_proj(packed_attention(qkv, packing.starts, num_heads, packing.key_lengths));
  }
  const DType activations = fastpath_activation_dtype(matmul_dtype, tokens.device());
  const Tensor qkv = linear_bf16(tokens, in_proj_weight_bf16_.of(in_proj_weight), in_proj_bias_bf16_.of(in_proj_bias),
                                 "none", activations);
  const Tensor context = packed_attention(qkv, packing.starts, num_heads, packing.key_lengths);
  return linear_bf16(context, out_proj_weight_bf16_.of(out_proj.weight), out_proj_bias_bf16_.of(out_proj.bias), "none",
                     activations);
}

void MultiheadAttention::prepare_bf16() const {
  in_proj_weight_bf16_.of(in_proj_weight);
  in_proj_bias_bf16_.of(in_proj_bias);
  out_proj_weight_bf16_.of(out_proj.weight);
  out_proj_bias_bf16_.of(out_proj.bias);
}

TransformerEncoderLayer::TransformerEncoderLayer(const EncoderLayerOptions& o, Generator& generator)
    : options(o),
      self_attn(o.d_model, o.nhead, o.dropout, generator),
      linear1(o.d_model, o.dim_feedforward, true, DType::f32, generator),
      linear2(o.dim_feedforward, o.d_model, true, DType::f32, generator),
      norm1(o.d_model, o.layer_norm_eps),
      norm2(o.d_model, o.layer_norm_eps),
      dropout(o.dropout),
      dropout1(o.dropout),
      dropout2(o.dropout) {
  if (o.activation != "relu" && o.activation != "gelu")
    throw ValueError("TransformerEncoderLayer: activation must be relu or gelu, got '" + o.activation + "'");
  register_module("self_attn", self_attn);
  register_module("linear1", linear1);
  register_module("linear2", linear2);
  register_module("norm1", norm1);
  register_module("norm2", norm2);
  register_module("dropout", dropout);
  register_module("dropout1", dropout1);
  register_module("dropout2", dropout2);
}

Tensor TransformerEncoderLayer::feed_forward(const Tensor& x) const {
  return linear2(dropout(activate(options.activation, linear1(x))));
}

Tensor TransformerEncoderLayer::forward(const Tensor& x, const Tensor& mask) const {
  if (options.norm_first) {
    Tensor h = add(x, dropout1(self_attn.forward(norm1(x), mask)));
    return add(h, dropout2(feed_forward(norm2(h))));
  }
  Tensor h = norm1(add(x, dropout1(self_attn.forward(x, mask))));
  return norm2(add(h, dropout2(feed_forward(h))));
}

Tensor TransformerEncoderLayer::forward_packed(const Tensor& x, const std::vector<int64_t>& offsets,
                                               const std::vector<int64_t>& key_lengths, DType matmul_dtype) const {
  return forward_packed(x, PackedSequences(offsets, key_lengths, x.device()), matmul_dtype);
}

// The hidden layer's output is bf16 on every device (the next GEMM reads bf16 anyway), the
// activation fused into the first product.
Tensor TransformerEncoderLayer::feed_forward_bf16(const Tensor& x, DType out_dtype) const {
  const Tensor hidden = linear_bf16(x, linear1_weight_bf16_.of(linear1.weight), linear1_bias_bf16_.of(linear1.bias),
                                    options.activation, DType::bf16);
  return linear_bf16(hidden, linear2_weight_bf16_.of(linear2.weight), linear2_bias_bf16_.of(linear2.bias), "none",
                     out_dtype);
}

Tensor TransformerEncoderLayer::forward_packed(const Tensor& tokens, const PackedSequences& packing,
                                               DType matmul_dtype) const {
  const DType activations = fastpath_activation_dtype(matmul_dtype, tokens.device());
  const Tensor x = tokens.to(activations);
  auto ff = [&](const Tensor& t) {
    return matmul_dtype == DType::bf16 ? feed_forward_bf16(t, activations)
                                       : linear2(activate(options.activation, linear1(t)));
  };
  const double eps = options.layer_norm_eps;
  if (options.norm_first) {
    // norm1 reads the residual stream in its dtype: bf16 copies of its parameters on a GPU.
    const bool bf16 = activations == DType::bf16;
    const Tensor normed = layer_norm(x, {options.d_model}, bf16 ? norm1_weight_bf16_.of(norm1.weight) : norm1.weight,
                                     bf16 ? norm1_bias_bf16_.of(norm1.bias) : norm1.bias, eps);
    const auto [h_normed, h] =
        add_layer_norm_with_sum(x, self_attn.forward_packed(normed, packing, matmul_dtype), norm2.weight, norm2.bias, eps);
    return add(h, ff(h_normed));
  }
  const Tensor h = add_layer_norm(x, self_attn.forward_packed(x, packing, matmul_dtype), norm1.weight, norm1.bias, eps);
  return add_layer_norm(h, ff(h), norm2.weight, norm2.bias, eps);
}

void TransformerEncoderLayer::prepare_bf16() const {
  self_attn.prepare_bf16();
  linear1_weight_bf16_.of(linear1.weight);
  linear1_bias_bf16_.of(linear1.bias);
  linear2_weight_bf16_.of(linear2.weight);
  linear2_bias_bf16_.of(linear2.bias);
  if (options.norm_first) {
    norm1_weight_bf16_.of(norm1.weight);
    norm1_bias_bf16_.of(norm1.bias);
  }
}

TransformerEncoder::TransformerEncoder(const EncoderLayerOptions& o, int num_layers, bool final_norm,
                                       Generator& generator)
    : options(o) {
  if (num_layers <= 0) throw ValueError("TransformerEncoder: num_layers must be positive, got " + std::to_string(num_layers));
  for (int i = 0; i < num_layers; ++i) {
    layers.push_back(std::make_unique<TransformerEncoderLayer>(o, generator));
    register_module("layers." + std::to_string(i), *layers.back());
  }
  if (final_norm) {
    norm = std::make_unique<LayerNorm>(o.d_model, o.layer_norm_eps);
    register_module("norm", *norm);
  }
}

void TransformerEncoder::set_fastpath_dtype(DType dtype) {
  if (dtype != DType::f32 && dtype != DType::bf16)
    throw DTypeError(std::string("TransformerEncoder::set_fastpath_dtype: expected f32 or bf16, got ") + name(dtype));
  fastpath_dtype_ = dtype;
  if (dtype == DType::bf16)
    for (const auto& layer : layers) layer->prepare_bf16();
}

bool TransformerEncoder::takes_fastpath() const { return fastpath_enabled_ && !is_training() && !grad_enabled(); }

void TransformerEncoder::check_input(const Tensor& x, const Tensor& mask) const {
  if (x.dim() != 3 || x.shape()[2] != options.d_model || x.dtype() != DType::f32)
    throw ShapeError("TransformerEncoder: expected src f32[" + std::string(options.batch_first ? "B,S," : "S,B,") +
                     std::to_string(options.d_model) + "], got " + shape_str(x));
  if (!mask.defined()) return;
  const int64_t B = x.shape()[options.batch_first ? 0 : 1], S = x.shape()[options.batch_first ? 1 : 0];
  if (mask.dtype() != DType::boolean || mask.shape() != Shape{B, S})
    throw ShapeError("TransformerEncoder: key_padding_mask must be bool[" + std::to_string(B) + "," + std::to_string(S) +
                     "] for src " + shape_str(x) + ", got " + shape_str(mask));
}

Tensor TransformerEncoder::forward(const Tensor& src, const Tensor& mask) const {
  check_input(src, mask);
  Tensor x = options.batch_first ? src : src.transpose(0, 1);
  // The dense fastpath attends to a prefix of keys, so padding between tokens takes the general
  // path there, as in PyTorch; the nested fastpath leaves padding out wherever it is.
  const bool dense_fastpath = takes_fastpath() && (!mask.defined() || (!nested_enabled_ && trailing_padding(mask)));
  if (takes_fastpath() && mask.defined() && nested_enabled_) {
    x = forward(NestedTensor::from_padded(x, mask)).to_padded(mask);
  } else if (dense_fastpath) {
    // Every position computed; keys beyond a sequence's tokens (trailing padding) not attended.
    const int64_t B = x.shape()[0], S = x.shape()[1];
    std::vector<int64_t> offsets, key_lengths;
    for (int64_t b = 0; b <= B; ++b) offsets.push_back(b * S);
    if (mask.defined()) key_lengths = sequence_lengths(mask);
    NoGradGuard no_grad;
    Tensor t = x.reshape({B * S, options.d_model}).contiguous();
    const PackedSequences packing(offsets, key_lengths, t.device());
    t = t.to(fastpath_activation_dtype(fastpath_dtype_, t.device()));
    for (const auto& layer : layers) t = layer->forward_packed(t, packing, fastpath_dtype_);
    t = t.to(DType::f32);  // bf16 activations on a GPU: the caller gets f32, the final norm computes in it
    if (norm) t = norm->forward(t);
    x = t.reshape({B, S, options.d_model});
  } else {
    // The general path masks on src's device (the fastpaths read the mask on the host).
    const Tensor device_mask = mask.defined() ? mask.to(x.device()) : mask;
    for (const auto& layer : layers) x = layer->forward(x, device_mask);
    if (norm) x = norm->forward(x);
  }
  return options.batch_first ? x : x.transpose(0, 1);
}

NestedTensor TransformerEncoder::forward(const NestedTensor& src) const {
  if (src.tokens().shape()[1] != options.d_model || src.tokens().dtype() != DType::f32)
    throw ShapeError("TransformerEncoder: expected nested tokens f32[rows," + std::to_string(options.d_model) + "], got " +
                     src.tokens().meta().str());
  const Tensor x = src.tokens().contiguous();
  return src.with_tokens(forward_packed(x, PackedSequences(src.offsets(), {}, x.device())));
}

Tensor TransformerEncoder::forward_packed(const Tensor& rows, const PackedSequences& packing) const {
  NoGradGuard no_grad;  // the fastpath is inference only
  Tensor x = rows.to(fastpath_activation_dtype(fastpath_dtype_, rows.device()));
  for (const auto& layer : layers) x = layer->forward_packed(x, packing, fastpath_dtype_);
  x = x.to(DType::f32);  // bf16 activations on a GPU: the caller gets f32, the final norm computes in it
  if (norm) x = norm->forward(x);
  return x;
}

}  // namespace troupe::models
