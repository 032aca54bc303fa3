#include "models/xlmr/checkpoint.h"

#include <set>

#include "devices/ops.h"

namespace troupe::models {

namespace {

const std::string tt_prefix = "encoder.transformer.";
const std::string hf_prefix = "roberta.";

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

bool has_head(const std::map<std::string, Tensor>& checkpoint, XLMRNaming naming) {
  const std::string head = naming == XLMRNaming::torchtext ? "head." : "classifier.";
  for (const auto& [key, value] : checkpoint)
    if (starts_with(key, head)) return true;
  return false;
}

bool skipped(const std::string& key, XLMRNaming naming) {
  return naming == XLMRNaming::hugging_face &&
         (key == "roberta.embeddings.position_ids" || starts_with(key, "roberta.pooler.") || starts_with(key, "lm_head."));
}

std::string listing(const std::vector<std::string>& keys) {
  const size_t shown = std::min<size_t>(keys.size(), 12);
  std::string out;
  for (size_t i = 0; i < shown; ++i) out += (i ? ", " : "") + keys[i];
  if (keys.size() > shown) out += ", ... (" + std::to_string(keys.size() - shown) + " more)";
  return out;
}

}  // namespace

const char* name(XLMRNaming naming) { return naming == XLMRNaming::torchtext ? "torchtext" : "Hugging Face"; }

XLMRNaming detect_xlmr_naming(const std::map<std::string, Tensor>& checkpoint) {
  for (const auto& [key, value] : checkpoint)
    if (starts_with(key, hf_prefix) || starts_with(key, "classifier.")) return XLMRNaming::hugging_face;
  return XLMRNaming::torchtext;
}

std::map<std::string, Shape> xlmr_weight_shapes(const XLMRConfig& c, XLMRNaming naming, bool with_head) {
  const int64_t D = c.d_model, F = c.ffn;
  std::map<std::string, Shape> shapes;
  if (naming == XLMRNaming::torchtext) {
    shapes[tt_prefix + "token_embedding.weight"] = {c.vocab_size, D};
    shapes[tt_prefix + "positional_embedding.embedding.weight"] = {c.max_positions, D};
    shapes[tt_prefix + "embedding_layer_norm.weight"] = {D};
    shapes[tt_prefix + "embedding_layer_norm.bias"] = {D};
    for (int64_t n = 0; n < c.layers; ++n) {
      const std::string p = tt_prefix + "layers.layers." + std::to_string(n) + ".";
      shapes[p + "self_attn.in_proj_weight"] = {3 * D, D};
      shapes[p + "self_attn.in_proj_bias"] = {3 * D};
      shapes[p + "self_attn.out_proj.weight"] = {D, D};
      shapes[p + "self_attn.out_proj.bias"] = {D};
      shapes[p + "linear1.weight"] = {F, D};
      shapes[p + "linear1.bias"] = {F};
      shapes[p + "linear2.weight"] = {D, F};
      shapes[p + "linear2.bias"] = {D};
      for (const char* norm : {"norm1.", "norm2."}) {
        shapes[p + norm + "weight"] = {D};
        shapes[p + norm + "bias"] = {D};
      }
    }
    if (with_head) {
      shapes["head.dense.weight"] = {D, D};
      shapes["head.dense.bias"] = {D};
      shapes["head.out_proj.weight"] = {c.num_classes, D};
      shapes["head.out_proj.bias"] = {c.num_classes};
    }
    return shapes;
  }
  const std::string e = hf_prefix + "embeddings.";
  shapes[e + "word_embeddings.weight"] = {c.vocab_size, D};
  shapes[e + "position_embeddings.weight"] = {c.max_positions, D};
  shapes[e + "token_type_embeddings.weight"] = {1, D};
  shapes[e + "LayerNorm.weight"] = {D};
  shapes[e + "LayerNorm.bias"] = {D};
  for (int64_t n = 0; n < c.layers; ++n) {
    const std::string p = hf_prefix + "encoder.layer." + std::to_string(n) + ".";
    for (const char* part : {"query", "key", "value"}) {
      shapes[p + "attention.self." + part + ".weight"] = {D, D};
      shapes[p + "attention.self." + part + ".bias"] = {D};
    }
    shapes[p + "attention.output.dense.weight"] = {D, D};
    shapes[p + "intermediate.dense.weight"] = {F, D};
    shapes[p + "output.dense.weight"] = {D, F};
    for (const char* d : {"attention.output.dense.", "output.dense.", "attention.output.LayerNorm.", "output.LayerNorm."})
      shapes[p + d + "bias"] = {D};
    shapes[p + "intermediate.dense.bias"] = {F};
    shapes[p + "attention.output.LayerNorm.weight"] = {D};
    shapes[p + "output.LayerNorm.weight"] = {D};
  }
  if (with_head) {
    shapes["classifier.dense.weight"] = {D, D};
    shapes["classifier.dense.bias"] = {D};
    shapes["classifier.out_proj.weight"] = {c.num_classes, D};
    shapes["classifier.out_proj.bias"] = {c.num_classes};
  }
  return shapes;
}

std::map<std::string, Tensor> xlmr_torchtext_state(const std::map<std::string, Tensor>& checkpoint,
                                                   const XLMRConfig& config) {
  config.validate();
  const XLMRNaming naming = detect_xlmr_naming(checkpoint);
  const bool with_head = has_head(checkpoint, naming);
  const auto shapes = xlmr_weight_shapes(config, naming, with_head);

  std::vector<std::string> missing, unknown;
  for (const auto& [key, shape] : shapes)
    if (!checkpoint.count(key)) missing.push_back(key);
  for (const auto& [key, value] : checkpoint)
    if (!shapes.count(key) && !skipped(key, naming)) unknown.push_back(key);
  if (!missing.empty() || !unknown.empty()) {
    std::string message = std::string("XLMR checkpoint (") + name(naming) + " names):";
    if (!missing.empty()) message += " missing " + std::to_string(missing.size()) + ": " + listing(missing) + ";";
    if (!unknown.empty()) message += " unknown " + std::to_string(unknown.size()) + ": " + listing(unknown) + ";";
    throw ValueError(message + " for " + config.str());
  }

  std::map<std::string, Tensor> w;
  for (const auto& [key, shape] : shapes) {
    const Tensor& t = checkpoint.at(key);
    if (!is_floating(t.dtype()))
      throw DTypeError("XLMR checkpoint: weight '" + key + "' is " + t.meta().str() + ", expected a floating dtype");
    if (t.shape() != shape)
      throw ShapeError("XLMR checkpoint: weight '" + key + "' is " + t.meta().str() + ", expected " + to_string(shape) +
                       " for " + config.str());
    w[key] = t.dtype() == DType::f32 ? t : t.to(DType::f32);
  }
  if (naming == XLMRNaming::torchtext) return w;

  std::map<std::string, Tensor> out;
  const std::string e = hf_prefix + "embeddings.";
  out[tt_prefix + "token_embedding.weight"] = w.at(e + "word_embeddings.weight");
  out[tt_prefix + "positional_embedding.embedding.weight"] =
      add(w.at(e + "position_embeddings.weight"), w.at(e + "token_type_embeddings.weight"));
  out[tt_prefix + "embedding_layer_norm.weight"] = w.at(e + "LayerNorm.weight");
  out[tt_prefix + "embedding_layer_norm.bias"] = w.at(e + "LayerNorm.bias");
  for (int64_t n = 0; n < config.layers; ++n) {
    const std::string hf = hf_prefix + "encoder.layer." + std::to_string(n) + ".";
    const std::string tt = tt_prefix + "layers.layers." + std::to_string(n) + ".";
    const std::string q = hf + "attention.self.query.", k = hf + "attention.self.key.", v = hf + "attention.self.value.";
    out[tt + "self_attn.in_proj_weight"] = cat({w.at(q + "weight"), w.at(k + "weight"), w.at(v + "weight")}, 0);
    out[tt + "self_attn.in_proj_bias"] = cat({w.at(q + "bias"), w.at(k + "bias"), w.at(v + "bias")}, 0);
    const std::pair<const char*, const char*> renames[] = {{"self_attn.out_proj.", "attention.output.dense."},
                                                           {"norm1.", "attention.output.LayerNorm."},
                                                           {"linear1.", "intermediate.dense."},
                                                           {"linear2.", "output.dense."},
                                                           {"norm2.", "output.LayerNorm."}};
    for (auto [to, from] : renames)
      for (const char* kind : {"weight", "bias"}) out[tt + to + kind] = w.at(hf + from + kind);
  }
  if (with_head)
    for (const char* part : {"dense.weight", "dense.bias", "out_proj.weight", "out_proj.bias"})
      out[std::string("head.") + part] = w.at(std::string("classifier.") + part);
  return out;
}

}  // namespace troupe::models
