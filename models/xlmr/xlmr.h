#pragma once
// XLM-R for sequence classification, as torchtext's XLMR_BASE_ENCODER / XLMR_LARGE_ENCODER with a
// RobertaClassificationHead (and Hugging Face's XLMRobertaForSequenceClassification): RoBERTa
// embeddings, a post-LN gelu TransformerEncoder, and a head (dense, tanh, out_proj) on <s>.
//
//   auto spm = std::make_shared<SentencePieceTokenizer>("sentencepiece.bpe.model");
//   XLMRTransform transform(spm);
//   XLMR model(XLMRConfig::base(/*num_classes=*/2));
//   model.load(read_safetensors("xlmr.base.safetensors"));   // torchtext or Hugging Face names
//   model.eval();
//   NoGradGuard no_grad;                                      // inference: the encoder's fastpath
//   Tensor logits = model(transform.batch({"Hello world", "Bonjour"}));   // f32 [2, 2]
//
// In eval mode without grad the encoder packs the real tokens of a padded batch (a NestedTensor),
// so padding costs nothing; otherwise it runs PyTorch's general path, which autograd records.
// The embeddings are frozen (the fine-tuned parts are the encoder and the head).
#include <map>
#include <memory>
#include <string>

#include "models/nn/layers.h"
#include "models/transformer/encoder.h"
#include "models/transformer/serving_graph.h"
#include "models/xlmr/embeddings.h"
#include "models/xlmr/xlmr_config.h"

namespace troupe::models {

// torchtext's RobertaClassificationHead: out_proj(dropout(activation(dense(dropout(x[:, 0]))))).
class XLMRClassificationHead : public Module {
 public:
  XLMRClassificationHead(int64_t d_model, int64_t num_classes, const std::string& activation, double dropout,
                         Generator& generator = thread_generator());
  Tensor forward(const Tensor& features) const;  // [B, S, d] -> [B, classes], from each row's <s>
  Tensor operator()(const Tensor& features) const { return forward(features); }

  std::string activation;  // tanh | relu
  Linear dense, out_proj;
  Dropout dropout;
};

// Parameters under torchtext's names (checkpoint.h): encoder.transformer.* (the embeddings, and
// the encoder's layers.layers.N.*) and head.*.
class XLMR : public Module {
 public:
  // Random weights (RoBERTa's embeddings initialisation, PyTorch's for the rest) from Generator(seed)
  // and Generator(seed + 1): the thread's generator is left alone.
  explicit XLMR(const XLMRConfig& config, uint64_t seed = 0);

  // tokens i32/i64 [B, S], padded with config.padding_idx (after each row's tokens in XLMRTransform's
  // batches; padding between tokens is skipped too) -> features f32 [B, S, d_model], zeros at
  // padding, on the model's device (to()). Tokens are best on the host: the padding mask is read
  // there (device tokens cost one counted sync). Errors name the shapes.
  Tensor features(const Tensor& tokens) const;
  // -> logits f32 [B, num_classes].
  Tensor forward(const Tensor& tokens) const { return head(features(tokens)); }
  Tensor operator()(const Tensor& tokens) const { return forward(tokens); }

  // A checkpoint under torchtext's or Hugging Face's names (checkpoint.h), checked against the
  // config; one without head weights leaves the head as it was.
  void load(const std::map<std::string, Tensor>& checkpoint) override;
  using Module::load;  // load(safetensors_path)

  // Serving on a GPU: where features() takes the encoder's nested fastpath on a CUDA device, the
  // encoder's forward over the packed tokens is replayed from a CUDA graph, one per bucket of
  // packed row counts (serving_graph.h: the rows padded to the bucket, the padding kept apart);
  // the embeddings and the head run as before. Enable it after to(): the graphs read the weights
  // where they are then. load() and a change of the fastpath dtype drop the graphs.
  void set_serving_graph(bool enabled);
  const ServingGraph* serving_graph() const { return serving_graph_.get(); }  // nullptr when off

  XLMRConfig config;
  XLMRobertaEmbeddings embeddings;
  TransformerEncoder encoder;
  XLMRClassificationHead head;

 private:
  XLMR(const XLMRConfig& config, uint64_t seed, Generator&& layers_generator);

  std::unique_ptr<ServingGraph> serving_graph_;
  mutable DType serving_graph_dtype_ = DType::f32;  // the fastpath dtype its graphs recorded
};

}  // namespace troupe::models
