#pragma once
// XLM-R's text transform, as torchtext's XLMR_BASE_ENCODER.transform(): SentencePiece ids mapped to
// the fairseq vocabulary the checkpoints were trained with, truncated to max_seq_len - 2, then
// wrapped in <s> ... </s>; a batch is padded with <pad> = 1 (torchtext's ToTensor(padding_value=1)).
//
// The fairseq vocabulary puts four specials first and shifts every other SentencePiece id by one:
//   <s> = 0, <pad> = 1, </s> = 2, <unk> = 3, piece k (k >= 3) = k + 1, <mask> = spm size + 1.
//
//   auto spm = std::make_shared<SentencePieceTokenizer>("sentencepiece.bpe.model");
//   XLMRTransform transform(spm);                       // max_seq_len 256
//   std::vector<int64_t> ids = transform("Hello world");    // {0, 35378, 8999, 2}
//   Tensor tokens = transform.batch({"Hello world", "Hi"}); // i64[2,4], the short row padded with 1
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "devices/tensor.h"
#include "models/xlmr/sentencepiece_tokenizer.h"

namespace troupe::models {

class XLMRTransform {
 public:
  static constexpr int64_t kBosId = 0, kPadId = 1, kEosId = 2, kUnkId = 3;
  static constexpr int64_t kFairseqOffset = 1;

  // ValueError when max_seq_len < 2 or the model's specials are not XLM-R's layout
  // (SentencePiece <unk> = 0, <s> = 1, </s> = 2: spm_train's defaults, and XLM-R's model).
  explicit XLMRTransform(std::shared_ptr<const SentencePieceTokenizer> spm, int64_t max_seq_len = 256);

  std::vector<int64_t> operator()(std::string_view text) const;
  // i64 [B, longest], rows padded with kPadId after </s>.
  Tensor batch(const std::vector<std::string>& texts) const;
  // Text of fairseq ids, specials (<s>, <pad>, </s>, <mask>) skipped; IndexError for an id
  // outside [0, vocab_size()).
  std::string decode(const std::vector<int64_t>& ids) const;

  int64_t to_fairseq(int spm_id) const;
  int from_fairseq(int64_t id) const;  // specials other than <unk> have no SentencePiece id: ValueError
  int64_t vocab_size() const { return spm_->size() + 2; }  // the shift and <mask>
  int64_t mask_id() const { return vocab_size() - 1; }
  int64_t max_seq_len() const { return max_seq_len_; }
  const SentencePieceTokenizer& spm() const { return *spm_; }

 private:
  std::shared_ptr<const SentencePieceTokenizer> spm_;
  int64_t max_seq_len_;
};

// Rows of different lengths as one i64 [B, longest] tensor, padded with padding_value on the right.
// ValueError for an empty batch or an empty row.
Tensor pad_batch(const std::vector<std::vector<int64_t>>& rows, int64_t padding_value = XLMRTransform::kPadId);

}  // namespace troupe::models
