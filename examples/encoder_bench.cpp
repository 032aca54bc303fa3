// PyTorch's Better Transformer tutorial runs on an XLM-R-large-shaped encoder (d 1024, 16 heads, ffn 4096,
// post-LN, gelu, batch first) over a padded batch of lengths 4, 5 and 250: the general path in
// training mode, the fastpath over every padded position, the fastpath over real tokens only.
// With --dtype bf16 the two fastpaths run again with their GEMMs in bf16 (set_fastpath_dtype):
// their times, the speed-up over f32 and the largest difference from the f32 result. With --device
// cuda the encoder and the batch live on the GPU (the padding mask stays on the host, where the
// fastpaths read it) and each time runs until the device is done.
// --profile: one more nested run under the profiler, its op table on stderr.
//   encoder_bench [--layers 24] [--lengths 4,5,250] [--reps 3] [--dtype f32|bf16] [--device cpu|cuda] [--profile] [--json]
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "actors/observe/profiler.h"
#include "devices/autograd/grad_mode.h"
#include "devices/ops.h"
#include "devices/random.h"
#include "examples/command_line.h"
#include "examples/cpu_kernels.h"
#include "examples/device_option.h"
#include "examples/median_time.h"
#include "examples/page_faults.h"
#include "examples/json_line.h"
#include "examples/run_example.h"
#include "models/transformer/encoder.h"

using namespace troupe;
using namespace troupe::models;

int main(int argc, char** argv) {
  int layers = 24, reps = 3;
  std::vector<int64_t> lengths = {4, 5, 250};
  bool json = false, profile = false;
  std::string dtype = "f32", device_name = "cpu";
  cli::App app{"Transformer encoder: general path, fastpath dense, fastpath nested"};
  app.add_option("--layers", layers, "encoder layers")->check(cli::PositiveNumber);
  app.add_option("--lengths", lengths, "sequence lengths of the batch")->delimiter(',');
  app.add_option("--reps", reps, "timed runs (median reported)")->check(cli::PositiveNumber);
  app.add_option("--dtype", dtype, "also time the fastpaths with bf16 GEMMs")->check(cli::IsMember({"f32", "bf16"}));
  add_device_option(app, device_name);
  app.add_flag("--profile", profile, "one more nested run profiled: its op table on stderr");
  app.add_flag("--json", json, "one JSON line of figures");
  TROUPE_PARSE_COMMAND_LINE(app, argc, argv);
  return run_example("encoder_bench", [&] {
    const Device device = example_device(device_name);
    const int64_t d = 1024, ffn = 4096, B = static_cast<int64_t>(lengths.size());
    const int64_t S = *std::max_element(lengths.begin(), lengths.end());
    manual_seed(0);
    TransformerEncoder encoder({.d_model = d, .nhead = 16, .dim_feedforward = ffn, .dropout = 0.1, .activation = "gelu",
                                .batch_first = true},
                               layers);
    encoder.to(device);
    const Tensor x = rand_uniform({B, S, d}, 0, 1).to(device);
    std::vector<bool> pad;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t s = 0; s < S; ++s) pad.push_back(s >= lengths[static_cast<size_t>(b)]);
    const Tensor mask = Tensor::from_vector(pad, {B, S});

    // Two warm-ups per path: linear packs a weight on its second use.
    encoder.train();
    const double slow = median_seconds([&] { encoder(x, mask); finish(device); }, reps, 2);
    encoder.eval();
    NoGradGuard no_grad;
    encoder.set_nested(false);
    Tensor dense;
    const double fast_dense = median_seconds([&] { dense = encoder(x, mask); finish(device); }, reps, 2);
    encoder.set_nested(true);
    Tensor nested;
    const double fast_nested = median_seconds([&] { nested = encoder(x, mask); finish(device); }, reps, 2);
    const long faults_before = minor_page_faults();
    nested = encoder(x, mask);
    finish(device);
    const long nested_faults = minor_page_faults() - faults_before;
    if (profile) {
      Profiler& profiler = Profiler::global();
      profiler.start();
      encoder(x, mask);
      finish(device);
      profiler.stop();
      std::fprintf(stderr, "encoder_bench: one nested run, ops by host time\n%s", profiler.table(30).c_str());
    }
    double dense_bf16 = 0, nested_bf16 = 0, max_diff_bf16 = 0;
    if (dtype == "bf16") {
      encoder.set_fastpath_dtype(DType::bf16);
      encoder.set_nested(false);
      Tensor dense16, nested16;
      dense_bf16 = median_seconds([&] { dense16 = encoder(x, mask); finish(device); }, reps, 1);
      encoder.set_nested(true);
      nested_bf16 = median_seconds([&] { nested16 = encoder(x, mask); finish(device); }, reps, 1);
      encoder.set_fastpath_dtype(DType::f32);
      for (int64_t b = 0; b < B; ++b) {
        const int64_t L = lengths[static_cast<size_t>(b)];
        const Tensor ref = nested.select(0, b).slice(0, 0, L);
        max_diff_bf16 = std::max({max_diff_bf16, max(abs(sub(dense16.select(0, b).slice(0, 0, L), ref))).item<double>(),
                                  max(abs(sub(nested16.select(0, b).slice(0, 0, L), ref))).item<double>()});
      }
    }
    encoder.set_fastpath(false);
    const Tensor general = encoder(x, mask);  // eval mode, the general path: the reference

    double max_diff = 0;
    for (int64_t b = 0; b < B; ++b) {
      const int64_t L = lengths[static_cast<size_t>(b)];
      const Tensor ref = general.select(0, b).slice(0, 0, L);
      max_diff = std::max({max_diff, max(abs(sub(dense.select(0, b).slice(0, 0, L), ref))).item<double>(),
                           max(abs(sub(nested.select(0, b).slice(0, 0, L), ref))).item<double>()});
    }
    int64_t tokens = 0;
    for (int64_t L : lengths) tokens += L;
    // Real work: per token 2*(4 d^2 + 2 d ffn) for the projections, plus attention 4 L d per token.
    double flop = 0;
    for (int64_t L : lengths) flop += static_cast<double>(L) * (2.0 * (4 * d * d + 2 * d * ffn) + 4.0 * L * d);
    flop *= layers;
    if (json) {
      nlohmann::ordered_json line{{"device", device.str()},
                                  {"layers", layers},
                                  {"tokens", tokens},
                                  {"slow_ms", rounded(slow * 1e3, 1)},
                                  {"fast_dense_ms", rounded(fast_dense * 1e3, 1)},
                                  {"fast_nested_ms", rounded(fast_nested * 1e3, 1)},
                                  {"nested_page_faults", nested_faults},
                                  {"max_abs_diff", significant(max_diff, 3)},
                                  {"gflops_nested", rounded(flop / fast_nested / 1e9, 1)}};
      if (dtype == "bf16") {
        line["bf16_dense_ms"] = rounded(dense_bf16 * 1e3, 1);
        line["bf16_nested_ms"] = rounded(nested_bf16 * 1e3, 1);
        line["bf16_speedup_nested"] = rounded(fast_nested / nested_bf16, 2);
        line["bf16_max_abs_diff"] = significant(max_diff_bf16, 3);
      }
      print_json_line(with_cpu_kernels(line));
    } else {
      std::printf("encoder on %s: %d layers, d %lld, 16 heads, ffn %lld, batch of %lld padded to %lld (%lld real tokens)\n",
                  device.str().c_str(), layers, static_cast<long long>(d), static_cast<long long>(ffn), static_cast<long long>(B),
                  static_cast<long long>(S), static_cast<long long>(tokens));
      std::printf("  general path (train mode, tape)  %8.1f ms\n", slow * 1e3);
      std::printf("  fastpath, dense (padding computed) %6.1f ms\n", fast_dense * 1e3);
      std::printf("  fastpath, nested (real tokens)   %8.1f ms  %.1f GFLOP/s\n", fast_nested * 1e3, flop / fast_nested / 1e9);
      std::printf("  max |fastpath - general| on real tokens: %.3g\n", max_diff);
      if (dtype == "bf16") {
        std::printf("  bf16 fastpath, dense              %8.1f ms\n", dense_bf16 * 1e3);
        std::printf("  bf16 fastpath, nested            %8.1f ms  %.2fx the f32 nested fastpath\n", nested_bf16 * 1e3,
                    fast_nested / nested_bf16);
        std::printf("  max |bf16 - f32 fastpath| on real tokens: %.3g\n", max_diff_bf16);
      }
    }
    return 0;
  });
}
