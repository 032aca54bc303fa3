#include "devices/lstm_step_loop.h"

#include <atomic>
#include <cstdlib>

#include "devices/error.h"

namespace troupe {

namespace {

std::atomic<LstmStepLoop>& setting() {
  static std::atomic<LstmStepLoop> loop{[] {
    const char* env = std::getenv("TROUPE_LSTM_STEP_LOOP");
    return env && *env ? parse_lstm_step_loop(env) : LstmStepLoop::graph;
  }()};
  return loop;
}

std::atomic<LstmStepKernel>& kernel_setting() {
  static std::atomic<LstmStepKernel> kernel{[] {
    const char* env = std::getenv("TROUPE_LSTM_STEP_KERNEL");
    return env && *env ? parse_lstm_step_kernel(env) : LstmStepKernel::gemm;
  }()};
  return kernel;
}

std::atomic<uint64_t> launched{0}, graphed{0};

}  // namespace

const char* name(LstmStepKernel kernel) { return kernel == LstmStepKernel::fused ? "fused" : "gemm"; }

LstmStepKernel parse_lstm_step_kernel(const std::string& text) {
  if (text == "gemm") return LstmStepKernel::gemm;
  if (text == "fused") return LstmStepKernel::fused;
  throw ValueError("lstm step kernel (TROUPE_LSTM_STEP_KERNEL, --step-kernel): expected gemm or fused, got '" + text + "'");
}

LstmStepKernel lstm_step_kernel() { return kernel_setting().load(std::memory_order_relaxed); }

void set_lstm_step_kernel(LstmStepKernel kernel) { kernel_setting().store(kernel, std::memory_order_relaxed); }

const char* name(LstmStepLoop loop) { return loop == LstmStepLoop::graph ? "graph" : "launches"; }

LstmStepLoop parse_lstm_step_loop(const std::string& text) {
  if (text == "graph") return LstmStepLoop::graph;
  if (text == "launches") return LstmStepLoop::launches;
  throw ValueError("lstm step loop (TROUPE_LSTM_STEP_LOOP, --step-loop): expected graph or launches, got '" + text + "'");
}

LstmStepLoop lstm_step_loop() { return setting().load(std::memory_order_relaxed); }

void set_lstm_step_loop(LstmStepLoop loop) { setting().store(loop, std::memory_order_relaxed); }

LstmStepLoop choose_lstm_step_loop(LstmStepLoop loop, const LstmStepSite& site) {
  const bool capturable = site.steps >= 2 && site.own_stream && !site.capturing && site.shape_seen && !site.capture_failed;
  return loop == LstmStepLoop::graph && capturable ? LstmStepLoop::graph : LstmStepLoop::launches;
}

LstmStepLoopCounts lstm_step_loop_counts() {
  return {launched.load(std::memory_order_relaxed), graphed.load(std::memory_order_relaxed)};
}

void reset_lstm_step_loop_counts() {
  launched.store(0, std::memory_order_relaxed);
  graphed.store(0, std::memory_order_relaxed);
}

void count_lstm_step_loop(LstmStepLoop loop) {
  (loop == LstmStepLoop::graph ? graphed : launched).fetch_add(1, std::memory_order_relaxed);
}

}  // namespace troupe
