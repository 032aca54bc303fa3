// packed_attention alone on the XLM-R serving batch's lengths: 64 sentences of 5..250 tokens, the
// lengths xlmr_bench and xlmr_bench_torch.py draw (the same LCG and seed), packed back to back as
// the encoder's fastpath packs them, heads of 64 columns (base: 12 heads, d 768; large: 16 heads,
// d 1024), random qkv, in f32 and bf16. Medians of batches of calls queued back to back, one wait
// per batch (the device's time per call). The peer: examples/attention_torch.py (PyTorch's
// FlashAttention varlen and memory-efficient kernels on the same lengths).
//   attention_bench [--model base|large] [--sentences 64] [--reps 20] [--device cpu|cuda] [--json]
#include <cstdio>

#include "devices/ops.h"
#include "devices/random.h"
#include "examples/command_line.h"
#include "examples/cpu_kernels.h"
#include "examples/device_option.h"
#include "examples/json_line.h"
#include "examples/median_time.h"
#include "examples/run_example.h"

using namespace troupe;

namespace {

// Knuth's MMIX LCG, seeded and stepped as xlmr_bench's serving_batch draws its lengths first.
std::vector<int64_t> serving_lengths(int64_t sentences) {
  uint64_t state = 1234;
  std::vector<int64_t> lengths;
  for (int64_t i = 0; i < sentences; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    lengths.push_back(5 + static_cast<int64_t>((state >> 33) % 246));
  }
  return lengths;
}

}  // namespace

int main(int argc, char** argv) {
  cli::App app{"packed_attention on the XLM-R serving batch's lengths, f32 and bf16"};
  std::string model = "base", device_name = "cpu";
  int64_t sentences = 64;
  int reps = 20;
  bool json = false;
  app.add_option("--model", model, "XLM-R base (12 heads, d 768) or large (16 heads, d 1024)")
      ->check(cli::IsMember({"base", "large"}))
      ->capture_default_str();
  app.add_option("--sentences", sentences, "sentences in the batch")->check(cli::PositiveNumber)->capture_default_str();
  app.add_option("--reps", reps, "timed batches of calls")->check(cli::PositiveNumber)->capture_default_str();
  add_device_option(app, device_name);
  app.add_flag("--json", json, "print one JSON line of figures");
  TROUPE_PARSE_COMMAND_LINE(app, argc, argv);

  return run_example("attention_bench", [&] {
    const Device device = example_device(device_name);
    const int64_t heads = model == "base" ? 12 : 16, d = 64 * heads;
    const std::vector<int64_t> lengths = serving_lengths(sentences);
    std::vector<int64_t> offsets{0};
    double flops = 0;  // q k^T and weights v: 2 L^2 d each
    for (int64_t L : lengths) {
      offsets.push_back(offsets.back() + L);
      flops += 4.0 * double(L) * double(L) * double(d);
    }
    const int64_t rows = offsets.back();
    Generator generator(0);
    const Tensor qkv32 = rand_uniform({rows, 3 * d}, -2, 2, DType::f32, generator).to(device);
    const Tensor qkv16 = qkv32.to(DType::bf16);
    const Tensor starts = Tensor::from_vector<int64_t>(offsets, {int64_t(offsets.size())}).to(device);
    finish(device);

    constexpr int kBatch = 10;
    auto per_call = [&](const Tensor& qkv) {
      return median_seconds([&] { for (int i = 0; i < kBatch; ++i) packed_attention(qkv, starts, heads); finish(device); },
                            reps, 2) / kBatch;
    };
    const double f32_s = per_call(qkv32), bf16_s = per_call(qkv16);
    // bf16's distance from f32 (the same values but rounded): a check that the fast path computes.
    const Tensor f32_out = packed_attention(qkv32, starts, heads).to(Device::cpu());
    const Tensor bf16_out = packed_attention(qkv16, starts, heads).to(Device::cpu()).to(DType::f32);
    const double diff = max(abs(sub(bf16_out, f32_out))).item<float>();
    if (json) {
      print_json_line(with_cpu_kernels(nlohmann::ordered_json{{"device", device.str()},
                                                              {"model", model},
                                                              {"sentences", sentences},
                                                              {"tokens", rows},
                                                              {"heads", heads},
                                                              {"d", d},
                                                              {"f32_us", rounded(f32_s * 1e6, 1)},
                                                              {"bf16_us", rounded(bf16_s * 1e6, 1)},
                                                              {"f32_tflops", significant(flops / f32_s / 1e12, 3)},
                                                              {"bf16_tflops", significant(flops / bf16_s / 1e12, 3)},
                                                              {"bf16_max_abs_diff", significant(diff, 3)}}));
    } else {
      std::printf("packed_attention, XLM-R %s (%lld heads, d %lld), %lld sentences, %lld tokens on %s:\n",
                  model.c_str(), static_cast<long long>(heads), static_cast<long long>(d),
                  static_cast<long long>(sentences), static_cast<long long>(rows), device.str().c_str());
      std::printf("  f32 %.1f us (%.2f TFLOP/s), bf16 %.1f us (%.2f TFLOP/s), bf16 - f32 at most %.3g\n", f32_s * 1e6,
                  flops / f32_s / 1e12, bf16_s * 1e6, flops / bf16_s / 1e12, diff);
    }
    return 0;
  });
}
