// XLM-R: SentencePiece tokenisation with the fairseq vocabulary, the RoBERTa embeddings, the
// whole tiny model against PyTorch, the torchtext and Hugging Face weight names, errors.
//
// The SentencePiece model is trained here, with Debian's spm_train, on tests/fixtures/xlmr/corpus.txt.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "devices/autograd/grad_mode.h"
#include "devices/io/safetensors.h"
#include "devices/ops.h"
#include "models/xlmr/checkpoint.h"
#include "models/xlmr/embeddings.h"
#include "models/xlmr/xlmr.h"
#include "models/xlmr/xlmr_transform.h"
#include "support/close.h"
#include "support/skip.h"

using namespace troupe;
using namespace troupe::models;
namespace fs = std::filesystem;

namespace {

const std::string corpus = std::string(TROUPE_FIXTURES) + "/xlmr/corpus.txt";

bool on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::stringstream dirs(path ? path : "/usr/bin");
  for (std::string dir; std::getline(dirs, dir, ':');)
    if (::access((fs::path(dir) / program).c_str(), X_OK) == 0) return true;
  return false;
}

// A 200-piece unigram model trained once per test process in a temporary directory (removed at
// exit); empty when spm_train is missing. Coverage 0.98 leaves the rarest scripts to <unk>.
struct TrainedModel {
  fs::path dir;
  std::string model;
  TrainedModel() {
    if (!on_path("spm_train")) return;
    dir = fs::temp_directory_path() / ("troupe_xlmr_test_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const std::string prefix = (dir / "tiny").string();
    const std::string command = "spm_train --input=" + corpus + " --model_prefix=" + prefix +
                                " --vocab_size=200 --character_coverage=0.98 --model_type=unigram" +
                                " > " + (dir / "train.log").string() + " 2>&1";
    if (std::system(command.c_str()) == 0) model = prefix + ".model";
  }
  ~TrainedModel() {
    std::error_code ignored;
    if (!dir.empty()) fs::remove_all(dir, ignored);
  }
};

// The trained model's path; empty when spm_train is missing.
std::string trained_model() {
  static TrainedModel trained;
  return trained.model;
}

std::map<std::string, Tensor> xlmr_fixture(const std::string& name) {
  return read_safetensors(std::string(TROUPE_FIXTURES) + "/xlmr/tiny_xlmr_" + name + ".safetensors");
}

const XLMRConfig tiny = XLMRConfig::tiny(202, 3);

std::shared_ptr<const SentencePieceTokenizer> tokenizer(const std::string& path) {
  return std::make_shared<SentencePieceTokenizer>(path);
}

}  // namespace

TEST_CASE("SentencePieceTokenizer: an unreadable model file is an IOError naming the path", "[xlmr][errors]") {
  CHECK_THROWS_AS(SentencePieceTokenizer("/nonexistent/xlmr.model"), IOError);
  CHECK_THROWS_WITH(SentencePieceTokenizer("/nonexistent/xlmr.model"), Catch::Contains("/nonexistent/xlmr.model"));
  CHECK_THROWS_AS(SentencePieceTokenizer(corpus), IOError);  // a text file is no model
  CHECK_THROWS_WITH(SentencePieceTokenizer(corpus), Catch::Contains("corpus.txt"));
}

TEST_CASE("SentencePieceTokenizer: pieces, ids and decoding of a trained model", "[xlmr][tokenizer]") {
  const std::string model = trained_model();
  if (model.empty()) SKIP_TEST("needs spm_train (Debian package sentencepiece) to train a model");
  SentencePieceTokenizer spm(model);
  CHECK(spm.size() == 200);
  CHECK(spm.unk_id() == 0);
  CHECK(spm.bos_id() == 1);
  CHECK(spm.eos_id() == 2);
  CHECK(spm.piece(0) == "<unk>");
  const std::string text = "The cat sleeps on the window sill.";
  auto ids = spm.encode(text);
  auto pieces = spm.pieces(text);
  REQUIRE(ids.size() == pieces.size());
  for (size_t i = 0; i < ids.size(); ++i) CHECK(spm.piece(ids[i]) == pieces[i]);
  CHECK(pieces[0].rfind("\xE2\x96\x81", 0) == 0);  // U+2581 marks the space before a word
  CHECK(spm.decode(ids) == text);
  CHECK_THROWS_AS(spm.decode({5, 200}), IndexError);
  CHECK_THROWS_WITH(spm.decode({5, -1}), Catch::Contains("-1"));
  CHECK_THROWS_AS(spm.piece(200), IndexError);
}

TEST_CASE("XLMRTransform: <s> ... </s> around SentencePiece ids shifted into the fairseq vocabulary", "[xlmr][tokenizer]") {
  const std::string model = trained_model();
  if (model.empty()) SKIP_TEST("needs spm_train (Debian package sentencepiece) to train a model");
  auto spm = tokenizer(model);
  XLMRTransform transform(spm);
  CHECK(transform.max_seq_len() == 256);
  CHECK(transform.vocab_size() == 202);  // 200 pieces, shifted by one, and <mask>
  CHECK(transform.mask_id() == 201);
  const std::string text = "The river runs through the middle of the town.";
  auto pieces = spm->encode(text);
  auto ids = transform(text);
  REQUIRE(ids.size() == pieces.size() + 2);
  CHECK(ids.front() == 0);
  CHECK(ids.back() == 2);
  for (size_t i = 0; i < pieces.size(); ++i) {
    CHECK(pieces[i] >= 3);
    CHECK(ids[i + 1] == pieces[i] + 1);
  }
  // The SentencePiece specials take the fairseq slots; no piece lands on <pad> = 1.
  CHECK(transform.to_fairseq(0) == 3);
  CHECK(transform.to_fairseq(1) == 0);
  CHECK(transform.to_fairseq(2) == 2);
  CHECK(transform.to_fairseq(3) == 4);
  CHECK(transform.to_fairseq(199) == 200);
  CHECK(transform.from_fairseq(3) == 0);
  CHECK(transform.from_fairseq(200) == 199);
  CHECK_THROWS_AS(transform.from_fairseq(1), ValueError);
  CHECK_THROWS_AS(transform.from_fairseq(201), ValueError);  // <mask>
  CHECK_THROWS_AS(transform.from_fairseq(202), IndexError);
  CHECK_THROWS_AS(transform.to_fairseq(200), IndexError);
  // A character the corpus never had (a snowman) is <unk>, fairseq 3.
  auto unknown = transform("\xE2\x98\x83");
  CHECK(std::count(unknown.begin(), unknown.end(), XLMRTransform::kUnkId) == 1);
}

TEST_CASE("XLMRTransform: truncation keeps <s>, the first max_seq_len - 2 pieces and </s>", "[xlmr][tokenizer]") {
  const std::string model = trained_model();
  if (model.empty()) SKIP_TEST("needs spm_train (Debian package sentencepiece) to train a model");
  auto spm = tokenizer(model);
  const std::string text = "A journey of a thousand miles begins with a single step.";
  auto full = XLMRTransform(spm)(text);
  REQUIRE(full.size() > 8);
  auto cut = XLMRTransform(spm, 8)(text);
  REQUIRE(cut.size() == 8);
  CHECK(cut.front() == 0);
  CHECK(cut.back() == 2);
  CHECK(std::equal(cut.begin(), cut.end() - 1, full.begin()));
  CHECK(XLMRTransform(spm, 2)(text) == std::vector<int64_t>{0, 2});
  CHECK(XLMRTransform(spm, static_cast<int64_t>(full.size()))(text) == full);  // exactly fits: untouched
  CHECK_THROWS_AS(XLMRTransform(spm, 1), ValueError);
  CHECK_THROWS_AS(XLMRTransform(nullptr), ValueError);
}

TEST_CASE("XLMRTransform: a batch is padded with 1 after </s>, and decodes back to the texts", "[xlmr][tokenizer]") {
  const std::string model = trained_model();
  if (model.empty()) SKIP_TEST("needs spm_train (Debian package sentencepiece) to train a model");
  XLMRTransform transform(tokenizer(model));
  const std::vector<std::string> texts{"The cat sleeps.", "The bakery on the corner makes the best bread.", "the end"};
  Tensor batch = transform.batch(texts);
  CHECK(batch.dtype() == DType::i64);
  REQUIRE(batch.dim() == 2);
  CHECK(batch.size(0) == 3);
  auto values = batch.to_vector<int64_t>();
  const int64_t S = batch.size(1);
  size_t longest = 0;
  for (size_t r = 0; r < texts.size(); ++r) {
    auto ids = transform(texts[r]);
    longest = std::max(longest, ids.size());
    std::vector<int64_t> row(values.begin() + r * S, values.begin() + (r + 1) * S);
    CHECK(std::equal(ids.begin(), ids.end(), row.begin()));
    for (size_t s = ids.size(); s < row.size(); ++s) CHECK(row[s] == 1);
    CHECK(transform.decode(row) == texts[r]);  // <s>, </s> and <pad> are skipped
  }
  CHECK(S == static_cast<int64_t>(longest));
  CHECK(transform.decode({0, transform.mask_id(), 2}).empty());
  CHECK_THROWS_AS(transform.decode({0, 202}), IndexError);
  CHECK_THROWS_WITH(transform.decode({0, 202}), Catch::Contains("202"));
}

TEST_CASE("pad_batch: right padding to the longest row, and its errors", "[xlmr][tokenizer]") {
  Tensor t = pad_batch({{0, 7, 2}, {0, 2}, {0, 5, 6, 8, 2}});
  CHECK(t.shape() == Shape{3, 5});
  CHECK(t.to_vector<int64_t>() == std::vector<int64_t>{0, 7, 2, 1, 1, 0, 2, 1, 1, 1, 0, 5, 6, 8, 2});
  CHECK(pad_batch({{4, 4}, {4}}, -9).to_vector<int64_t>() == std::vector<int64_t>{4, 4, 4, -9});
  CHECK_THROWS_AS(pad_batch({}), ValueError);
  CHECK_THROWS_WITH(pad_batch({{1}, {}}), Catch::Contains("row 1"));
}

TEST_CASE("XLMRobertaEmbeddings: positions count real tokens from padding_idx + 1", "[xlmr][embeddings]") {
  // cumsum(mask) * mask + padding_idx, mask = tokens != 1, worked by hand.
  Tensor tokens = Tensor::from_vector<int64_t>({0, 5, 6, 2, 1, 1,  //
                                                0, 7, 2, 1, 1, 1,  //
                                                1, 0, 9, 1, 4, 2},
                                               {3, 6});
  CHECK(XLMRobertaEmbeddings::positions(tokens, 1).to_vector<int64_t>() ==
        std::vector<int64_t>{2, 3, 4, 5, 1, 1,  //
                             2, 3, 4, 1, 1, 1,  //
                             1, 2, 3, 1, 4, 5});
  CHECK(XLMRobertaEmbeddings::positions(tokens.to(DType::i32), 0).to_vector<int64_t>() ==
        std::vector<int64_t>{0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5, 1, 0, 2, 3, 4, 5});  // now 0 pads
}

TEST_CASE("XLMRobertaEmbeddings: token + position rows, layer norm, by hand", "[xlmr][embeddings]") {
  const int64_t V = 6, D = 3, P = 8;
  XLMRobertaEmbeddings emb(V, D, P);
  std::vector<float> tok(V * D), pos(P * D);
  for (size_t i = 0; i < tok.size(); ++i) tok[i] = 0.1f * static_cast<float>(i * i % 7) - 0.2f;
  for (size_t i = 0; i < pos.size(); ++i) pos[i] = 0.05f * static_cast<float>(i % 5);
  const std::vector<float> gamma{1.5f, 0.5f, -1.0f}, beta{0.1f, 0.0f, 0.2f};
  emb.load(std::map<std::string, Tensor>{{"token_embedding.weight", Tensor::from_vector(tok, {V, D})},
                                         {"positional_embedding.embedding.weight", Tensor::from_vector(pos, {P, D})},
                                         {"embedding_layer_norm.weight", Tensor::from_vector(gamma, {D})},
                                         {"embedding_layer_norm.bias", Tensor::from_vector(beta, {D})}});
  emb.eval();
  const std::vector<int64_t> ids{0, 4, 5, 2, 1, 0, 3, 2, 1, 1};
  const std::vector<int64_t> positions{2, 3, 4, 5, 1, 2, 3, 4, 1, 1};
  Tensor out = emb(Tensor::from_vector(ids, {2, 5}));
  REQUIRE(out.shape() == Shape{2, 5, 3});
  auto got = out.to_vector<float>();
  for (size_t t = 0; t < ids.size(); ++t) {
    double x[3], mean = 0, var = 0;
    for (int d = 0; d < 3; ++d) {
      x[d] = tok[ids[t] * D + d] + pos[positions[t] * D + d];
      mean += x[d] / 3;
    }
    for (int d = 0; d < 3; ++d) var += (x[d] - mean) * (x[d] - mean) / 3;
    for (int d = 0; d < 3; ++d)
      CHECK(got[t * 3 + d] == Approx((x[d] - mean) / std::sqrt(var + 1e-5) * gamma[d] + beta[d]).margin(1e-5));
  }
  auto state = emb.state_dict();
  CHECK(state.size() == 4);
  CHECK(state.at("token_embedding.weight").to_vector<float>() == tok);
  for (Tensor* p : emb.parameters()) CHECK_FALSE(p->requires_grad());  // frozen
}

TEST_CASE("XLMRobertaEmbeddings: dropout only while training", "[xlmr][embeddings]") {
  XLMRobertaEmbeddings emb(10, 64, 12, 1, 1e-5, /*dropout=*/0.5, 2);
  Tensor tokens = Tensor::from_vector<int64_t>({0, 4, 5, 6, 2, 1}, {1, 6});
  emb.eval();
  Tensor eval = emb(tokens);
  CHECK_FALSE(emb.is_training());
  emb.train();
  CHECK(emb.is_training());
  auto dropped = emb(tokens).to_vector<float>(), kept = eval.to_vector<float>();
  size_t zeros = 0;
  for (size_t i = 0; i < kept.size(); ++i) {
    if (dropped[i] == 0.0f) ++zeros;
    else CHECK(dropped[i] == Approx(2 * kept[i]));  // survivors scaled by 1 / (1 - p)
  }
  CHECK(zeros > kept.size() / 4);  // about half of 384 elements
  CHECK(zeros < 3 * kept.size() / 4);
  emb.eval();
  CHECK(emb(tokens).to_vector<float>() == kept);
}

TEST_CASE("XLMRobertaEmbeddings: random weights zero the padding rows", "[xlmr][embeddings]") {
  XLMRobertaEmbeddings emb(10, 4, 12, /*padding_idx=*/1, 1e-5, 0.1, /*seed=*/5);
  auto state = emb.state_dict();
  auto tok = state.at("token_embedding.weight").to_vector<float>();
  auto pos = state.at("positional_embedding.embedding.weight").to_vector<float>();
  for (int d = 0; d < 4; ++d) {
    CHECK(tok[4 + d] == 0.0f);
    CHECK(pos[4 + d] == 0.0f);
    CHECK(tok[d] != 0.0f);
  }
  // Same seed, same weights.
  XLMRobertaEmbeddings again(10, 4, 12, 1, 1e-5, 0.1, 5);
  CHECK(again.state_dict().at("token_embedding.weight").to_vector<float>() == tok);
}

TEST_CASE("XLMRobertaEmbeddings: errors name the module, shapes and indices", "[xlmr][embeddings][errors]") {
  XLMRobertaEmbeddings emb(10, 4, 6);  // positions 2..5: four tokens a row
  CHECK_THROWS_AS(emb(Tensor::zeros({2, 3, 1}, DType::i64)), ShapeError);
  CHECK_THROWS_WITH(emb(Tensor::zeros({2, 3, 1}, DType::i64)), Catch::Contains("i64[2,3,1]"));
  CHECK_THROWS_AS(emb(Tensor::zeros({2, 3})), DTypeError);
  CHECK_THROWS_AS(emb(Tensor::from_vector<int64_t>({0, 10}, {1, 2})), IndexError);
  CHECK_THROWS_WITH(emb(Tensor::from_vector<int64_t>({0, 10}, {1, 2})), Catch::Contains("10"));
  CHECK(emb(Tensor::from_vector<int64_t>({0, 3, 3, 2, 1, 1}, {1, 6})).shape() == Shape{1, 6, 4});
  CHECK_THROWS_AS(emb(Tensor::from_vector<int64_t>({0, 3, 3, 3, 2}, {1, 5})), IndexError);
  CHECK_THROWS_WITH(emb(Tensor::from_vector<int64_t>({0, 3, 3, 3, 2}, {1, 5})),
                    Catch::Contains("i64[1,5]") && Catch::Contains("position 6"));
  auto state = emb.state_dict();
  state["token_embedding.weight"] = Tensor::zeros({9, 4});
  CHECK_THROWS_WITH(emb.load(state), Catch::Contains("token_embedding.weight") && Catch::Contains("f32[9,4]"));
  state.erase("token_embedding.weight");
  CHECK_THROWS_WITH(emb.load(state), Catch::Contains("missing") && Catch::Contains("token_embedding.weight"));
  CHECK_THROWS_AS(XLMRobertaEmbeddings(0, 4), ValueError);
  CHECK_THROWS_AS(XLMRobertaEmbeddings(10, 4, 2), ValueError);  // no room for positions after padding
  CHECK_THROWS_AS(XLMRobertaEmbeddings(10, 4, 8, 1, 1e-5, 1.0), ValueError);
}

TEST_CASE("XLMR checkpoints: Hugging Face names map onto torchtext's, q/k/v stacked, token type folded", "[xlmr][checkpoint]") {
  auto tt_file = xlmr_fixture("torchtext"), hf_file = xlmr_fixture("hf");
  CHECK(detect_xlmr_naming(tt_file) == XLMRNaming::torchtext);
  CHECK(detect_xlmr_naming(hf_file) == XLMRNaming::hugging_face);
  auto from_tt = xlmr_torchtext_state(tt_file, tiny);
  auto from_hf = xlmr_torchtext_state(hf_file, tiny);
  CHECK(from_tt.size() == 4 + 2 * 12 + 4);
  REQUIRE(from_hf.size() == from_tt.size());
  for (const auto& [key, value] : from_tt) {
    INFO(key);
    REQUIRE(from_hf.count(key) == 1);
    CHECK(relative_error(from_hf.at(key), value) < 1e-6);  // the position table went through (p - t) + t
  }
  // Layer 1's in_proj is query; key; value of layer 1, in that order.
  Tensor in_proj = from_hf.at("encoder.transformer.layers.layers.1.self_attn.in_proj_weight");
  CHECK(relative_error(in_proj.slice(0, 16, 32), hf_file.at("roberta.encoder.layer.1.attention.self.key.weight")) == 0);
  CHECK(relative_error(in_proj.slice(0, 32, 48), hf_file.at("roberta.encoder.layer.1.attention.self.value.weight")) == 0);
  auto shapes = xlmr_weight_shapes(XLMRConfig::base(), XLMRNaming::hugging_face);
  CHECK(shapes.at("roberta.embeddings.word_embeddings.weight") == Shape{250002, 768});
  CHECK(shapes.at("roberta.encoder.layer.11.intermediate.dense.weight") == Shape{3072, 768});
  CHECK(shapes.count("roberta.encoder.layer.12.intermediate.dense.weight") == 0);
  CHECK(xlmr_weight_shapes(XLMRConfig::large(), XLMRNaming::torchtext)
            .at("encoder.transformer.layers.layers.23.self_attn.in_proj_weight") == Shape{3072, 1024});
}

TEST_CASE("XLMR checkpoints: skipped keys, a headless encoder, other float dtypes", "[xlmr][checkpoint]") {
  auto hf = xlmr_fixture("hf");
  hf["roberta.pooler.dense.weight"] = Tensor::zeros({16, 16});
  hf["lm_head.bias"] = Tensor::zeros({202});
  for (const char* part : {"dense.weight", "dense.bias", "out_proj.weight", "out_proj.bias"})
    hf.erase(std::string("classifier.") + part);
  auto state = xlmr_torchtext_state(hf, tiny);
  CHECK(state.size() == 4 + 2 * 12);
  CHECK(state.count("head.dense.weight") == 0);
  auto tt = xlmr_fixture("torchtext");
  tt["encoder.transformer.embedding_layer_norm.bias"] = tt["encoder.transformer.embedding_layer_norm.bias"].to(DType::f64);
  CHECK(xlmr_torchtext_state(tt, tiny).at("encoder.transformer.embedding_layer_norm.bias").dtype() == DType::f32);
}

TEST_CASE("XLMR checkpoints: errors list every missing and unknown key, and name wrong shapes", "[xlmr][checkpoint][errors]") {
  auto hf = xlmr_fixture("hf");
  hf.erase("roberta.encoder.layer.0.attention.self.key.bias");
  hf.erase("roberta.encoder.layer.1.output.LayerNorm.weight");
  hf["roberta.encoder.layer.0.attention.self.extra"] = Tensor::zeros({1});
  CHECK_THROWS_AS(xlmr_torchtext_state(hf, tiny), ValueError);
  CHECK_THROWS_WITH(xlmr_torchtext_state(hf, tiny),
                    Catch::Contains("Hugging Face") && Catch::Contains("missing 2") &&
                        Catch::Contains("roberta.encoder.layer.0.attention.self.key.bias") &&
                        Catch::Contains("roberta.encoder.layer.1.output.LayerNorm.weight") &&
                        Catch::Contains("unknown 1") && Catch::Contains("roberta.encoder.layer.0.attention.self.extra"));
  // A checkpoint of more layers than the configuration: the extra layer's keys are unknown.
  XLMRConfig one_layer = tiny;
  one_layer.layers = 1;
  CHECK_THROWS_WITH(xlmr_torchtext_state(xlmr_fixture("torchtext"), one_layer),
                    Catch::Contains("unknown 12") && Catch::Contains("encoder.transformer.layers.layers.1.linear1.bias"));
  XLMRConfig other_vocab = tiny;
  other_vocab.vocab_size = 250002;
  CHECK_THROWS_AS(xlmr_torchtext_state(xlmr_fixture("torchtext"), other_vocab), ShapeError);
  CHECK_THROWS_WITH(xlmr_torchtext_state(xlmr_fixture("torchtext"), other_vocab),
                    Catch::Contains("encoder.transformer.token_embedding.weight") && Catch::Contains("f32[202,16]") &&
                        Catch::Contains("[250002,16]"));
  auto tt = xlmr_fixture("torchtext");
  tt["head.dense.bias"] = Tensor::zeros({16}, DType::i64);
  CHECK_THROWS_AS(xlmr_torchtext_state(tt, tiny), DTypeError);
  tt.erase("head.out_proj.weight");  // a partial head is missing weights, not headless
  CHECK_THROWS_WITH(xlmr_torchtext_state(tt, tiny), Catch::Contains("missing 1") && Catch::Contains("head.out_proj.weight"));
  CHECK_THROWS_WITH(XLMRConfig::named("huge"), Catch::Contains("huge") && Catch::Contains("base"));
  XLMRConfig bad = tiny;
  bad.heads = 3;
  CHECK_THROWS_WITH(xlmr_torchtext_state(xlmr_fixture("torchtext"), bad), Catch::Contains("heads") && Catch::Contains("d_model=16"));
}

TEST_CASE("XLMR: the whole tiny model matches PyTorch on a padded batch, fastpath and general path", "[xlmr][model]") {
  const auto reference = xlmr_fixture("reference");
  const Tensor tokens = reference.at("tokens");
  for (const char* file : {"torchtext", "hf"}) {
    XLMR model(tiny);
    model.load(xlmr_fixture(file));
    model.eval();
    {
      NoGradGuard no_grad;  // the nested fastpath
      REQUIRE(model.encoder.takes_fastpath());
      INFO(file << " fastpath");
      CHECK(relative_error(model.features(tokens), reference.at("features")) <= 1e-4);
      CHECK(relative_error(model(tokens), reference.at("logits")) <= 1e-4);
    }
    INFO(file << " general path");  // grad mode on: dense, masked, recorded
    REQUIRE_FALSE(model.encoder.takes_fastpath());
    CHECK(relative_error(model.features(tokens), reference.at("features")) <= 1e-4);
    CHECK(relative_error(model(tokens), reference.at("logits")) <= 1e-4);
  }
}

TEST_CASE("XLMR: bf16 GEMMs in the fastpath keep the tiny model within bf16's rounding of PyTorch", "[xlmr][model][bf16]") {
  const auto reference = xlmr_fixture("reference");
  const Tensor tokens = reference.at("tokens");
  XLMR model(tiny);
  model.load(xlmr_fixture("torchtext"));
  model.eval();
  NoGradGuard no_grad;
  model.encoder.set_fastpath_dtype(DType::bf16);
  // The features carry bf16's rounding (~1e-2 after 2 layers); the head's small logits, a
  // difference of such features, about 4e-2 (each GEMM alone matches linear on rounded operands
  // to 1e-5: gemm_bf16_test.cpp).
  CHECK(relative_error(model.features(tokens), reference.at("features")) <= 2e-2);
  const double error = relative_error(model(tokens), reference.at("logits"));
  CHECK(error <= 6e-2);
  CHECK(error > 1e-6);  // the bf16 GEMMs ran
  model.encoder.set_fastpath_dtype(DType::f32);
  CHECK(relative_error(model(tokens), reference.at("logits")) <= 1e-4);
}

TEST_CASE("XLMR: state_dict round trip, a headless checkpoint keeps the head, gradients reach the encoder", "[xlmr][model]") {
  const Tensor tokens = xlmr_fixture("reference").at("tokens");
  XLMR model(tiny);
  model.load(xlmr_fixture("torchtext"));
  auto state = model.state_dict();
  CHECK(state.size() == 4 + 2 * 12 + 4);
  XLMR copy(tiny, 99);
  copy.load(state);
  model.eval();
  copy.eval();
  NoGradGuard no_grad;
  CHECK(relative_error(copy(tokens), model(tokens)) == 0);

  auto headless = xlmr_fixture("torchtext");
  for (const char* part : {"dense.weight", "dense.bias", "out_proj.weight", "out_proj.bias"})
    headless.erase(std::string("head.") + part);
  XLMR fresh(tiny, 5);
  const Tensor head_before = fresh.head.out_proj.weight.clone();
  fresh.load(headless);
  CHECK(relative_error(fresh.head.out_proj.weight, head_before) == 0);
  fresh.eval();
  // model's weights are on their second use, so packed (devices/cpu/matmul.cpp): rounded differently.
  CHECK(relative_error(fresh.features(tokens), model.features(tokens)) < 1e-6);
}

TEST_CASE("XLMR: training mode records the encoder and head for backward", "[xlmr][model]") {
  const Tensor tokens = xlmr_fixture("reference").at("tokens");
  XLMR model(tiny);
  model.load(xlmr_fixture("torchtext"));
  model.train();
  REQUIRE_FALSE(model.encoder.takes_fastpath());
  Tensor loss = cross_entropy(model(tokens), Tensor::from_vector<int64_t>({0, 2, 1}, {3}));
  loss.backward();
  auto head_grad = model.head.out_proj.weight.grad();
  auto attn_grad = model.encoder.layers[0]->self_attn.in_proj_weight.grad();
  REQUIRE(head_grad.defined());
  REQUIRE(attn_grad.defined());
  double norm = 0;
  for (double g : attn_grad.to_vector<double>()) norm += g * g;
  CHECK(norm > 0);
}

TEST_CASE("XLMR: bad token batches are errors naming the shapes, padding inside a row is skipped", "[xlmr][model][errors]") {
  XLMR model(tiny);
  model.eval();
  NoGradGuard no_grad;
  CHECK_THROWS_AS(model(Tensor::zeros({4}, DType::i64)), ShapeError);
  CHECK_THROWS_AS(model(Tensor::zeros({2, 3})), DTypeError);
  CHECK_THROWS_AS(model(Tensor::full({1, 3}, 202, DType::i64)), IndexError);  // outside the vocabulary
  // Padding inside a row is left out, as Hugging Face's model does (positions count real tokens).
  check_close(model(Tensor::from_vector<int64_t>({0, 1, 5, 2}, {1, 4})), model(Tensor::from_vector<int64_t>({0, 5, 2}, {1, 3})),
              {.rtol = 1e-5, .atol = 1e-6});
  CHECK_THROWS_AS(model.load(std::map<std::string, Tensor>{}), ValueError);
  CHECK_THROWS_AS(XLMR(XLMRConfig::tiny(0)), ValueError);
}
