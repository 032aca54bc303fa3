// The LSTM ensemble of the TorchScript fork/wait tutorial written as a dataflow graph: every direction of every member is a
// module node (its own actor, holding its weights), the flips, concatenations and the final
// stack+sum are op nodes. Checks the graph against LSTMEnsemble::serial and times both.
//   graph_lstm [--models 4] [--T 50 --B 50 --C 256] [--reps 3] [--dot graph.dot] [--json]
#include <cstdio>
#include <fstream>

#include "actors/runtime.h"
#include "dataflow/executor.h"
#include "examples/command_line.h"
#include "examples/json_line.h"
#include "examples/lstm_example.h"
#include "examples/median_time.h"
#include "examples/run_example.h"
#include "models/lstm.h"

using namespace troupe;

int main(int argc, char** argv) {
  cli::App app{"The LSTM ensemble as a dataflow graph, against the serial ensemble"};
  LstmOptions o;
  int workers = 0;
  std::string dot;
  add_lstm_options(app, o);
  app.add_option("--workers", workers, "scheduler threads (0: the cores)")->check(cli::NonNegativeNumber);
  app.add_option("--dot", dot, "write the graph as Graphviz DOT");
  TROUPE_PARSE_COMMAND_LINE(app, argc, argv);
  const auto [models, T, B, C, reps, json] = o;

  return run_example("graph_lstm", [&] {
    Runtime runtime({.workers = workers});
    // One set of weights for both: the ensemble's members, and the graph's direction modules.
    models::LSTMEnsemble ensemble(models, C, C);
    const auto state = ensemble.state_dict();

    std::vector<std::unique_ptr<ModuleActor<models::LSTM>>> directions;
    Graph g("lstm_ensemble");
    Port x = g.input("x", TensorMeta{DType::f32, {T, B, C}, Device::cpu()});
    const Attrs time_axis{{"dims", std::vector<int64_t>{0}}};
    Port x_reversed = g.op("flip", {x}, time_axis, "x_reversed");
    std::vector<Port> members;
    for (int i = 0; i < models; ++i) {
      const std::string m = "m" + std::to_string(i);
      const std::string prefix = "models." + std::to_string(i) + ".";
      auto& fwd = *directions.emplace_back(std::make_unique<ModuleActor<models::LSTM>>(m + ".fwd", C, C));
      auto& bwd = *directions.emplace_back(std::make_unique<ModuleActor<models::LSTM>>(m + ".bwd", C, C));
      fwd->load(models::sub_state(state, prefix + "cell_f."));
      bwd->load(models::sub_state(state, prefix + "cell_b."));
      Port out_f = g.module(m + "_fwd", fwd, {x});
      Port out_b = g.op("flip", {g.module(m + "_bwd", bwd, {x_reversed})}, time_axis, m + "_bwd_flipped");
      members.push_back(g.op("cat", {out_f, out_b}, {{"dim", int64_t{2}}}, m));
    }
    Port stacked = g.op("stack", members, {{"dim", int64_t{0}}}, "stacked");
    g.output("y", g.op("sum", {stacked}, time_axis, "ensemble_sum"));
    if (!dot.empty()) std::ofstream(dot) << g.to_dot();

    Executor exec(g);
    Tensor xin = lstm_input(o, 1);
    Tensor serial = ensemble.serial(xin);
    Tensor graph = exec({{"x", xin}}).at("y").tensor();
    const double diff = max_abs_diff(serial, graph);
    const double serial_s = median_seconds([&] { ensemble.serial(xin); }, reps);
    const double graph_s = median_seconds([&] { exec({{"x", xin}}); }, reps);
    if (json) {
      print_json_line(nlohmann::ordered_json{{"models", models},
                                             {"T", T},
                                             {"B", B},
                                             {"C", C},
                                             {"serial_s", rounded(serial_s, 4)},
                                             {"graph_s", rounded(graph_s, 4)},
                                             {"max_abs_diff", significant(diff, 3)},
                                             {"node_actors", exec.node_actors()}});
    } else {
      std::printf("LSTM ensemble as a graph: %d bidirectional models, T=%lld B=%lld C=%lld, %d node actors, %s\n",
                  models, static_cast<long long>(T), static_cast<long long>(B), static_cast<long long>(C),
                  exec.node_actors(), runtime.describe().c_str());
      std::printf("  serial  %.3f s\n  graph   %.3f s  (%.0f%% faster)\n  max |graph - serial| %.3g\n", serial_s,
                  graph_s, (1 - graph_s / serial_s) * 100, diff);
      if (!dot.empty()) std::printf("  graph drawn to %s\n", dot.c_str());
    }
    return diff < 1e-3 ? 0 : 1;
  });
}
