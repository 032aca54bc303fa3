// libFuzzer target for the XLM-R checkpoint name mapping (models/xlmr/checkpoint.h): a checkpoint
// made from the input maps to torchtext's names with exactly the model's shapes in f32, or throws
// troupe::Error (ValueError listing keys, ShapeError, DTypeError); never crash.
// Input: byte 0 picks the naming the checkpoint starts from (bit 0: Hugging Face) and whether it
// starts complete (bit 1) or empty; then edits of 4 bytes each: op, a name's index, and two
// arguments (remove, reshape, change dtype, add an unknown or a skipped name).
//   build/bin/xlmr_names_fuzz -max_total_time=60 tests/fuzz/corpus/xlmr_names
#include <cstdint>
#include <cstdlib>
#include <iterator>

#include "devices/error.h"
#include "models/xlmr/checkpoint.h"

using namespace troupe;
using namespace troupe::models;

namespace {

XLMRConfig tiny() {
  XLMRConfig c;
  c.vocab_size = 7;
  c.d_model = 4;
  c.layers = 2;
  c.heads = 2;
  c.ffn = 8;
  c.max_positions = 6;
  c.num_classes = 3;
  return c;
}

const DType kDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i64, DType::u8};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  static const XLMRConfig config = tiny();
  const XLMRNaming naming = (data[0] & 1) ? XLMRNaming::hugging_face : XLMRNaming::torchtext;
  const auto shapes = xlmr_weight_shapes(config, naming);
  std::map<std::string, Tensor> checkpoint;
  if (data[0] & 2)
    for (const auto& [name, shape] : shapes) checkpoint.emplace(name, Tensor::zeros(shape));
  for (size_t at = 1; at + 4 <= size; at += 4) {
    const uint8_t op = data[at] % 5, a = data[at + 2], b = data[at + 3];
    auto it = shapes.begin();
    std::advance(it, data[at + 1] % shapes.size());
    const std::string& name = it->first;
    switch (op) {
      case 0: checkpoint.erase(name); break;
      case 1: {  // another shape: one dim changed, or one added
        Shape s = it->second;
        if (a % 4 == 3) s.push_back(b % 4);
        else if (!s.empty()) s[a % s.size()] = b % 16;
        checkpoint[name] = Tensor::zeros(s);
        break;
      }
      case 2: checkpoint[name] = Tensor::zeros(it->second, kDTypes[a % 6]); break;
      case 3: checkpoint["unknown." + std::to_string(a) + "." + name.substr(0, b % (name.size() + 1))] = Tensor::zeros({1}); break;
      case 4: {
        static const char* skipped[] = {"roberta.embeddings.position_ids", "roberta.pooler.dense.weight", "lm_head.bias"};
        checkpoint[skipped[a % 3]] = Tensor::zeros({b % 5});
        break;
      }
    }
  }
  try {
    const auto state = xlmr_torchtext_state(checkpoint, config);
    const auto expected = xlmr_weight_shapes(config, XLMRNaming::torchtext);
    for (const auto& [name, t] : state) {
      const auto want = expected.find(name);
      if (want == expected.end() || t.shape() != want->second || t.dtype() != DType::f32) std::abort();
    }
  } catch (const Error&) {
  }
  return 0;
}
