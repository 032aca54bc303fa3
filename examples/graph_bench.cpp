// Per-node scheduling overhead of the dataflow executor: a chain of trivial nodes (each adds
// one to an int) and a wide fan-out/fan-in graph (one input read by `width` trivial nodes
// whose results one node sums). Times are per node firing: wall time / (invocations x nodes),
// pipelined (max_in_flight invocations in flight) and one invocation at a time.
//   graph_bench [--nodes 1000] [--width 1000] [--invocations 50] [--max-in-flight 8] [--json]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>

#include "actors/runtime.h"
#include "dataflow/executor.h"
#include "examples/command_line.h"
#include "examples/json_line.h"
#include "examples/run_example.h"

using namespace troupe;

namespace {

Graph chain(int nodes) {
  Graph g("chain");
  Port v = g.input("x");
  for (int i = 0; i < nodes; ++i) v = g.call("inc_" + std::to_string(i), [](const int& x) { return x + 1; }, {v});
  g.output("y", v);
  return g;
}

Graph fan(int width) {
  Graph g("fan");
  Port x = g.input("x");
  std::vector<Port> leaves;
  for (int i = 0; i < width; ++i)
    leaves.push_back(g.call("leaf_" + std::to_string(i), [i](const int& v) { return v + i; }, {x}));
  g.output("y", g.call_values("sum", [](const std::vector<Value>& in) {
    long total = 0;
    for (const auto& v : in) total += v.get<int>();
    return std::vector<Value>{Value(total)};
  }, leaves));
  return g;
}

// Seconds for `invocations` runs, all submitted before any is awaited (the executor's bound
// applies), or each awaited before the next when one_at_a_time.
double run_seconds(Executor& exec, int invocations, bool one_at_a_time, long& last) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<Invocation> runs;
  for (int k = 0; k < invocations; ++k) {
    runs.push_back(exec.run({{"x", k}}));
    if (one_at_a_time) runs.back().future("y").wait();
  }
  for (auto& r : runs) {
    Value v = r.get("y");
    last = v.is<int>() ? v.get<int>() : v.get<long>();
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double best_us_per_node(Executor& exec, int invocations, int nodes, bool one_at_a_time, int reps, long& last) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) best = std::min(best, run_seconds(exec, invocations, one_at_a_time, last));
  return best / (static_cast<double>(invocations) * nodes) * 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  cli::App app{"Dataflow executor: per-node scheduling overhead"};
  int nodes = 1000, width = 1000, invocations = 50, max_in_flight = 8, workers = 0, reps = 3;
  bool json = false;
  app.add_option("--nodes", nodes, "chain length")->check(cli::PositiveNumber);
  app.add_option("--width", width, "fan-out width")->check(cli::PositiveNumber);
  app.add_option("--invocations", invocations, "invocations per measurement")->check(cli::PositiveNumber);
  app.add_option("--max-in-flight", max_in_flight, "pipelining bound")->check(cli::PositiveNumber);
  app.add_option("--workers", workers, "scheduler threads (0: the cores)")->check(cli::NonNegativeNumber);
  app.add_option("--reps", reps, "measurements (best reported)")->check(cli::PositiveNumber);
  app.add_flag("--json", json, "print one JSON line");
  TROUPE_PARSE_COMMAND_LINE(app, argc, argv);

  return run_example("graph_bench", [&] {
    Runtime runtime({.workers = workers});
    long last = 0;
    double chain_us, chain_serial_us, fan_us, fan_serial_us;
    {
      Executor exec(chain(nodes), {.max_in_flight = max_in_flight});
      best_us_per_node(exec, 2, nodes, false, 1, last);  // warm up: actors scheduled once
      chain_us = best_us_per_node(exec, invocations, nodes, false, reps, last);
      if (last != invocations - 1 + nodes) throw ValueError("chain computed " + std::to_string(last));
      chain_serial_us = best_us_per_node(exec, invocations, nodes, true, reps, last);
    }
    {
      Executor exec(fan(width), {.max_in_flight = max_in_flight});
      const int fan_nodes = width + 1;
      best_us_per_node(exec, 2, fan_nodes, false, 1, last);
      fan_us = best_us_per_node(exec, invocations, fan_nodes, false, reps, last);
      const long expected = static_cast<long>(width) * (invocations - 1) + static_cast<long>(width) * (width - 1) / 2;
      if (last != expected) throw ValueError("fan computed " + std::to_string(last));
      fan_serial_us = best_us_per_node(exec, invocations, fan_nodes, true, reps, last);
    }
    if (json) {
      print_json_line(nlohmann::ordered_json{{"chain_node_us", rounded(chain_us, 3)},
                                             {"fanout_node_us", rounded(fan_us, 3)},
                                             {"chain_one_at_a_time_node_us", rounded(chain_serial_us, 3)},
                                             {"fanout_one_at_a_time_node_us", rounded(fan_serial_us, 3)},
                                             {"nodes", nodes},
                                             {"width", width},
                                             {"invocations", invocations},
                                             {"max_in_flight", max_in_flight},
                                             {"workers", runtime.workers()}});
    } else {
      std::printf("dataflow executor, %s\n", runtime.describe().c_str());
      std::printf("  chain of %d nodes:      %.2f us/node pipelined (%d in flight), %.2f us/node one at a time\n",
                  nodes, chain_us, max_in_flight, chain_serial_us);
      std::printf("  fan-out/in of %d nodes: %.2f us/node pipelined, %.2f us/node one at a time\n", width + 1, fan_us,
                  fan_serial_us);
    }
    return 0;
  });
}
