// An XLM-R encoder (random weights) split into two pipeline stages on two ranks, as remote actors:
// stage 0 (rank 0) runs the embeddings and the first half of the layers, stage 1 (rank 1) the
// other half and the classification head. Rank 0 sends every micro-batch to stage 0 first, then
// hands each result on to stage 1 as it comes, so stage 1 works on micro-batch i while stage 0
// works on i+1. Activations travel packed (real tokens only, as the nested fastpath keeps them).
// Checks the logits against the whole model in one process; prints both throughputs.
//
//   build/bin/troupe launch --nproc 2 -- build/bin/pipeline_xlmr [--config base] [--batch 32] [--micro 4] [--json]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <random>
#include <vector>

#include "devices/autograd/grad_mode.h"
#include "devices/determinism.h"
#include "devices/ops.h"
#include "examples/command_line.h"
#include "examples/json_line.h"
#include "examples/median_time.h"
#include "examples/run_example.h"
#include "models/transformer/nested_tensor.h"
#include "models/xlmr/xlmr.h"
#include "net/remote/remote_actor.h"

using namespace troupe;
using namespace troupe::net;

namespace {

// Layers [first, last) of XLMR(config, seed): stage 0 (first == 0) also embeds the tokens, the
// last stage also applies the head. Every stage draws the whole model from the seed, so the stages
// hold the same weights as one process would.
class Stage {
 public:
  Stage(const std::string& config, int64_t seed, int64_t first, int64_t last)
      : model_(models::XLMRConfig::named(config), static_cast<uint64_t>(seed)), first_(first), last_(last) {
    if (first < 0 || first >= last || last > model_.config.layers)
      throw ValueError("pipeline stage: layers [" + std::to_string(first) + ", " + std::to_string(last) +
                       ") do not fit a model of " + std::to_string(model_.config.layers));
    model_.eval();
  }

  // tokens i64 [B, S] (padded) and, after stage 0, the previous stage's packed activations
  // [tokens, d] (none for stage 0) -> this stage's packed activations, or the logits [B, classes] from the last stage.
  Tensor forward(const Tensor& tokens, const std::optional<Tensor>& packed) {
    NoGradGuard no_grad;
    if (first_ > 0 && !packed)
      throw ValueError("pipeline stage: layers from " + std::to_string(first_) + " need the previous stage's activations");
    const Tensor pad = eq(tokens, Tensor::full({}, static_cast<double>(model_.config.padding_idx), tokens.dtype()));
    models::NestedTensor x = first_ == 0 ? models::NestedTensor::from_padded(model_.embeddings(tokens), pad)
                                         : models::NestedTensor(*packed, offsets(pad));
    Tensor t = x.tokens().contiguous();
    for (int64_t i = first_; i < last_; ++i) t = model_.encoder.layers[static_cast<size_t>(i)]->forward_packed(t, x.offsets());
    if (last_ < model_.config.layers) return t;
    return model_.head(x.with_tokens(t).to_padded(tokens.shape()[1]));
  }

 private:
  static std::vector<int64_t> offsets(const Tensor& pad) {
    std::vector<int64_t> o{0};
    for (int64_t length : models::sequence_lengths(pad)) o.push_back(o.back() + length);
    return o;
  }
  models::XLMR model_;
  int64_t first_, last_;
};
TROUPE_ACTOR(Stage(const std::string&, int64_t, int64_t, int64_t), "xlmr.stage", &Stage::forward);

// Micro-batches of random token ids, each row <s> then random pieces, lengths 4..max_length,
// padded with the config's padding id.
std::vector<Tensor> token_batches(const models::XLMRConfig& config, int batch, int micro, int64_t max_length) {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int64_t> length(4, max_length), piece(config.padding_idx + 2, config.vocab_size - 1);
  std::vector<Tensor> batches;
  for (int begin = 0; begin < batch; begin += micro) {
    const int rows = std::min(micro, batch - begin);
    std::vector<int64_t> lengths(static_cast<size_t>(rows));
    for (auto& l : lengths) l = length(rng);
    const int64_t S = *std::max_element(lengths.begin(), lengths.end());
    std::vector<int64_t> ids(static_cast<size_t>(rows * S), config.padding_idx);
    for (int r = 0; r < rows; ++r) {
      ids[static_cast<size_t>(r * S)] = 0;  // <s>
      for (int64_t s = 1; s < lengths[static_cast<size_t>(r)]; ++s) ids[static_cast<size_t>(r * S + s)] = piece(rng);
    }
    batches.push_back(Tensor::from_vector(ids, {rows, S}));
  }
  return batches;
}

}  // namespace

int main(int argc, char** argv) {
  // Every rank picks the same GEMM as the one-process reference does: chosen by timing, a busy
  // machine could pick another on one rank, and the answers would differ in the last bits.
  set_deterministic_kernels(true);
  cli::App app{"XLM-R in two pipeline stages on two ranks, micro-batches in flight"};
  std::string config_name = "base";
  int batch = 32, micro = 4, reps = 3;
  int64_t max_length = 128, seed = 0;
  bool json = false;
  app.add_option("--config", config_name, "base, large or tiny");
  app.add_option("--batch", batch, "sequences per batch")->check(cli::PositiveNumber);
  app.add_option("--micro", micro, "sequences per micro-batch")->check(cli::PositiveNumber);
  app.add_option("--max-length", max_length, "longest sequence (tokens)")->check(cli::Range(4, 512));
  app.add_option("--reps", reps, "timed batches (median reported)")->check(cli::PositiveNumber);
  app.add_flag("--json", json, "print one JSON line of figures");
  TROUPE_PARSE_COMMAND_LINE(app, argc, argv);

  return run_example("pipeline_xlmr", [&] {
    auto world = init_process_group();
    if (world->size() != 2) throw ValueError("pipeline_xlmr: run it on 2 ranks (troupe launch --nproc 2)");
    RemoteActors actors(world);
    if (world->rank() != 0) {
      serve();
      return 0;
    }
    const models::XLMRConfig config = models::XLMRConfig::named(config_name);
    const int64_t split = config.layers / 2;
    const RemoteActor stage0 = spawn_on(0, "xlmr.stage", config_name, seed, int64_t{0}, split);
    const RemoteActor stage1 = spawn_on(1, "xlmr.stage", config_name, seed, split, config.layers);
    const std::vector<Tensor> batches = token_batches(config, batch, micro, max_length);

    auto pipelined = [&] {
      std::vector<Future<Tensor>> hidden, logits;
      for (const Tensor& tokens : batches) hidden.push_back(stage0.request<Tensor>("forward", tokens, std::optional<Tensor>()));
      for (size_t i = 0; i < batches.size(); ++i)
        logits.push_back(stage1.request<Tensor>("forward", batches[i], std::optional<Tensor>(hidden[i].get())));
      std::vector<Tensor> out;
      for (auto& f : logits) out.push_back(f.get());
      return cat(out, 0);
    };
    models::XLMR whole(config, static_cast<uint64_t>(seed));
    whole.eval();
    auto one_rank = [&] {
      NoGradGuard no_grad;
      std::vector<Tensor> out;
      for (const Tensor& tokens : batches) out.push_back(whole(tokens));
      return cat(out, 0);
    };
    const Tensor expected = one_rank(), got = pipelined();
    const double diff = max(abs(sub(expected, got))).item<float>();
    const double one_rank_s = median_seconds(one_rank, reps);
    const double pipeline_s = median_seconds(pipelined, reps);
    if (json) {
      print_json_line(nlohmann::ordered_json{{"config", config_name},
                                             {"batch", batch},
                                             {"micro", micro},
                                             {"one_rank_seq_per_s", rounded(batch / one_rank_s, 1)},
                                             {"pipeline_seq_per_s", rounded(batch / pipeline_s, 1)},
                                             {"max_abs_diff", significant(diff, 3)}});
    } else {
      std::printf("XLM-R %s (%lld layers, random weights), %d sequences of 4..%lld tokens in micro-batches of %d\n",
                  config_name.c_str(), static_cast<long long>(config.layers), batch, static_cast<long long>(max_length),
                  micro);
      std::printf("  one rank, whole model      %7.1f sequences/s\n", batch / one_rank_s);
      std::printf("  2 stages on 2 ranks        %7.1f sequences/s  (layers [0,%lld) on rank 0, [%lld,%lld) on rank 1)\n",
                  batch / pipeline_s, static_cast<long long>(split), static_cast<long long>(split),
                  static_cast<long long>(config.layers));
      std::printf("  max |logit diff|           %.3g\n", diff);
    }
    return diff <= 1e-4 ? 0 : 1;
  });
}
