// A graph split across two ranks: rank 0 feeds requests and post-processes, rank 1 holds the
// model (op nodes placed there). Tensors cross as calls to the other rank's part of the executor,
// a remote actor (zero-copy tensor parts, tagged by invocation). Two cases: "split", an MLP whose
// first layer reads rank 0's value; "fan-out", four heads on rank 1 that all read it (one message
// carries it to all four). Rank 0 checks the answers against the same graph run in one process.
//   troupe launch --nproc 2 build/bin/graph_ranks [--requests 100] [--in-flight 8] [--json]
// (any launcher that sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT works too)
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "actors/runtime.h"
#include "dataflow/executor.h"
#include "devices/ops.h"
#include "devices/random.h"
#include "net/process_group.h"
#include "net/remote/remote_actor.h"
#include "examples/command_line.h"
#include "examples/json_line.h"
#include "examples/run_example.h"
#include "examples/split_mlp.h"

using namespace troupe;

namespace {

// Rank 0 normalises x and turns the logits z into classes; `model` makes z from the normalised x.
Graph around(const std::string& name, int64_t features, const std::function<Port(Graph&, Port)>& model) {
  Graph g(name);
  Port normed = g.op("layer_norm", {g.input("x")}, {{"normalized_shape", Shape{features}}}, "normalise");
  Port z = model(g, normed);
  g.output("classes", g.op("argmax", {g.op("softmax", {z}, {{"dim", int64_t{-1}}}, "probabilities")},
                           {{"dims", std::vector<int64_t>{-1}}}, "classes"));
  return g;
}

// model_rank: where the model's nodes run (0 puts everything in one process).
Graph split_graph(int model_rank, int64_t features, int64_t hidden) {
  return around("split_mlp", features,
                [&](Graph& g, Port normed) { return split_mlp_logits(g, normed, model_rank, features, hidden); });
}

// Four linear heads on model_rank read the same normalised x; their logits are summed there.
Graph fan_out_graph(int model_rank, int64_t features) {
  return around("fan_out", features, [&](Graph& g, Port normed) {
    std::optional<Port> sum;
    for (int k = 0; k < 4; ++k) {
      const std::string n = std::to_string(k);
      Port w = g.constant("w" + n, seeded_normal({10, features}, 10 + k));
      Port z = g.op("linear", {normed, w}, {}, "head" + n).on_rank(model_rank);
      sum = sum ? g.op("add", {*sum, z}, {}, "sum" + n).on_rank(model_rank) : z;
    }
    return *sum;
  });
}

struct Figures {
  double requests_per_s = 0;
  bool match = true;
};

// Runs the stream through `graph(1)` over both ranks (rank 1 serves it) and checks rank 0's answers
// against `graph(0)` in one process.
Figures run_case(const std::shared_ptr<net::ProcessGroup>& world, const std::function<Graph(int)>& graph,
                 const std::vector<Tensor>& stream, int in_flight) {
  Executor exec(graph(1), {.max_in_flight = in_flight, .group = world});
  if (world->rank() == 1) {
    exec.serve();
    return {};
  }
  const auto start = std::chrono::steady_clock::now();
  std::vector<Invocation> runs;
  for (const Tensor& x : stream) runs.push_back(exec.run({{"x", x}}));
  std::vector<std::vector<int64_t>> answers;
  for (auto& r : runs) answers.push_back(r.get("classes").tensor().to_vector<int64_t>());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  Executor local(graph(0));
  Figures f{static_cast<double>(stream.size()) / seconds, true};
  for (size_t i = 0; i < stream.size(); ++i)
    if (local({{"x", stream[i]}}).at("classes").tensor().to_vector<int64_t>() != answers[i]) f.match = false;
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  cli::App app{"A dataflow graph split across two ranks"};
  int requests = 100, in_flight = 8;
  int64_t rows = 32, features = 256, hidden = 512;
  bool json = false;
  app.add_option("--requests", requests, "requests in the stream")->check(cli::PositiveNumber);
  app.add_option("--in-flight", in_flight, "requests in the graph at once")->check(cli::PositiveNumber);
  app.add_option("--rows", rows, "rows per request")->check(cli::PositiveNumber);
  app.add_flag("--json", json, "print one JSON line of figures");
  TROUPE_PARSE_COMMAND_LINE(app, argc, argv);

  return run_example("graph_ranks", [&] {
    Runtime runtime;
    auto world = net::init_process_group();
    if (world->size() != 2) throw ValueError("graph_ranks: run it on two ranks (troupe launch --nproc 2), got " +
                                             std::to_string(world->size()));
    Generator inputs(100);
    std::vector<Tensor> stream;
    for (int i = 0; i < requests; ++i) stream.push_back(rand_normal({rows, features}, 0.0, 0.1, DType::f32, inputs));
    const Figures split =
        run_case(world, [&](int model_rank) { return split_graph(model_rank, features, hidden); }, stream, in_flight);
    const Figures fan =
        run_case(world, [&](int model_rank) { return fan_out_graph(model_rank, features); }, stream, in_flight);
    if (world->rank() == 1) {
      std::printf("rank 1 served the model\n");
      return 0;
    }
    const bool match = split.match && fan.match;
    if (json) {
      print_json_line(nlohmann::ordered_json{{"requests", requests},
                                             {"in_flight", in_flight},
                                             {"split_requests_per_s", rounded(split.requests_per_s, 1)},
                                             {"fan_out_requests_per_s", rounded(fan.requests_per_s, 1)},
                                             {"answers_match", match}});
    } else {
      std::printf("rank 0: %d requests through a graph split over 2 ranks: %.1f requests/s; with one value read by "
                  "4 nodes on rank 1: %.1f requests/s (%d in flight); answers %s the one-process run\n",
                  requests, split.requests_per_s, fan.requests_per_s, in_flight, match ? "match" : "DIFFER from");
    }
    return match ? 0 : 1;
  });
}
