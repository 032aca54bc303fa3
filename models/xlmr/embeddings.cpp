#include "models/xlmr/embeddings.h"

#include <algorithm>

#include "devices/ops.h"
#include "devices/random.h"

namespace troupe::models {

namespace {

// normal(0, stddev) from generator, row zero_row zero.
Tensor normal_rows(const Shape& shape, double stddev, int64_t zero_row, Generator& generator) {
  Tensor t = rand_normal(shape, 0.0, stddev, DType::f32, generator);
  std::fill_n(t.mutable_data<float>() + zero_row * shape[1], shape[1], 0.0f);
  return t;
}

}  // namespace

XLMRobertaEmbeddings::XLMRobertaEmbeddings(int64_t vocab_size, int64_t d_model, int64_t max_positions,
                                           int64_t padding_idx, double eps, double dropout, uint64_t seed)
    : vocab_size_(vocab_size), d_model_(d_model), max_positions_(max_positions), padding_idx_(padding_idx),
      eps_(eps), dropout_(dropout) {
  if (vocab_size <= 0 || d_model <= 0 || max_positions <= 0)
    throw ValueError("XLMRobertaEmbeddings: sizes must be positive, got vocab " + std::to_string(vocab_size) +
                     ", d_model " + std::to_string(d_model) + ", max_positions " + std::to_string(max_positions));
  if (padding_idx < 0 || padding_idx >= vocab_size || padding_idx + 1 >= max_positions)
    throw ValueError("XLMRobertaEmbeddings: padding_idx " + std::to_string(padding_idx) +
                     " must index both the vocabulary (" + std::to_string(vocab_size) +
                     ") and leave positions in the table (" + std::to_string(max_positions) + ")");
  if (dropout < 0 || dropout >= 1)
    throw ValueError("XLMRobertaEmbeddings: dropout " + std::to_string(dropout) + " is outside [0, 1)");
  Generator generator(seed);
  token_embedding_ = normal_rows({vocab_size, d_model}, 0.02, padding_idx, generator);
  position_embedding_ = normal_rows({max_positions, d_model}, 0.02, padding_idx, generator);
  norm_weight_ = Tensor::ones({d_model});
  norm_bias_ = Tensor::zeros({d_model});
  register_parameter("token_embedding.weight", token_embedding_);
  register_parameter("positional_embedding.embedding.weight", position_embedding_);
  register_parameter("embedding_layer_norm.weight", norm_weight_);
  register_parameter("embedding_layer_norm.bias", norm_bias_);
  for (Tensor* p : parameters()) p->set_requires_grad(false);  // frozen (see the header)
}

Tensor XLMRobertaEmbeddings::positions(const Tensor& tokens, int64_t padding_idx) {
  if (tokens.dim() != 2)
    throw ShapeError("XLMRobertaEmbeddings: tokens must be [batch, sequence], got " + tokens.meta().str());
  if (tokens.dtype() != DType::i32 && tokens.dtype() != DType::i64)
    throw DTypeError("XLMRobertaEmbeddings: tokens must be i32 or i64, got " + tokens.meta().str());
  const int64_t B = tokens.size(0), S = tokens.size(1);
  std::vector<int64_t> ids = tokens.to_vector<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    int64_t count = 0;
    for (int64_t s = 0; s < S; ++s) {
      int64_t& id = ids[b * S + s];
      id = id == padding_idx ? padding_idx : padding_idx + ++count;
    }
  }
  return Tensor::from_vector(ids, {B, S});
}

Tensor XLMRobertaEmbeddings::operator()(const Tensor& tokens_in) const {
  const Tensor tokens = tokens_in.device().is_cpu() ? tokens_in : tokens_in.to(Device::cpu());
  Tensor pos = positions(tokens, padding_idx_);
  // The largest position is padding_idx + the longest row's real tokens, at most + S.
  const std::vector<int64_t> all = pos.to_vector<int64_t>();
  const int64_t longest = all.empty() ? padding_idx_ : *std::max_element(all.begin(), all.end());
  if (longest >= max_positions_)
    throw IndexError("XLMRobertaEmbeddings: " + tokens.meta().str() + " needs position " + std::to_string(longest) +
                     " but the table has " + std::to_string(max_positions_) + " (at most " +
                     std::to_string(max_positions_ - padding_idx_ - 1) + " tokens per sequence)");
  const Device device = token_embedding_.device();
  Tensor x = add(embedding(tokens.to(device), token_embedding_), embedding(pos.to(device), position_embedding_));
  x = layer_norm(x, {d_model_}, norm_weight_, norm_bias_, eps_);
  return dropout(x, dropout_, is_training());
}

}  // namespace troupe::models
