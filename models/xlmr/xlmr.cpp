#include "models/xlmr/xlmr.h"

#include "devices/error.h"
#include "devices/io/safetensors.h"
#include "devices/ops.h"
#include "devices/random.h"
#include "models/xlmr/checkpoint.h"

namespace troupe::models {

namespace {

const std::string encoder_prefix = "encoder.transformer.layers.layers.";

// Validates the config and seeds the generator the encoder and head draw their weights from.
EncoderLayerOptions seeded_layer_options(const XLMRConfig& c, uint64_t seed) {
  c.validate();
  manual_seed(seed);
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

XLMRClassificationHead::XLMRClassificationHead(int64_t d, int64_t classes, const std::string& activation_, double p)
    : activation(activation_), dense(d, d), out_proj(d, classes), dropout(p) {
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

XLMR::XLMR(const XLMRConfig& c, uint64_t seed)
    : config(c),
      embeddings(c.vocab_size, c.d_model, c.max_positions, c.padding_idx, c.layer_norm_eps, c.dropout, seed),
      encoder(seeded_layer_options(c, seed + 1), static_cast<int>(c.layers)),
      head(c.d_model, c.num_classes, c.head_activation, c.dropout) {}

Tensor XLMR::features(const Tensor& tokens) const {
  Tensor x = embeddings(tokens);  // checks the tokens' rank, dtype and range
  const Tensor pad_id = Tensor::full({}, static_cast<double>(config.padding_idx), tokens.dtype());
  x = encoder(x, eq(tokens, pad_id));
  if (encoder.takes_fastpath()) return x;  // the nested fastpath leaves zeros at padding
  return mul(x, ne(tokens, pad_id).to(DType::f32).unsqueeze(2));
}

void XLMR::load(const std::map<std::string, Tensor>& checkpoint) {
  const auto state = xlmr_torchtext_state(checkpoint, config);
  embeddings.load(state, "encoder.transformer.");
  std::map<std::string, Tensor> layers, classifier;
  for (const auto& [key, value] : state) {
    if (key.rfind(encoder_prefix, 0) == 0) layers["layers." + key.substr(encoder_prefix.size())] = value;
    if (key.rfind("head.", 0) == 0) classifier[key.substr(5)] = value;
  }
  encoder.load(layers);
  if (!classifier.empty()) head.load(classifier);
}

void XLMR::load(const std::string& path) { load(read_safetensors(path)); }

std::map<std::string, Tensor> XLMR::state_dict() {
  auto state = embeddings.state_dict("encoder.transformer.");
  for (auto& [key, value] : encoder.state_dict()) state["encoder.transformer.layers." + key] = value;
  for (auto& [key, value] : head.state_dict()) state["head." + key] = value;
  return state;
}

void XLMR::train(bool on) {
  embeddings.train(on);
  encoder.train(on);
  head.train(on);
}

}  // namespace troupe::models
