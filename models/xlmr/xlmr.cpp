#include "models/xlmr/xlmr.h"

#include "devices/error.h"
#include "devices/ops.h"
#include "models/xlmr/checkpoint.h"

namespace troupe::models {

namespace {

// Validates the config (before the encoder is built from it).
EncoderLayerOptions layer_options(const XLMRConfig& c) {
  c.validate();
  EncoderLayerOptions o;
  o.d_model = c.d_model;
  o.nhead = c.heads;
  o.dim_feedforward = c.ffn;
  o.dropout = c.dropout;
  o.activation = "gelu";
  o.layer_norm_eps = c.layer_norm_eps;
  o.batch_first = true;
  return o;
}

}  // namespace

XLMRClassificationHead::XLMRClassificationHead(int64_t d, int64_t classes, const std::string& activation_, double p,
                                               Generator& generator)
    : activation(activation_),
      dense(d, d, true, DType::f32, generator),
      out_proj(d, classes, true, DType::f32, generator),
      dropout(p) {
  if (activation != "tanh" && activation != "relu")
    throw ValueError("XLMRClassificationHead: activation must be tanh or relu, got '" + activation + "'");
  register_module("dense", dense);
  register_module("out_proj", out_proj);
  register_module("dropout", dropout);
}

Tensor XLMRClassificationHead::forward(const Tensor& features) const {
  if (features.dim() != 3 || features.shape()[2] != dense.weight.shape()[1])
    throw ShapeError("XLMRClassificationHead: expected features [B, S, " + std::to_string(dense.weight.shape()[1]) +
                     "], got " + features.meta().str());
  Tensor h = dense(dropout(features.select(1, 0)));
  h = activation == "tanh" ? tanh(h) : relu(h);
  return out_proj(dropout(h));
}

XLMR::XLMR(const XLMRConfig& c, uint64_t seed) : XLMR(c, seed, Generator(seed + 1)) {}

// The encoder and then the head draw from one generator, which lives until this constructor returns.
XLMR::XLMR(const XLMRConfig& c, uint64_t seed, Generator&& layers_generator)
    : config(c),
      embeddings(c.vocab_size, c.d_model, c.max_positions, c.padding_idx, c.layer_norm_eps, c.dropout, seed),
      encoder(layer_options(c), static_cast<int>(c.layers), false, layers_generator),
      head(c.d_model, c.num_classes, c.head_activation, c.dropout, layers_generator) {
  register_module("encoder.transformer", embeddings);
  register_module("encoder.transformer.layers", encoder);
  register_module("head", head);
}

Tensor XLMR::features(const Tensor& tokens_in) const {
  // The mask stays on the host, where the encoder packs the tokens by it: host tokens (a serving
  // batch from XLMRTransform) cost no host sync on a GPU model, device tokens one.
  const Tensor tokens = tokens_in.device().is_cpu() ? tokens_in : tokens_in.to(Device::cpu());
  Tensor x = embeddings(tokens);  // checks the tokens' rank, dtype and range; on the model's device
  const Tensor pad_id = Tensor::full({}, static_cast<double>(config.padding_idx), tokens.dtype());
  const Tensor mask = eq(tokens, pad_id);
  if (serving_graph_ && encoder.takes_fastpath() && x.device().is_cuda()) {
    if (encoder.fastpath_dtype() != serving_graph_dtype_) {
      serving_graph_->clear();
      serving_graph_dtype_ = encoder.fastpath_dtype();
    }
    return (*serving_graph_)(NestedTensor::from_padded(x, mask)).to_padded(mask);
  }
  x = encoder(x, mask);
  if (encoder.takes_fastpath()) return x;  // the nested fastpath leaves zeros at padding
  return mul(x, ne(tokens, pad_id).to(DType::f32).to(x.device()).unsqueeze(2));
}

void XLMR::set_serving_graph(bool enabled) {
  if (!enabled) {
    serving_graph_.reset();
    return;
  }
  serving_graph_ = std::make_unique<ServingGraph>([this](const Tensor& rows, const Tensor& starts) {
    return encoder.forward_packed(rows, PackedSequences(starts));
  });
  serving_graph_dtype_ = encoder.fastpath_dtype();
}

void XLMR::load(const std::map<std::string, Tensor>& checkpoint) {
  if (serving_graph_) serving_graph_->clear();  // the weights may move
  auto state = xlmr_torchtext_state(checkpoint, config);
  if (!state.count("head.dense.weight"))  // a bare encoder: the head keeps its weights
    for (auto& [name, value] : head.state_dict()) state.emplace("head." + name, value);
  Module::load(state);
}

}  // namespace troupe::models
