// A graph split across two ranks: rank 0 feeds requests and post-processes, rank 1 holds the
// model (an MLP of op nodes placed there). Tensors cross as calls to the other rank's part of the
// executor, a remote actor (zero-copy tensor parts, tagged by invocation). Rank 0 checks the
// answers against the same graph run in one process.
//   troupe launch --nproc 2 build/bin/graph_ranks [--requests 100] [--in-flight 8]
// (any launcher that sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT works too)
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <random>

#include "actors/runtime.h"
#include "dataflow/executor.h"
#include "devices/ops.h"
#include "net/process_group.h"
#include "examples/run_example.h"

using namespace troupe;

namespace {

Tensor random_tensor(const Shape& shape, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 0.1f);
  std::vector<float> v(static_cast<size_t>(numel(shape)));
  for (auto& x : v) x = dist(rng);
  return Tensor::from_vector(v, shape);
}

// model_rank: where the model's nodes run (0 puts everything in one process).
Graph split_graph(int model_rank, int64_t features, int64_t hidden) {
  Graph g("split_mlp");
  Port x = g.input("x");
  Port normed = g.op("layer_norm", {x}, {{"normalized_shape", Shape{features}}}, "normalise");
  Port h = g.op("linear", {normed, g.constant("w1", random_tensor({hidden, features}, 1))}, {}, "fc1").on_rank(model_rank);
  Port a = g.op("gelu", {h}, {}, "act").on_rank(model_rank);
  Port z = g.op("linear", {a, g.constant("w2", random_tensor({10, hidden}, 2))}, {}, "fc2").on_rank(model_rank);
  g.output("classes", g.op("argmax", {g.op("softmax", {z}, {{"dim", int64_t{-1}}}, "probabilities")},
                           {{"dims", std::vector<int64_t>{-1}}}, "classes"));
  return g;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"A dataflow graph split across two ranks"};
  int requests = 100, in_flight = 8;
  int64_t rows = 32, features = 256, hidden = 512;
  app.add_option("--requests", requests, "requests in the stream")->check(CLI::PositiveNumber);
  app.add_option("--in-flight", in_flight, "requests in the graph at once")->check(CLI::PositiveNumber);
  app.add_option("--rows", rows, "rows per request")->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  return run_example("graph_ranks", [&] {
    Runtime runtime;
    auto world = net::init_process_group();
    if (world->size() != 2) throw ValueError("graph_ranks: run it on two ranks (troupe launch --nproc 2), got " +
                                             std::to_string(world->size()));
    Executor exec(split_graph(1, features, hidden), {.max_in_flight = in_flight, .group = world});
    if (world->rank() == 1) {
      exec.serve();
      std::printf("rank 1 served the model (%d node actors)\n", exec.node_actors());
      return 0;
    }
    std::vector<Tensor> stream;
    for (int i = 0; i < requests; ++i) stream.push_back(random_tensor({rows, features}, 100 + i));

    const auto start = std::chrono::steady_clock::now();
    std::vector<Invocation> runs;
    for (const Tensor& x : stream) runs.push_back(exec.run({{"x", x}}));
    std::vector<std::vector<int64_t>> answers;
    for (auto& r : runs) answers.push_back(r.get("classes").tensor().to_vector<int64_t>());
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

    Executor local(split_graph(0, features, hidden));
    int wrong = 0;
    for (int i = 0; i < requests; ++i)
      if (local({{"x", stream[i]}}).at("classes").tensor().to_vector<int64_t>() != answers[i]) ++wrong;
    std::printf("rank 0: %d requests through a graph split over 2 ranks: %.1f requests/s (%d in flight); "
                "answers %s the one-process run\n",
                requests, requests / seconds, in_flight, wrong == 0 ? "match" : "DIFFER from");
    return wrong == 0 ? 0 : 1;
  });
}
