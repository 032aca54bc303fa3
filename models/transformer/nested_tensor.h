#pragma once
// NestedTensor: a ragged batch of sequences stored packed, every sequence's tokens back to back
// ([total tokens, d]) with offsets, so kernels see only real tokens (PyTorch's nested tensors).
//
//   Tensor padded = ...;                                   // [B, S, d]
//   Tensor pad = ...;                                      // bool [B, S], true at padding (trailing)
//   NestedTensor n = NestedTensor::from_padded(padded, pad);
//   n.tokens();                                            // [sum of lengths, d]
//   Tensor back = n.to_padded(S);                          // zeros where pad was true
//   NestedTensor m = NestedTensor::from_list({a, b});      // a [La, d], b [Lb, d]
#include <cstdint>
#include <vector>

#include "devices/tensor.h"

namespace troupe::models {

class NestedTensor {
 public:
  // key_padding_mask: bool [B, S], true marks padding, which must follow a sequence's tokens.
  static NestedTensor from_padded(const Tensor& padded, const Tensor& key_padding_mask);
  static NestedTensor from_list(const std::vector<Tensor>& sequences);
  NestedTensor(Tensor tokens, std::vector<int64_t> offsets);  // offsets: B + 1, from 0 to rows

  Tensor to_padded(int64_t length = -1) const;  // [B, length (default: the longest), d]
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

}  // namespace troupe::models
