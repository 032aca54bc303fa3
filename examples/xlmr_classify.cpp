// XLM-R sequence classification: text in, class logits out. SentencePiece tokenisation with the
// seed's transform (<s> ... </s>, truncation, padding 1), the RoBERTa embeddings, the encoder's
// nested fastpath (padding skipped) and the classification head.
//   xlmr_classify --spm sentencepiece.bpe.model [--checkpoint xlmr.safetensors] [--config base]
//                 [--classes 2] [--dtype f32|bf16] [--json] "Hello world" "Bonjour le monde"
// Without --checkpoint the weights are random (vocabulary sized to the SentencePiece model); with
// one, its vocabulary and class count are read from the file (torchtext or Hugging Face names).
// Texts come from the arguments, or one per line on standard input. --dtype bf16 runs the
// encoder's GEMMs in bf16 (f32 accumulation) and reports how far its logits are from f32's.
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>

#include "devices/autograd/grad_mode.h"
#include "devices/io/safetensors.h"
#include "devices/ops.h"
#include "examples/command_line.h"
#include "examples/median_time.h"
#include "examples/json_line.h"
#include "examples/run_example.h"
#include "models/xlmr/xlmr.h"
#include "models/xlmr/xlmr_transform.h"

using namespace troupe;
using namespace troupe::models;

namespace {

// The vocabulary and class count a checkpoint was trained with, whichever its naming.
void size_from_checkpoint(XLMRConfig& config, const std::map<std::string, Tensor>& checkpoint) {
  for (const char* key : {"encoder.transformer.token_embedding.weight", "roberta.embeddings.word_embeddings.weight"})
    if (checkpoint.count(key)) config.vocab_size = checkpoint.at(key).size(0);
  for (const char* key : {"head.out_proj.bias", "classifier.out_proj.bias"})
    if (checkpoint.count(key)) config.num_classes = checkpoint.at(key).size(0);
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  std::string spm_path, checkpoint_path, config_name = "base";
  int64_t classes = 2, max_seq_len = 256;
  int reps = 3;
  std::vector<std::string> texts;
  bool json = false;
  std::string dtype = "f32";
  cli::App app{"XLM-R: text in, class logits out"};
  app.add_option("--spm", spm_path, "SentencePiece model (sentencepiece.bpe.model)")->required();
  app.add_option("--checkpoint", checkpoint_path, "safetensors weights, torchtext or Hugging Face names");
  app.add_option("--config", config_name, "model size")->check(cli::IsMember({"base", "large", "tiny"}));
  app.add_option("--classes", classes, "classes of the head (random weights)")->check(cli::PositiveNumber);
  app.add_option("--max-seq-len", max_seq_len, "tokens per text, <s> and </s> included")->check(cli::Range(2, 512));
  app.add_option("--reps", reps, "timed runs after two warm-ups (median reported)")->check(cli::PositiveNumber);
  app.add_option("texts", texts, "texts to classify (default: lines of standard input)");
  app.add_option("--dtype", dtype, "the encoder's GEMMs in f32 or bf16")->check(cli::IsMember({"f32", "bf16"}));
  app.add_flag("--json", json, "one JSON line of figures");
  TROUPE_PARSE_COMMAND_LINE(app, argc, argv);
  return run_example("xlmr_classify", [&] {
    if (texts.empty())
      for (std::string line; std::getline(std::cin, line);)
        if (!line.empty()) texts.push_back(line);
    if (texts.empty()) throw ValueError("no texts: pass them as arguments or as lines on standard input");

    auto start = std::chrono::steady_clock::now();
    XLMRTransform transform(std::make_shared<SentencePieceTokenizer>(spm_path), max_seq_len);
    XLMRConfig config = XLMRConfig::named(config_name, classes);
    std::map<std::string, Tensor> checkpoint;
    if (!checkpoint_path.empty()) {
      checkpoint = read_safetensors(checkpoint_path);
      size_from_checkpoint(config, checkpoint);
    } else {
      config.vocab_size = transform.vocab_size();
    }
    if (transform.vocab_size() > config.vocab_size)
      throw ValueError("the SentencePiece model's " + std::to_string(transform.vocab_size()) +
                       " ids do not fit the model's vocabulary of " + std::to_string(config.vocab_size));
    XLMR model(config);
    if (!checkpoint.empty()) model.load(checkpoint);
    model.eval();
    const double load_s = seconds_since(start);

    const Tensor tokens = transform.batch(texts);
    NoGradGuard no_grad;  // eval mode and no grad: the nested fastpath
    Tensor logits;  // two warm-ups: linear packs a weight on its second use
    if (dtype == "bf16") model.encoder.set_fastpath_dtype(DType::bf16);
    const double run_s = median_seconds([&] { logits = model(tokens); }, reps, 2);
    double diff_vs_f32 = 0;
    if (dtype == "bf16") {
      model.encoder.set_fastpath_dtype(DType::f32);
      diff_vs_f32 = max(abs(sub(logits, model(tokens)))).item<double>();
    }

    const auto values = logits.to_vector<float>();
    const auto ids = tokens.to_vector<int64_t>();
    const int64_t S = tokens.size(1), C = config.num_classes;
    int64_t real_tokens = 0;
    for (int64_t id : ids) real_tokens += id != XLMRTransform::kPadId;
    if (json) {
      print_json_line(nlohmann::ordered_json{{"config", config_name},
                                             {"texts", texts.size()},
                                             {"tokens", real_tokens},
                                             {"padded", tokens.numel()},
                                             {"load_s", rounded(load_s, 2)},
                                             {"dtype", dtype},
                                             {"run_ms", rounded(run_s * 1e3, 2)},
                                             {"max_abs_logit_diff_vs_f32", significant(diff_vs_f32, 3)}});
      return 0;
    }
    std::printf("XLM-R %s (%s), %s weights, loaded in %.2f s\n", config_name.c_str(), config.str().c_str(),
                checkpoint.empty() ? "random" : checkpoint_path.c_str(), load_s);
    for (size_t t = 0; t < texts.size(); ++t) {
      int64_t n = 0, best = 0;
      for (int64_t s = 0; s < S; ++s) n += ids[t * S + s] != XLMRTransform::kPadId;
      std::printf("  [%lld tokens] ", static_cast<long long>(n));
      for (int64_t c = 0; c < C; ++c) {
        std::printf("%s%+.4f", c ? " " : "logits ", values[t * C + c]);
        if (values[t * C + c] > values[t * C + best]) best = c;
      }
      std::printf("  class %lld  \"%s\"\n", static_cast<long long>(best), texts[t].c_str());
    }
    std::printf("  %zu texts, %lld real tokens of %lld padded slots, classified in %.2f ms (median)\n", texts.size(),
                static_cast<long long>(real_tokens), static_cast<long long>(tokens.numel()), run_s * 1e3);
    if (dtype == "bf16") std::printf("  bf16 GEMMs: logits at most %.3g from f32's\n", diff_vs_f32);
    return 0;
  });
}
