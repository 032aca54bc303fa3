#include "models/xlmr/sentencepiece_tokenizer.h"

#include <sentencepiece_processor.h>

#include <fstream>

#include "devices/error.h"

namespace troupe::models {

SentencePieceTokenizer::SentencePieceTokenizer(const std::string& model_path)
    : path_(model_path), processor_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {
  // SentencePiece's own message for a missing file does not say which file: check first.
  if (!std::ifstream(model_path).good())
    throw IOError("SentencePieceTokenizer: cannot open model file '" + model_path + "'");
  auto status = processor_->Load(model_path);
  if (!status.ok())
    throw IOError("SentencePieceTokenizer: '" + model_path + "' is not a SentencePiece model: " +
                  status.ToString());
}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;
SentencePieceTokenizer::SentencePieceTokenizer(SentencePieceTokenizer&&) noexcept = default;
SentencePieceTokenizer& SentencePieceTokenizer::operator=(SentencePieceTokenizer&&) noexcept = default;

std::vector<int> SentencePieceTokenizer::encode(std::string_view text) const {
  std::vector<int> ids;
  auto status = processor_->Encode(text, &ids);
  if (!status.ok()) throw ValueError("SentencePieceTokenizer::encode: " + status.ToString());
  return ids;
}

std::vector<std::string> SentencePieceTokenizer::pieces(std::string_view text) const {
  std::vector<std::string> out;
  auto status = processor_->Encode(text, &out);
  if (!status.ok()) throw ValueError("SentencePieceTokenizer::pieces: " + status.ToString());
  return out;
}

std::string SentencePieceTokenizer::decode(const std::vector<int>& ids) const {
  for (int id : ids)
    if (id < 0 || id >= size())
      throw IndexError("SentencePieceTokenizer::decode: id " + std::to_string(id) + " is outside [0, " +
                       std::to_string(size()) + ") of '" + path_ + "'");
  std::string text;
  auto status = processor_->Decode(ids, &text);
  if (!status.ok()) throw ValueError("SentencePieceTokenizer::decode: " + status.ToString());
  return text;
}

int SentencePieceTokenizer::size() const { return processor_->GetPieceSize(); }
int SentencePieceTokenizer::unk_id() const { return processor_->unk_id(); }
int SentencePieceTokenizer::bos_id() const { return processor_->bos_id(); }
int SentencePieceTokenizer::eos_id() const { return processor_->eos_id(); }

const std::string& SentencePieceTokenizer::piece(int id) const {
  if (id < 0 || id >= size())
    throw IndexError("SentencePieceTokenizer::piece: id " + std::to_string(id) + " is outside [0, " +
                     std::to_string(size()) + ")");
  return processor_->IdToPiece(id);
}

}  // namespace troupe::models
