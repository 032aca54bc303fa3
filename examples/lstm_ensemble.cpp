// The LSTM ensemble of PyTorch's tutorial "Dynamic Parallelism in TorchScript" on Troupe's actors:
// (a) serial, (b) each model forks its forward direction, (c) ensemble members forked into
// their module actors with directions forked too. Checks the three agree; prints medians.
// With --device cuda the weights live on the GPU and each member is a GPU actor with its own
// stream, so (c)'s members overlap on the device; times run until the device is done, and the
// host syncs counted during one (c) call are printed beside (0 expected: results stay there).
// --step-kernel and --step-loop: how the CUDA lstm runs its recurrent steps
// (devices/lstm_step_loop.h): a cuBLAS GEMM and a gate kernel each (default) or one fused kernel,
// as one CUDA graph where it can (default; the members' lanes) or launched one by one; the JSON
// line names both and counts how many of (c)'s step loops ran each way.
//   lstm_ensemble [--models 4] [--T 50 --B 50 --C 1024] [--reps 3] [--device cpu|cuda]
//                 [--step-kernel gemm|fused] [--step-loop graph|launches] [--trace out.json] [--json]
#include <algorithm>
#include <cstdio>

#include "actors/observe/profiler.h"
#include "actors/runtime.h"
#include "devices/lstm_step_loop.h"
#include "devices/sync.h"
#include "examples/command_line.h"
#include "examples/cpu_kernels.h"
#include "examples/device_option.h"
#include "examples/json_line.h"
#include "examples/lstm_example.h"
#include "examples/median_time.h"
#include "examples/page_faults.h"
#include "examples/run_example.h"
#include "models/lstm.h"

using namespace troupe;

int main(int argc, char** argv) {
  cli::App app{"The TorchScript tutorial's LSTM ensemble: serial vs fork/wait on actors"};
  LstmOptions o{.C = 1024};
  int workers = 0;
  std::string trace;
  std::string device_name = "cpu", step_kernel = name(lstm_step_kernel()), step_loop = name(lstm_step_loop());
  add_lstm_options(app, o);
  app.add_option("--step-kernel", step_kernel, "the CUDA lstm's step: gemm (cuBLAS and a gate kernel) or fused")
      ->check(cli::IsMember({"gemm", "fused"}));
  app.add_option("--step-loop", step_loop, "the CUDA lstm's recurrent steps: graph or launches")
      ->check(cli::IsMember({"graph", "launches"}));
  app.add_option("--workers", workers, "worker actors (0: the cores)")->check(cli::NonNegativeNumber);
  app.add_option("--trace", trace, "write a Chrome trace of one fork_ensemble run");
  add_device_option(app, device_name);
  TROUPE_PARSE_COMMAND_LINE(app, argc, argv);
  const auto [models, T, B, C, reps, json] = o;

  return run_example("lstm_ensemble", [&] {
    const Device device = example_device(device_name);
    set_lstm_step_kernel(parse_lstm_step_kernel(step_kernel));
    set_lstm_step_loop(parse_lstm_step_loop(step_loop));
    Runtime runtime({.workers = workers});
    models::LSTMEnsemble ensemble(models, C, C, /*seed=*/0, device);
    const Tensor x = lstm_input(o, 1).to(device);

    Tensor a = ensemble.serial(x), b = ensemble.fork_directions(x), c = ensemble.fork_members(x);  // warm up
    const double diff = std::max(max_abs_diff(a, b), max_abs_diff(a, c));
    const double serial_s = median_seconds([&] { ensemble.serial(x); finish(device); }, reps);
    const double bidir_s = median_seconds([&] { ensemble.fork_directions(x); finish(device); }, reps);
    const double ensemble_s = median_seconds([&] { ensemble.fork_members(x); finish(device); }, reps);
    reset_sync_counts();
    reset_lstm_step_loop_counts();
    const long faults_before = minor_page_faults();
    ensemble.fork_members(x);
    const uint64_t ensemble_syncs = sync_count();
    const long ensemble_faults = minor_page_faults() - faults_before;
    const LstmStepLoopCounts ensemble_loops = lstm_step_loop_counts();
    finish(device);
    if (!trace.empty()) {
      Profiler::global().start();
      ensemble.fork_members(x);
      Profiler::global().stop();
      Profiler::global().export_chrome_trace(trace);
    }
    const double gflop = models * 2.0 * (2.0 * T * B * C * 4 * C * 2) / 1e9;  // input + recurrent GEMMs
    if (json) {
      print_json_line(with_cpu_kernels(nlohmann::ordered_json{{"device", device.str()},
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
                                             {"fork_ensemble_syncs", ensemble_syncs},
                                             {"fork_ensemble_page_faults", ensemble_faults},
                                             {"step_kernel", step_kernel},
                                             {"step_loop", step_loop},
                                             {"fork_ensemble_graph_step_loops", ensemble_loops.graph},
                                             {"fork_ensemble_launched_step_loops", ensemble_loops.launches}}));
    } else {
      std::printf("LSTM ensemble: %d bidirectional models, T=%lld B=%lld C=%lld (%.0f GFLOP) on %s, %s\n", models,
                  static_cast<long long>(T), static_cast<long long>(B), static_cast<long long>(C), gflop,
                  device.str().c_str(), runtime.describe().c_str());
      std::printf("  serial          %.3f s\n  fork directions %.3f s  (%.0f%% faster)\n"
                  "  fork ensemble   %.3f s  (%.0f%% faster, %.0f GFLOP/s)\n  max |diff| %.3g\n",
                  serial_s, bidir_s, (1 - bidir_s / serial_s) * 100, ensemble_s, (1 - ensemble_s / serial_s) * 100,
                  gflop / ensemble_s, diff);
      if (!device.is_cpu()) {
        std::printf("  host syncs in one fork ensemble call: %llu\n", static_cast<unsigned long long>(ensemble_syncs));
        std::printf("  its step loops (--step-kernel %s --step-loop %s): %llu as CUDA graphs, %llu launched step by step\n",
                    step_kernel.c_str(), step_loop.c_str(), static_cast<unsigned long long>(ensemble_loops.graph),
                    static_cast<unsigned long long>(ensemble_loops.launches));
      }
      if (!trace.empty()) std::printf("  trace: %s\n", trace.c_str());
    }
    return diff < 1e-3 ? 0 : 1;
  });
}
