// A pipelined inference graph fed a stream of requests:
//   preprocess (raw bytes -> normalised f32 rows) -> model (an MLP sub-graph of ops)
//   -> postprocess (softmax, argmax -> class ids)
// Every stage is a node actor, so while request k is in the model, k+1 is being preprocessed
// and k-1 postprocessed. Prints throughput one request at a time against pipelined (up to
// --in-flight requests in the graph), and checks both give the same answers.
//   graph_pipeline [--requests 200] [--rows 16] [--features 256] [--hidden 1024] [--in-flight 8] [--json]
#include <chrono>
#include <cstdio>
#include <random>

#include "actors/runtime.h"
#include "dataflow/executor.h"
#include "devices/ops.h"
#include "devices/random.h"
#include "examples/command_line.h"
#include "examples/json_line.h"
#include "examples/run_example.h"

using namespace troupe;

namespace {

// A request as it arrives: raw 8-bit samples, rows x features.
struct Request {
  int64_t rows, features;
  std::vector<uint8_t> samples;
};

Tensor random_weight(int64_t out, int64_t in, uint64_t seed) {
  Generator generator(seed);
  return rand_normal({out, in}, 0.0, 1.0 / std::sqrt(static_cast<double>(in)), DType::f32, generator);
}

Graph mlp(int64_t features, int64_t hidden, int64_t classes) {
  Graph g("mlp");
  Port x = g.input("x");
  Port h = g.op("linear", {x, g.constant("w1", random_weight(hidden, features, 1)),
                           g.constant("b1", Tensor::zeros({hidden}))}, {}, "fc1");
  Port a = g.op("gelu", {h}, {}, "act");
  g.output("logits", g.op("linear", {a, g.constant("w2", random_weight(classes, hidden, 2)),
                                     g.constant("b2", Tensor::zeros({classes}))}, {}, "fc2"));
  return g;
}

Graph service(int64_t features, int64_t hidden, int64_t classes) {
  Graph g("service");
  Port raw = g.input("request");
  Port x = g.call("preprocess", [](const Request& r) {
    std::vector<float> v(r.samples.begin(), r.samples.end());
    Tensor t = Tensor::from_vector(v, {r.rows, r.features});
    return layer_norm(mul(t, 1.0 / 255), {r.features});
  }, {raw});
  Port logits = g.subgraph("model", mlp(features, hidden, classes), {x});
  g.output("classes", g.call("postprocess", [](const Tensor& z) {
    return argmax(softmax(z, -1), int64_t{-1}).to_vector<int64_t>();
  }, {logits}));
  return g;
}

std::vector<Request> make_requests(int n, int64_t rows, int64_t features) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<Request> out;
  for (int i = 0; i < n; ++i) {
    Request r{rows, features, std::vector<uint8_t>(static_cast<size_t>(rows * features))};
    for (auto& s : r.samples) s = static_cast<uint8_t>(byte(rng));
    out.push_back(std::move(r));
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  cli::App app{"A pipelined inference graph: throughput one at a time vs pipelined"};
  int requests = 200, in_flight = 8, workers = 0;
  int64_t rows = 16, features = 256, hidden = 1024, classes = 10;
  bool json = false;
  app.add_option("--requests", requests, "requests in the stream")->check(cli::PositiveNumber);
  app.add_option("--rows", rows, "rows per request")->check(cli::PositiveNumber);
  app.add_option("--features", features, "features per row")->check(cli::PositiveNumber);
  app.add_option("--hidden", hidden, "hidden units of the model")->check(cli::PositiveNumber);
  app.add_option("--in-flight", in_flight, "requests in the graph at once when pipelined")->check(cli::PositiveNumber);
  app.add_option("--workers", workers, "scheduler threads (0: the cores)")->check(cli::NonNegativeNumber);
  app.add_flag("--json", json, "print one JSON line of figures");
  TROUPE_PARSE_COMMAND_LINE(app, argc, argv);

  return run_example("graph_pipeline", [&] {
    Runtime runtime({.workers = workers});
    const Graph graph = service(features, hidden, classes);
    const std::vector<Request> stream = make_requests(requests, rows, features);
    Executor exec(graph, {.max_in_flight = in_flight});
    exec({{"request", stream[0]}});  // warm up

    using Clock = std::chrono::steady_clock;
    std::vector<std::vector<int64_t>> one_at_a_time, pipelined;
    auto start = Clock::now();
    for (const Request& r : stream)
      one_at_a_time.push_back(exec({{"request", r}}).at("classes").get<std::vector<int64_t>>());
    const double serial_s = std::chrono::duration<double>(Clock::now() - start).count();

    start = Clock::now();
    std::vector<Invocation> runs;
    for (const Request& r : stream) runs.push_back(exec.run({{"request", r}}));  // blocks at --in-flight
    for (auto& run : runs) pipelined.push_back(run.get("classes").get<std::vector<int64_t>>());
    const double pipelined_s = std::chrono::duration<double>(Clock::now() - start).count();

    const bool same = one_at_a_time == pipelined;
    if (json) {
      print_json_line(nlohmann::ordered_json{{"requests", requests},
                                             {"rows", rows},
                                             {"features", features},
                                             {"hidden", hidden},
                                             {"in_flight", in_flight},
                                             {"one_at_a_time_rps", rounded(requests / serial_s, 1)},
                                             {"pipelined_rps", rounded(requests / pipelined_s, 1)},
                                             {"peak_in_flight", exec.peak_in_flight()},
                                             {"same_answers", same}});
    } else {
      std::printf("pipelined inference graph (preprocess -> model -> postprocess), %d requests of %lldx%lld, %s\n",
                  requests, static_cast<long long>(rows), static_cast<long long>(features),
                  runtime.describe().c_str());
      std::printf("  one at a time  %8.1f requests/s\n  pipelined      %8.1f requests/s  (%.2fx, up to %d in flight)\n"
                  "  same answers: %s\n",
                  requests / serial_s, requests / pipelined_s, serial_s / pipelined_s, in_flight, same ? "yes" : "NO");
    }
    return same ? 0 : 1;
  });
}
