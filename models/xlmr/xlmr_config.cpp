#include "models/xlmr/xlmr_config.h"

#include "devices/error.h"

namespace troupe::models {

XLMRConfig XLMRConfig::base(int64_t num_classes) {
  XLMRConfig c;
  c.num_classes = num_classes;
  return c;
}

XLMRConfig XLMRConfig::large(int64_t num_classes) {
  XLMRConfig c;
  c.d_model = 1024;
  c.layers = 24;
  c.heads = 16;
  c.ffn = 4096;
  c.num_classes = num_classes;
  return c;
}

XLMRConfig XLMRConfig::tiny(int64_t vocab_size, int64_t num_classes) {
  XLMRConfig c;
  c.vocab_size = vocab_size;
  c.d_model = 16;
  c.layers = 2;
  c.heads = 2;
  c.ffn = 64;
  c.max_positions = 130;
  c.num_classes = num_classes;
  return c;
}

XLMRConfig XLMRConfig::named(const std::string& name, int64_t num_classes) {
  if (name == "base") return base(num_classes);
  if (name == "large") return large(num_classes);
  if (name == "tiny") return tiny(250002, num_classes);
  throw ValueError("XLMRConfig: unknown configuration '" + name + "' (base, large or tiny)");
}

void XLMRConfig::validate() const {
  const std::pair<const char*, int64_t> sizes[] = {{"vocab_size", vocab_size}, {"d_model", d_model},
                                                   {"layers", layers},         {"heads", heads},
                                                   {"ffn", ffn},               {"max_positions", max_positions},
                                                   {"num_classes", num_classes}};
  for (auto [name, value] : sizes)
    if (value <= 0) throw ValueError("XLMRConfig: " + std::string(name) + " must be positive, got " + str());
  if (d_model % heads != 0) throw ValueError("XLMRConfig: heads must divide d_model, got " + str());
  if (padding_idx < 0 || padding_idx >= vocab_size || padding_idx + 1 >= max_positions)
    throw ValueError("XLMRConfig: padding_idx must index the vocabulary and leave positions, got " + str());
  if (head_activation != "tanh" && head_activation != "relu")
    throw ValueError("XLMRConfig: head_activation must be tanh or relu, got '" + head_activation + "'");
  if (dropout < 0 || dropout >= 1) throw ValueError("XLMRConfig: dropout must lie in [0, 1), got " + str());
}

std::string XLMRConfig::str() const {
  return "d_model=" + std::to_string(d_model) + " layers=" + std::to_string(layers) + " heads=" +
         std::to_string(heads) + " ffn=" + std::to_string(ffn) + " vocab=" + std::to_string(vocab_size) +
         " max_positions=" + std::to_string(max_positions) + " padding_idx=" + std::to_string(padding_idx) +
         " classes=" + std::to_string(num_classes) + " dropout=" + std::to_string(dropout) +
         " head=" + head_activation;
}

}  // namespace troupe::models
