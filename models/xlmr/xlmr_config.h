#pragma once
// Sizes of an XLM-R model: XLM-R base and large as released (fairseq / torchtext / Hugging Face),
// and a tiny one for tests and tours.
//
//   XLMRConfig c = XLMRConfig::named("large", /*num_classes=*/3);   // d 1024, 24 layers, 16 heads
//   c.vocab_size = transform.vocab_size();                          // a tokenizer of one's own
#include <cstdint>
#include <string>

namespace troupe::models {

struct XLMRConfig {
  int64_t vocab_size = 250002;  // 250000 SentencePiece pieces, the fairseq shift, <mask>
  int64_t d_model = 768;
  int64_t layers = 12;
  int64_t heads = 12;
  int64_t ffn = 3072;
  int64_t max_positions = 514;  // 512 tokens after padding_idx + 1
  int64_t padding_idx = 1;
  int64_t num_classes = 2;
  double layer_norm_eps = 1e-5;
  double dropout = 0.1;
  // The classification head's activation between dense and out_proj: "tanh" (Hugging Face's and
  // fairseq's head) or "relu" (torchtext's RobertaClassificationHead default).
  std::string head_activation = "tanh";

  static XLMRConfig base(int64_t num_classes = 2);
  static XLMRConfig large(int64_t num_classes = 2);
  // d 16, 2 layers, 2 heads, ffn 64, 130 positions.
  static XLMRConfig tiny(int64_t vocab_size, int64_t num_classes = 2);
  // "base", "large" or "tiny" (vocabulary 250002 until set); ValueError naming the choices.
  static XLMRConfig named(const std::string& name, int64_t num_classes = 2);

  // ValueError naming the first size that is not positive, heads not dividing d_model, ...
  void validate() const;
  std::string str() const;  // "d_model=768 layers=12 heads=12 ffn=3072 vocab=250002 ..."
};

}  // namespace troupe::models
