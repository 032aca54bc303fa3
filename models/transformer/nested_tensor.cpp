#include "models/transformer/nested_tensor.h"

#include <cstring>
#include <string>

#include "devices/error.h"
#include "devices/ops.h"

namespace troupe::models {

NestedTensor::NestedTensor(Tensor tokens, std::vector<int64_t> offsets)
    : tokens_(std::move(tokens)), offsets_(std::move(offsets)) {
  if (tokens_.dim() != 2) throw ShapeError("NestedTensor: tokens must be [rows, d], got " + tokens_.meta().str());
  if (offsets_.empty() || offsets_.front() != 0 || offsets_.back() != tokens_.shape()[0])
    throw ValueError("NestedTensor: offsets must run from 0 to the " + std::to_string(tokens_.shape()[0]) + " token rows");
  for (size_t i = 1; i < offsets_.size(); ++i)
    if (offsets_[i] < offsets_[i - 1]) throw ValueError("NestedTensor: offsets must not decrease");
}

std::vector<int64_t> sequence_lengths(const Tensor& mask) {
  if (mask.dtype() != DType::boolean || mask.dim() != 2)
    throw ShapeError("sequence_lengths: key_padding_mask must be bool[B,S], got " + mask.meta().str());
  const int64_t B = mask.shape()[0], S = mask.shape()[1];
  const Tensor m = mask.contiguous();
  const bool* pad = m.data<bool>();
  std::vector<int64_t> lengths;
  for (int64_t b = 0; b < B; ++b) {
    int64_t length = 0;
    while (length < S && !pad[b * S + length]) ++length;
    for (int64_t s = length; s < S; ++s)
      if (!pad[b * S + s])
        throw ValueError("sequence_lengths: sequence " + std::to_string(b) + " has a token at " + std::to_string(s) +
                         " after padding (padding must be trailing)");
    lengths.push_back(length);
  }
  return lengths;
}

NestedTensor NestedTensor::from_padded(const Tensor& padded, const Tensor& mask) {
  if (padded.dim() != 3) throw ShapeError("NestedTensor::from_padded: expected [B, S, d], got " + padded.meta().str());
  const int64_t B = padded.shape()[0], S = padded.shape()[1];
  if (mask.dtype() != DType::boolean || mask.shape() != Shape{B, S})
    throw ShapeError("NestedTensor::from_padded: key_padding_mask must be bool[" + std::to_string(B) + "," +
                     std::to_string(S) + "], got " + mask.meta().str() + " for " + padded.meta().str());
  std::vector<int64_t> offsets{0};
  std::vector<Tensor> rows;
  for (int64_t b = 0; const int64_t length : sequence_lengths(mask)) {
    rows.push_back(padded.select(0, b++).slice(0, 0, length));
    offsets.push_back(offsets.back() + length);
  }
  return {cat(rows, 0), std::move(offsets)};
}

NestedTensor NestedTensor::from_list(const std::vector<Tensor>& sequences) {
  if (sequences.empty()) throw ValueError("NestedTensor::from_list: no sequences");
  std::vector<int64_t> offsets{0};
  for (const Tensor& s : sequences) {
    if (s.dim() != 2 || s.shape()[1] != sequences[0].shape()[1] || s.dtype() != sequences[0].dtype())
      throw ShapeError("NestedTensor::from_list: every sequence must be [L, d] of one d and dtype; got " +
                       s.meta().str() + " next to " + sequences[0].meta().str());
    offsets.push_back(offsets.back() + s.shape()[0]);
  }
  return {cat(sequences, 0), std::move(offsets)};
}

int64_t NestedTensor::max_length() const {
  int64_t longest = 0;
  for (int64_t i = 0; i < batch(); ++i) longest = std::max(longest, length(i));
  return longest;
}

std::vector<Tensor> NestedTensor::unbind() const {
  std::vector<Tensor> out;
  for (int64_t i = 0; i < batch(); ++i) out.push_back(tokens_.slice(0, offsets_[i], offsets_[i + 1]));
  return out;
}

Tensor NestedTensor::to_padded(int64_t length) const {
  if (length < 0) length = max_length();
  if (length < max_length())
    throw ShapeError("NestedTensor::to_padded: length " + std::to_string(length) + " is shorter than a sequence of " +
                     std::to_string(max_length()));
  const int64_t d = tokens_.shape()[1];
  Tensor out = Tensor::zeros({batch(), length, d}, tokens_.dtype());
  const Tensor src = tokens_.contiguous();
  const size_t row_bytes = static_cast<size_t>(d) * itemsize(tokens_.dtype());
  auto* dst = static_cast<unsigned char*>(out.mutable_raw_data());
  const auto* from = static_cast<const unsigned char*>(src.raw_data());
  for (int64_t i = 0; i < batch(); ++i)
    std::memcpy(dst + static_cast<size_t>(i * length) * row_bytes, from + static_cast<size_t>(offsets_[i]) * row_bytes,
                static_cast<size_t>(this->length(i)) * row_bytes);
  return out;
}

}  // namespace troupe::models
