#pragma once
// XLM-R's (RoBERTa's) input embeddings: token embedding + learned position embedding, then layer
// norm and dropout. Positions count real tokens from padding_idx + 1, so padding never shifts them
// and padded slots take the padding row:
//   positions = cumsum(tokens != padding_idx, dim=1) * (tokens != padding_idx) + padding_idx
//
//   XLMRobertaEmbeddings emb(250002, 768);          // max_positions 514, padding_idx 1
//   Tensor x = emb(tokens);                         // i64 [B, S] -> f32 [B, S, 768]
//
// Parameters under torchtext's names: token_embedding.weight, positional_embedding.embedding.weight,
// embedding_layer_norm.weight, embedding_layer_norm.bias. They are frozen (no grad): fine-tuning
// XLM-R trains the encoder and the head.
#include <cstdint>

#include "devices/tensor.h"
#include "models/nn/module.h"

namespace troupe::models {

class XLMRobertaEmbeddings : public Module {
 public:
  // Weights drawn like fairseq's RoBERTa from Generator(seed): normal(0, 0.02), the padding rows
  // zero; layer norm 1 and 0.
  XLMRobertaEmbeddings(int64_t vocab_size, int64_t d_model, int64_t max_positions = 514, int64_t padding_idx = 1,
                       double eps = 1e-5, double dropout = 0.1, uint64_t seed = 0);

  // tokens i32/i64 [B, S] -> f32 [B, S, d_model]. ShapeError for another rank, DTypeError for a
  // non-integer dtype, IndexError for a token outside the vocabulary or a sequence longer than
  // the position table allows (max_positions - padding_idx - 1 tokens).
  // The output is on the weights' device (to()). Positions are counted on the host: host tokens
  // cost no sync (they move to the device with the positions); device tokens cost one counted sync.
  Tensor operator()(const Tensor& tokens) const;
  static Tensor positions(const Tensor& tokens, int64_t padding_idx);  // i64 [B, S]

  int64_t vocab_size() const { return vocab_size_; }
  int64_t d_model() const { return d_model_; }
  int64_t max_positions() const { return max_positions_; }
  int64_t padding_idx() const { return padding_idx_; }

 private:
  int64_t vocab_size_, d_model_, max_positions_, padding_idx_;
  double eps_, dropout_;
  Tensor token_embedding_, position_embedding_, norm_weight_, norm_bias_;
};

}  // namespace troupe::models
