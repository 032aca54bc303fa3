#pragma once
// A SentencePiece model (a `.model` file from spm_train or a released checkpoint) that splits text
// into pieces and ids, and joins ids back into text. Ids are the model's own (XLM-R's fairseq
// numbering is XLMRTransform's business).
//
//   SentencePieceTokenizer spm("sentencepiece.bpe.model");   // IOError naming the path if unreadable
//   std::vector<int> ids = spm.encode("Hello world");        // e.g. {35378, 8999}
//   std::string text = spm.decode(ids);                      // "Hello world"
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace troupe::models {

class SentencePieceTokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string& model_path);
  ~SentencePieceTokenizer();
  SentencePieceTokenizer(SentencePieceTokenizer&&) noexcept;
  SentencePieceTokenizer& operator=(SentencePieceTokenizer&&) noexcept;

  std::vector<int> encode(std::string_view text) const;
  std::vector<std::string> pieces(std::string_view text) const;  // "▁Hello", "▁world"
  // IndexError naming the id when one is outside [0, size()).
  std::string decode(const std::vector<int>& ids) const;

  int size() const;  // number of pieces, control symbols included
  int unk_id() const;
  int bos_id() const;  // -1 when the model has none
  int eos_id() const;
  const std::string& piece(int id) const;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;
};

}  // namespace troupe::models
