// train_bench: what training costs on one core. The distributed tutorial's Net with a batch of 64: a training step
// (zero_grad, forward, nll_loss, backward, SGD with momentum) and an inference forward, median
// milliseconds; and the tape's cost on a small op (add of two f32[16]): inputs that do not require
// grad, the same under NoGradGuard with inputs that do, and recorded. --torch runs the PyTorch peer
// (examples/net_step_torch.py, by $TROUPE_PYTHON or /usr/bin/python3) in the same run and adds its
// figures and the ratios. --device cuda runs the Net's step and forward on the GPU (each timed until
// the device is done; the peer too); the small-op figures stay on the cpu, where the tape's cost shows.
//
//   train_bench                # table
//   train_bench --torch --json # one JSON line, with PyTorch's figures
//   train_bench --device cuda --torch --json
#include <array>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "devices/autograd/grad_mode.h"
#include "devices/ops.h"
#include "devices/random.h"
#include "devices/threads.h"
#include "models/nn/net.h"
#include "models/nn/optimizer.h"
#include "examples/command_line.h"
#include "examples/cpu_kernels.h"
#include "examples/device_option.h"
#include "examples/json_line.h"
#include "examples/median_time.h"
#include "examples/run_example.h"

using namespace troupe;
using namespace troupe::models;

namespace {

double median_ms(const std::function<void()>& fn, int runs) { return median_seconds(fn, runs, /*warmups=*/3) * 1e3; }

double per_call_ns(const std::function<void()>& fn, int calls = 20000) {
  return median_ms([&] { for (int i = 0; i < calls; ++i) fn(); }, 5) * 1e6 / calls;
}

nlohmann::json run_torch(int steps, const Device& device) {
  // TROUPE_PYTHON: an interpreter of one's own (a GPU machine's torch may live in another python).
  const char* python = std::getenv("TROUPE_PYTHON");
  const std::string command = std::string(python ? python : "/usr/bin/python3") +
                              " " TROUPE_EXAMPLES_DIR "/net_step_torch.py " + std::to_string(steps) +
                              " --device " + (device.is_cpu() ? "cpu" : "cuda:" + std::to_string(device.index));
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  if (!pipe) throw std::runtime_error("could not run " + command);
  std::string output;
  std::array<char, 512> buffer;
  while (fgets(buffer.data(), buffer.size(), pipe.get())) output += buffer.data();
  return nlohmann::json::parse(output);
}

}  // namespace

int main(int argc, char** argv) {
  cli::App app{"train_bench: the Net's training step and the tape's per-op cost, one thread"};
  bool json = false, torch = false;
  int steps = 60;
  std::string device_name = "cpu";
  app.add_flag("--json", json, "one JSON line");
  app.add_flag("--torch", torch, "also run the PyTorch peer (examples/net_step_torch.py)");
  app.add_option("--steps", steps, "timed steps")->check(cli::PositiveNumber);
  add_device_option(app, device_name);
  TROUPE_PARSE_COMMAND_LINE(app, argc, argv);

  return run_example("train_bench", [&] {
    const Device device = example_device(device_name);
    set_intra_op_threads(1);
    manual_seed(1);
    Net net;
    net.to(device);
    SGD sgd(net.parameters(), {.lr = 0.01, .momentum = 0.5});  // after to(): its state lives with the parameters
    const Tensor x = rand_uniform({64, 1, 28, 28}, -1, 1).to(device);
    std::vector<int64_t> labels(64);
    for (int64_t i = 0; i < 64; ++i) labels[i] = i % 10;
    const Tensor y = Tensor::from_vector<int64_t>(labels, {64}).to(device);

    nlohmann::json result;
    result["device"] = device.str();
    result["step_ms"] = median_ms([&] {
      sgd.zero_grad();
      nll_loss(net(x), y).backward();
      sgd.step();
      finish(device);
    }, steps);
    net.eval();
    result["forward_ms"] = median_ms([&] {
      NoGradGuard no_grad;
      net(x);
      finish(device);
    }, steps);
    net.train();

    const Tensor a = rand_uniform({16}, 0, 1), b = rand_uniform({16}, 0, 1);
    Tensor ga = a.clone().set_requires_grad(), gb = b.clone().set_requires_grad();
    result["add16_ns"] = per_call_ns([&] { add(a, b); });
    result["add16_no_grad_guard_ns"] = per_call_ns([&] {
      NoGradGuard no_grad;
      add(ga, gb);
    });
    result["add16_taped_ns"] = per_call_ns([&] { add(ga, gb); });
    if (torch) {
      const nlohmann::json peer = run_torch(steps, device);
      result["torch"] = peer;
      result["step_ratio"] = result["step_ms"].get<double>() / peer["step_ms"].get<double>();
      result["forward_ratio"] = result["forward_ms"].get<double>() / peer["forward_ms"].get<double>();
    }
    if (json) {
      print_json_line(with_cpu_kernels(result));
      return 0;
    }
    std::printf("%-44s %10s %10s\n", ("one thread, Net batch 64 on " + device.str()).c_str(), "troupe", torch ? "pytorch" : "");
    auto row = [&](const char* label, const char* key, const char* torch_key, const char* unit) {
      std::printf("%-44s %8.3f %s", label, result[key].get<double>(), unit);
      if (torch && torch_key) std::printf(" %8.3f %s", result["torch"][torch_key].get<double>(), unit);
      std::printf("\n");
    };
    row("training step (forward, backward, SGD)", "step_ms", "step_ms", "ms");
    row("inference forward", "forward_ms", "forward_ms", "ms");
    row("add f32[16], no input requires grad", "add16_ns", "add16_ns", "ns");
    row("add f32[16], requires grad, NoGradGuard", "add16_no_grad_guard_ns", nullptr, "ns");
    row("add f32[16], recorded on the tape", "add16_taped_ns", "add16_taped_ns", "ns");
    return 0;
  });
}
