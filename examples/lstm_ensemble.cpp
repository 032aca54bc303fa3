// The LSTM ensemble of PyTorch's tutorial "Dynamic Parallelism in TorchScript" on Troupe's actors:
// (a) serial, (b) each model forks its forward direction, (c) ensemble members forked into
// their module actors with directions forked too. Checks the three agree; prints medians.
// With --device cuda the weights live on the GPU and each member is a GPU actor with its own
// stream, so (c)'s members overlap on the device; times run until the device is done, and the
// host syncs counted during one (c) call are printed beside (0 expected: results stay there).
//   lstm_ensemble [--models 4] [--T 50 --B 50 --C 1024] [--reps 3] [--device cpu|cuda] [--trace out.json] [--json]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include "actors/profiler.h"
#include "actors/runtime.h"
#include "devices/sync.h"
#include "examples/device_option.h"
#include "examples/median_time.h"
#include "models/lstm.h"
#include "examples/json_line.h"
#include "examples/run_example.h"

using namespace troupe;

namespace {

Tensor random_input(int64_t T, int64_t B, int64_t C, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(0.0f, 1.0f);  // torch.rand, as the TorchScript fork/wait tutorial
  std::vector<float> v(static_cast<size_t>(T * B * C));
  for (auto& x : v) x = dist(rng);
  return Tensor::from_vector(v, {T, B, C});
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  auto x = a.to_vector<float>(), y = b.to_vector<float>();
  double d = 0;
  for (size_t i = 0; i < x.size(); ++i) d = std::max(d, static_cast<double>(std::abs(x[i] - y[i])));
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"The TorchScript tutorial's LSTM ensemble: serial vs fork/wait on actors"};
  int models = 4, reps = 3, workers = 0;
  int64_t T = 50, B = 50, C = 1024;
  std::string trace;
  std::string device_name = "cpu";
  bool json = false;
  app.add_option("--models", models, "ensemble members")->check(CLI::PositiveNumber);
  app.add_option("--T", T, "time steps")->check(CLI::PositiveNumber);
  app.add_option("--B", B, "batch")->check(CLI::PositiveNumber);
  app.add_option("--C", C, "input and hidden size")->check(CLI::PositiveNumber);
  app.add_option("--reps", reps, "timed runs per variant (median reported)")->check(CLI::PositiveNumber);
  app.add_option("--workers", workers, "worker actors (0: the cores)")->check(CLI::NonNegativeNumber);
  app.add_option("--trace", trace, "write a Chrome trace of one fork_ensemble run");
  add_device_option(app, device_name);
  app.add_flag("--json", json, "print one JSON line of figures");
  CLI11_PARSE(app, argc, argv);

  return run_example("lstm_ensemble", [&] {
    const Device device = example_device(device_name);
    Runtime runtime({.workers = workers});
    models::LSTMEnsemble ensemble(models, C, C, /*seed=*/0, device);
    const Tensor x = random_input(T, B, C, 1).to(device);

    Tensor a = ensemble.serial(x), b = ensemble.fork_directions(x), c = ensemble.fork_members(x);  // warm up
    const double diff = std::max(max_abs_diff(a, b), max_abs_diff(a, c));
    const double serial_s = median_seconds([&] { ensemble.serial(x); finish(device); }, reps);
    const double bidir_s = median_seconds([&] { ensemble.fork_directions(x); finish(device); }, reps);
    const double ensemble_s = median_seconds([&] { ensemble.fork_members(x); finish(device); }, reps);
    reset_sync_counts();
    ensemble.fork_members(x);
    const uint64_t ensemble_syncs = sync_count();
    finish(device);
    if (!trace.empty()) {
      Profiler::global().start();
      ensemble.fork_members(x);
      Profiler::global().stop();
      Profiler::global().export_chrome_trace(trace);
    }
    const double gflop = models * 2.0 * (2.0 * T * B * C * 4 * C * 2) / 1e9;  // input + recurrent GEMMs
    if (json) {
      print_json_line(nlohmann::ordered_json{{"device", device.str()},
                                             {"models", models},
                                             {"T", T},
                                             {"B", B},
                                             {"C", C},
                                             {"serial_s", rounded(serial_s, 4)},
                                             {"fork_bidir_s", rounded(bidir_s, 4)},
                                             {"fork_ensemble_s", rounded(ensemble_s, 4)},
                                             {"max_abs_diff", significant(diff, 3)},
                                             {"gflop", rounded(gflop, 1)},
                                             {"best_gflops", rounded(gflop / std::min({serial_s, bidir_s, ensemble_s}), 1)},
                                             {"fork_ensemble_syncs", ensemble_syncs}});
    } else {
      std::printf("LSTM ensemble: %d bidirectional models, T=%lld B=%lld C=%lld (%.0f GFLOP) on %s, %s\n", models,
                  static_cast<long long>(T), static_cast<long long>(B), static_cast<long long>(C), gflop,
                  device.str().c_str(), runtime.describe().c_str());
      std::printf("  serial          %.3f s\n  fork directions %.3f s  (%.0f%% faster)\n"
                  "  fork ensemble   %.3f s  (%.0f%% faster, %.0f GFLOP/s)\n  max |diff| %.3g\n",
                  serial_s, bidir_s, (1 - bidir_s / serial_s) * 100, ensemble_s, (1 - ensemble_s / serial_s) * 100,
                  gflop / ensemble_s, diff);
      if (!device.is_cpu()) std::printf("  host syncs in one fork ensemble call: %llu\n", static_cast<unsigned long long>(ensemble_syncs));
      if (!trace.empty()) std::printf("  trace: %s\n", trace.c_str());
    }
    return diff < 1e-3 ? 0 : 1;
  });
}
