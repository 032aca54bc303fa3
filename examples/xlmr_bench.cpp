// A serving batch for XLM-R base classification: 64 sentences of 5..250 tokens (lengths from a
// fixed seed, the same as examples/xlmr_bench_torch.py draws), random weights, the encoder's nested
// fastpath in f32 and with bf16 GEMMs. Tokens per second counts real tokens; the bf16 logits'
// largest distance from the f32 ones is reported beside. With --device cuda the model lives on the GPU
// and the tokens stay on the host, as a server's tokenizer makes them (XLMR reads the padding there
// and uploads the rest); each time runs until the device is done.
// --profile: one more bf16 run under the profiler, its host and lane tables on stderr (where the
// time goes: each op's host time, and its time on the GPU's stream).
// --graph (with --device cuda): f32 and bf16 again with the encoder replayed from a CUDA graph of
// the batch's bucket of packed rows (XLMR::set_serving_graph), its logits' distance from the
// launched run's beside.
//   xlmr_bench [--sentences 64] [--reps 3] [--device cpu|cuda] [--graph] [--profile] [--json]
#include <cstdio>

#include "actors/observe/profiler.h"
#include "devices/autograd/grad_mode.h"
#include "devices/ops.h"
#include "examples/command_line.h"
#include "examples/cpu_kernels.h"
#include "examples/device_option.h"
#include "examples/json_line.h"
#include "examples/median_time.h"
#include "examples/run_example.h"
#include "models/xlmr/xlmr.h"
#include "models/xlmr/xlmr_transform.h"

using namespace troupe;
using namespace troupe::models;

namespace {

// Knuth's MMIX LCG, as xlmr_bench_torch.py steps it: the same batch in both.
struct Lcg {
  uint64_t state;
  uint64_t next() {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return state >> 33;
  }
};

// Row i: <s>, length - 2 ids drawn from the vocabulary past the specials, </s>, padding (1).
Tensor serving_batch(int64_t sentences, int64_t vocab, std::vector<int64_t>& lengths) {
  Lcg lcg{1234};
  for (int64_t i = 0; i < sentences; ++i) lengths.push_back(5 + static_cast<int64_t>(lcg.next() % 246));
  const int64_t S = *std::max_element(lengths.begin(), lengths.end());
  std::vector<int64_t> ids(static_cast<size_t>(sentences * S), XLMRTransform::kPadId);
  for (int64_t i = 0; i < sentences; ++i) {
    int64_t* row = ids.data() + i * S;
    row[0] = 0;
    for (int64_t j = 1; j + 1 < lengths[static_cast<size_t>(i)]; ++j) row[j] = 4 + static_cast<int64_t>(lcg.next() % (vocab - 4));
    row[lengths[static_cast<size_t>(i)] - 1] = 2;
  }
  return Tensor::from_vector(ids, {sentences, S});
}

}  // namespace

int main(int argc, char** argv) {
  int64_t sentences = 64;
  int reps = 3;
  bool json = false, profile = false, graph = false;
  std::string device_name = "cpu";
  cli::App app{"XLM-R base classification of a serving batch: f32 and bf16 GEMMs"};
  app.add_option("--sentences", sentences, "sentences in the batch")->check(cli::PositiveNumber);
  app.add_option("--reps", reps, "timed runs after a warm-up (median reported)")->check(cli::PositiveNumber);
  add_device_option(app, device_name);
  app.add_flag("--json", json, "one JSON line of figures");
  app.add_flag("--profile", profile, "one more bf16 run profiled: its op tables on stderr");
  app.add_flag("--graph", graph, "f32 and bf16 again from CUDA graphs of the encoder (--device cuda)");
  TROUPE_PARSE_COMMAND_LINE(app, argc, argv);
  return run_example("xlmr_bench", [&] {
    const Device device = example_device(device_name);
    if (graph && !device.is_cuda()) throw ValueError("--graph replays CUDA graphs: it needs --device cuda");
    const XLMRConfig config = XLMRConfig::base(2);
    std::vector<int64_t> lengths;
    const Tensor tokens = serving_batch(sentences, config.vocab_size, lengths);
    int64_t real_tokens = 0;
    for (int64_t L : lengths) real_tokens += L;
    XLMR model(config);
    model.to(device);
    model.eval();
    NoGradGuard no_grad;  // the nested fastpath
    Tensor f32_logits, bf16_logits;
    const double f32_s = median_seconds([&] { f32_logits = model(tokens); finish(device); }, reps, 2);  // linear packs on second use
    model.encoder.set_fastpath_dtype(DType::bf16);
    const double bf16_s = median_seconds([&] { bf16_logits = model(tokens); finish(device); }, reps, 1);
    const double diff = max(abs(sub(bf16_logits, f32_logits))).item<double>();
    double graph_f32_s = 0, graph_bf16_s = 0, graph_f32_diff = 0, graph_bf16_diff = 0;
    int64_t bucket_rows = 0;
    if (graph) {
      model.set_serving_graph(true);
      model.encoder.set_fastpath_dtype(DType::f32);
      Tensor graph_f32, graph_bf16;
      graph_f32_s = median_seconds([&] { graph_f32 = model(tokens); finish(device); }, reps, 1);  // the first captures
      model.encoder.set_fastpath_dtype(DType::bf16);
      graph_bf16_s = median_seconds([&] { graph_bf16 = model(tokens); finish(device); }, reps, 1);
      graph_f32_diff = max(abs(sub(graph_f32, f32_logits))).item<double>();
      graph_bf16_diff = max(abs(sub(graph_bf16, bf16_logits))).item<double>();
      bucket_rows = model.serving_graph()->buckets().at(0).rows;
      model.set_serving_graph(false);
    }
    if (profile) {
      Profiler& profiler = Profiler::global();
      profiler.start();
      model(tokens);
      finish(device);
      profiler.stop();
      std::fprintf(stderr, "xlmr_bench: one bf16 run, ops by host time\n%s\nby time on their lanes (%s)\n%s",
                   profiler.table(30).c_str(), device.str().c_str(), profiler.device_table(30).c_str());
    }
    if (json) {
      nlohmann::ordered_json line = with_cpu_kernels(nlohmann::ordered_json{{"device", device.str()},
                                             {"sentences", sentences},
                                             {"tokens", real_tokens},
                                             {"padded", tokens.numel()},
                                             {"f32_ms", rounded(f32_s * 1e3, 1)},
                                             {"f32_tokens_per_s", rounded(real_tokens / f32_s, 0)},
                                             {"bf16_ms", rounded(bf16_s * 1e3, 1)},
                                             {"bf16_tokens_per_s", rounded(real_tokens / bf16_s, 0)},
                                             {"bf16_speedup", rounded(f32_s / bf16_s, 2)},
                                             {"bf16_max_abs_logit_diff", significant(diff, 3)}});
      if (graph) {
        line["graph_bucket_rows"] = bucket_rows;
        line["graph_f32_ms"] = rounded(graph_f32_s * 1e3, 2);
        line["graph_f32_tokens_per_s"] = rounded(real_tokens / graph_f32_s, 0);
        line["graph_bf16_ms"] = rounded(graph_bf16_s * 1e3, 2);
        line["graph_bf16_tokens_per_s"] = rounded(real_tokens / graph_bf16_s, 0);
        line["graph_f32_max_abs_logit_diff"] = significant(graph_f32_diff, 3);  // against the launches
        line["graph_bf16_max_abs_logit_diff"] = significant(graph_bf16_diff, 3);
      }
      print_json_line(line);
      return 0;
    }
    std::printf("XLM-R base on %s, random weights: %lld sentences of 5..250 tokens (%lld real of %lld padded)\n",
                device.str().c_str(), static_cast<long long>(sentences), static_cast<long long>(real_tokens),
                static_cast<long long>(tokens.numel()));
    std::printf("  f32 fastpath          %9.1f ms  %8.0f tokens/s\n", f32_s * 1e3, real_tokens / f32_s);
    std::printf("  bf16 GEMMs            %9.1f ms  %8.0f tokens/s  (%.2fx; logits at most %.3g from f32's)\n",
                bf16_s * 1e3, real_tokens / bf16_s, f32_s / bf16_s, diff);
    if (graph) {
      std::printf("  CUDA graphs (%lld rows)  f32 %9.2f ms  %8.0f tokens/s  (logits at most %.3g from launched)\n",
                  static_cast<long long>(bucket_rows), graph_f32_s * 1e3, real_tokens / graph_f32_s, graph_f32_diff);
      std::printf("                          bf16 %8.2f ms  %8.0f tokens/s  (logits at most %.3g from launched)\n",
                  graph_bf16_s * 1e3, real_tokens / graph_bf16_s, graph_bf16_diff);
    }
    return 0;
  });
}
