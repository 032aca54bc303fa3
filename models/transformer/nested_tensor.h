#pragma once
// NestedTensor: a ragged batch of sequences stored packed, every sequence's tokens back to back
// ([total tokens, d]) with offsets, so kernels see only real tokens (PyTorch's nested tensors).
//
//   Tensor padded = ...;                                   // [B, S, d]
//   Tensor pad = ...;                                      // bool [B, S], true at padding (anywhere)
//   NestedTensor n = NestedTensor::from_padded(padded, pad);
//   n.tokens();                                            // [sum of lengths, d]
//   Tensor back = n.to_padded(pad);                        // [B, S, d], zeros where pad was true
//   NestedTensor m = NestedTensor::from_list({a, b});      // a [La, d], b [Lb, d]
#include <cstdint>
#include <vector>

#include "devices/tensor.h"

namespace troupe::models {

class NestedTensor {
 public:
  // key_padding_mask: bool [B, S], true marks padding, trailing or between tokens: sequence b is
  // row b's tokens in order, the padding left out.
  static NestedTensor from_padded(const Tensor& padded, const Tensor& key_padding_mask);
  static NestedTensor from_list(const std::vector<Tensor>& sequences);
  NestedTensor(Tensor tokens, std::vector<int64_t> offsets);  // offsets: B + 1, from 0 to rows

  Tensor to_padded(int64_t length = -1) const;  // [B, length (default: the longest), d], trailing zeros
  // [B, S, d] with each sequence's tokens back where key_padding_mask (bool [B, S]) has false and
  // zeros elsewhere: the inverse of from_padded. ShapeError when the mask's token counts differ.
  Tensor to_padded(const Tensor& key_padding_mask) const;
  std::vector<Tensor> unbind() const;           // views [L_i, d]

  const Tensor& tokens() const { return tokens_; }
  const std::vector<int64_t>& offsets() const { return offsets_; }
  int64_t batch() const { return static_cast<int64_t>(offsets_.size()) - 1; }
  int64_t length(int64_t i) const { return offsets_[i + 1] - offsets_[i]; }
  int64_t max_length() const;
  NestedTensor with_tokens(Tensor tokens) const { return {std::move(tokens), offsets_}; }

 private:
  Tensor tokens_;
  std::vector<int64_t> offsets_;
};

// Tokens per sequence of a key padding mask (bool [B, S], true = padding, which must be trailing).
std::vector<int64_t> sequence_lengths(const Tensor& key_padding_mask);
// Whether every row of a key padding mask has its padding after its tokens only.
bool trailing_padding(const Tensor& key_padding_mask);

}  // namespace troupe::models
