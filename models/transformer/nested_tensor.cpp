#include "models/transformer/nested_tensor.h"

#include <cstring>
#include <string>

#include "devices/error.h"
#include "devices/ops.h"

namespace troupe::models {

namespace {

// Which positions are tokens decides shapes, so masks are read on the host. A mask on a device
// costs one counted host sync here: keep masks on the host (XLMR makes its own from host tokens).
Tensor host_mask(const Tensor& mask) { return mask.device().is_cpu() ? mask.contiguous() : mask.to(Device::cpu()); }

// Rows of source [rows, d] picked by row index, as one gather on source's device: a device's
// tokens are moved by a kernel, never through the host.
Tensor gather_rows(const Tensor& source, const std::vector<int64_t>& rows) {
  const Tensor index = Tensor::from_vector(rows, {static_cast<int64_t>(rows.size())}).to(source.device());
  return index_select(source, 0, index);
}

}  // namespace

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
  const Tensor m = host_mask(mask);
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

namespace {

void check_mask(const char* op, const Tensor& padded, const Tensor& mask) {
  if (padded.dim() != 3) throw ShapeError(std::string(op) + ": expected [B, S, d], got " + padded.meta().str());
  const int64_t B = padded.shape()[0], S = padded.shape()[1];
  if (mask.dtype() != DType::boolean || mask.shape() != Shape{B, S})
    throw ShapeError(std::string(op) + ": key_padding_mask must be bool[" + std::to_string(B) + "," + std::to_string(S) +
                     "], got " + mask.meta().str() + " for " + padded.meta().str());
}

// Each sequence's runs of tokens [begin, end) in order, as a call per run: f(b, begin, end).
template <class F>
void for_each_token_run(const Tensor& mask, F f) {
  const int64_t B = mask.shape()[0], S = mask.shape()[1];
  const Tensor m = host_mask(mask);
  const bool* pad = m.data<bool>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S;) {
      if (pad[b * S + s]) {
        ++s;
        continue;
      }
      const int64_t begin = s;
      while (s < S && !pad[b * S + s]) ++s;
      f(b, begin, s);
    }
}

}  // namespace

bool trailing_padding(const Tensor& mask) {
  if (mask.dtype() != DType::boolean || mask.dim() != 2)
    throw ShapeError("trailing_padding: key_padding_mask must be bool[B,S], got " + mask.meta().str());
  bool trailing = true;
  for_each_token_run(mask, [&](int64_t, int64_t begin, int64_t) { trailing = trailing && begin == 0; });
  return trailing;
}

NestedTensor NestedTensor::from_padded(const Tensor& padded, const Tensor& mask) {
  check_mask("NestedTensor::from_padded", padded, mask);
  const int64_t B = padded.shape()[0], S = padded.shape()[1], d = padded.shape()[2];
  std::vector<int64_t> offsets(static_cast<size_t>(B) + 1, 0);
  std::vector<Tensor> rows;
  std::vector<int64_t> token_rows;  // on a device: each token's row of padded [B * S, d]
  for_each_token_run(mask, [&](int64_t b, int64_t begin, int64_t end) {
    if (padded.device().is_cpu())
      rows.push_back(padded.select(0, b).slice(0, begin, end));
    else
      for (int64_t s = begin; s < end; ++s) token_rows.push_back(b * S + s);
    offsets[static_cast<size_t>(b) + 1] += end - begin;
  });
  for (size_t i = 1; i < offsets.size(); ++i) offsets[i] += offsets[i - 1];
  if (!token_rows.empty()) return {gather_rows(padded.contiguous().reshape({B * S, d}), token_rows), std::move(offsets)};
  if (rows.empty()) return {Tensor::empty({0, d}, padded.dtype(), padded.device()), std::move(offsets)};
  return {rows.size() == 1 ? rows[0].contiguous() : cat(rows, 0), std::move(offsets)};
}

Tensor NestedTensor::to_padded(const Tensor& mask) const {
  if (mask.dtype() != DType::boolean || mask.dim() != 2 || mask.size(0) != batch())
    throw ShapeError("NestedTensor::to_padded: key_padding_mask must be bool[" + std::to_string(batch()) +
                     ",S] for " + std::to_string(batch()) + " sequences, got " + mask.meta().str());
  const int64_t B = mask.shape()[0], S = mask.shape()[1], d = tokens_.shape()[1];
  std::vector<int64_t> counts(static_cast<size_t>(B), 0);
  for_each_token_run(mask, [&](int64_t b, int64_t begin, int64_t end) { counts[static_cast<size_t>(b)] += end - begin; });
  for (int64_t b = 0; b < B; ++b)
    if (counts[static_cast<size_t>(b)] != length(b))
      throw ShapeError("NestedTensor::to_padded: the mask's row " + std::to_string(b) + " has " +
                       std::to_string(counts[static_cast<size_t>(b)]) + " tokens, sequence " + std::to_string(b) +
                       " has " + std::to_string(length(b)));
  std::vector<int64_t> next(offsets_.begin(), offsets_.end() - 1);  // each sequence's next packed row
  if (!tokens_.device().is_cpu()) {
    // One gather from the tokens and a zero row after them (the padding's source).
    const int64_t zero_row = tokens_.shape()[0];
    std::vector<int64_t> rows(static_cast<size_t>(B * S), zero_row);
    for_each_token_run(mask, [&](int64_t b, int64_t begin, int64_t end) {
      for (int64_t s = begin; s < end; ++s) rows[static_cast<size_t>(b * S + s)] = next[static_cast<size_t>(b)]++;
    });
    return gather_rows(cat({tokens_, Tensor::zeros({1, d}, tokens_.dtype(), tokens_.device())}, 0), rows)
        .reshape({B, S, d});
  }
  Tensor out = Tensor::zeros({B, S, d}, tokens_.dtype());
  const Tensor src = tokens_.contiguous();
  const size_t row_bytes = static_cast<size_t>(d) * itemsize(tokens_.dtype());
  auto* dst = static_cast<unsigned char*>(out.mutable_raw_data());
  const auto* from = static_cast<const unsigned char*>(src.raw_data());
  for_each_token_run(mask, [&](int64_t b, int64_t begin, int64_t end) {
    int64_t& row = next[static_cast<size_t>(b)];
    std::memcpy(dst + static_cast<size_t>(b * S + begin) * row_bytes, from + static_cast<size_t>(row) * row_bytes,
                static_cast<size_t>(end - begin) * row_bytes);
    row += end - begin;
  });
  return out;
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
  if (!tokens_.device().is_cpu()) {
    const int64_t zero_row = tokens_.shape()[0];  // as in to_padded(mask): a zero row after the tokens
    std::vector<int64_t> rows(static_cast<size_t>(batch() * length), zero_row);
    for (int64_t i = 0; i < batch(); ++i)
      for (int64_t j = 0; j < this->length(i); ++j) rows[static_cast<size_t>(i * length + j)] = offsets_[i] + j;
    return gather_rows(cat({tokens_, Tensor::zeros({1, d}, tokens_.dtype(), tokens_.device())}, 0), rows)
        .reshape({batch(), length, d});
  }
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
