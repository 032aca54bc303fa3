#include "models/xlmr/xlmr_transform.h"

#include <algorithm>

namespace troupe::models {

XLMRTransform::XLMRTransform(std::shared_ptr<const SentencePieceTokenizer> spm, int64_t max_seq_len)
    : spm_(std::move(spm)), max_seq_len_(max_seq_len) {
  if (!spm_) throw ValueError("XLMRTransform: no SentencePiece model");
  if (max_seq_len < 2)
    throw ValueError("XLMRTransform: max_seq_len " + std::to_string(max_seq_len) + " leaves no room for <s> and </s>");
  if (spm_->unk_id() != 0 || spm_->bos_id() != 1 || spm_->eos_id() != 2)
    throw ValueError("XLMRTransform: '" + spm_->path() + "' has <unk>=" + std::to_string(spm_->unk_id()) +
                     " <s>=" + std::to_string(spm_->bos_id()) + " </s>=" + std::to_string(spm_->eos_id()) +
                     "; XLM-R's fairseq vocabulary needs <unk>=0 <s>=1 </s>=2");
}

int64_t XLMRTransform::to_fairseq(int spm_id) const {
  if (spm_id < 0 || spm_id >= spm_->size())
    throw IndexError("XLMRTransform: SentencePiece id " + std::to_string(spm_id) + " is outside [0, " +
                     std::to_string(spm_->size()) + ")");
  if (spm_id == 0) return kUnkId;
  if (spm_id == 1) return kBosId;
  if (spm_id == 2) return kEosId;
  return spm_id + kFairseqOffset;
}

int XLMRTransform::from_fairseq(int64_t id) const {
  if (id < 0 || id >= vocab_size())
    throw IndexError("XLMRTransform: token id " + std::to_string(id) + " is outside [0, " +
                     std::to_string(vocab_size()) + ")");
  if (id == kUnkId) return spm_->unk_id();
  if (id < kUnkId || id == mask_id())
    throw ValueError("XLMRTransform: token id " + std::to_string(id) + " is a fairseq special with no SentencePiece id");
  return static_cast<int>(id - kFairseqOffset);
}

std::vector<int64_t> XLMRTransform::operator()(std::string_view text) const {
  std::vector<int> pieces = spm_->encode(text);
  const size_t keep = std::min(pieces.size(), static_cast<size_t>(max_seq_len_ - 2));
  std::vector<int64_t> ids;
  ids.reserve(keep + 2);
  ids.push_back(kBosId);
  for (size_t i = 0; i < keep; ++i) ids.push_back(to_fairseq(pieces[i]));
  ids.push_back(kEosId);
  return ids;
}

Tensor XLMRTransform::batch(const std::vector<std::string>& texts) const {
  std::vector<std::vector<int64_t>> rows;
  rows.reserve(texts.size());
  for (const auto& text : texts) rows.push_back((*this)(text));
  return pad_batch(rows, kPadId);
}

std::string XLMRTransform::decode(const std::vector<int64_t>& ids) const {
  std::vector<int> pieces;
  for (int64_t id : ids) {
    if (id < 0 || id >= vocab_size())
      throw IndexError("XLMRTransform::decode: token id " + std::to_string(id) + " is outside [0, " +
                       std::to_string(vocab_size()) + ")");
    if (id == kBosId || id == kPadId || id == kEosId || id == mask_id()) continue;
    pieces.push_back(from_fairseq(id));
  }
  return spm_->decode(pieces);
}

Tensor pad_batch(const std::vector<std::vector<int64_t>>& rows, int64_t padding_value) {
  if (rows.empty()) throw ValueError("pad_batch: the batch is empty");
  size_t longest = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    if (rows[r].empty()) throw ValueError("pad_batch: row " + std::to_string(r) + " is empty");
    longest = std::max(longest, rows[r].size());
  }
  Tensor out = Tensor::full({static_cast<int64_t>(rows.size()), static_cast<int64_t>(longest)},
                            static_cast<double>(padding_value), DType::i64);
  int64_t* data = out.mutable_data<int64_t>();
  for (size_t r = 0; r < rows.size(); ++r) std::copy(rows[r].begin(), rows[r].end(), data + r * longest);
  return out;
}

}  // namespace troupe::models
