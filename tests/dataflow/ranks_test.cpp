#include <catch2/catch.hpp>

#include <string>

#include "dataflow/executor.h"
#include "devices/ops.h"
#include "net/process_group.h"
#include "support/ranks.h"

using namespace troupe;

namespace {

// x -> double (rank 1) -> plus one (rank 0) -> y; double -> negate (rank 1) -> remote;
// a sub-graph placed on rank 1 whose nodes follow it there.
Graph two_rank_graph() {
  Graph half("half");
  half.output("h", half.op("mul", {half.input("a"), half.constant("half", Tensor::scalar(0.5f))}).named("scale"));
  Graph g("split");
  Port x = g.input("x");
  Port doubled = g.call("double", [](const Tensor& t) {
    if (t.item<float>() < 0) throw ValueError("negative input " + std::to_string(t.item<float>()));
    return mul(t, 2.0);
  }, {x}).on_rank(1);
  g.output("y", g.op("add", {doubled, g.constant("one", Tensor::scalar(1.0f))}).named("plus"));
  g.output("remote", g.op("neg", {doubled}).named("negate").on_rank(1));
  g.output("halved", g.subgraph("halve", half, {x}).on_rank(1));
  g.output("tag", g.call("label", [](const Tensor& t) { return std::string("local"); }, {x}));
  return g;
}

}  // namespace

// One rank of the two-process test below (hidden: run_ranks starts it with RANK set).
TEST_CASE("dataflow rank: two-rank graph", "[.rank]") {
  auto world = net::init_process_group();
  Executor exec(two_rank_graph(), {.max_in_flight = 4, .group = world});
  if (world->rank() != 0) {
    CHECK(exec.node_actors() == 3);  // double, negate, halve/scale
    exec.serve();
    return;
  }
  CHECK(exec.node_actors() == 2);  // plus, label
  std::vector<Invocation> runs;
  for (int k = 0; k < 12; ++k) runs.push_back(exec.run({{"x", Tensor::scalar(k == 5 ? -5.0f : float(k))}}));
  for (int k = 0; k < 12; ++k) {
    if (k == 5) {
      // Rank 1's error comes back typed, naming the node, for every output.
      CHECK_THROWS_AS(runs[k].get("y"), ValueError);
      CHECK_THROWS_WITH(runs[k].get("tag"), Catch::StartsWith("call 'double': negative input -5"));
      continue;
    }
    auto out = runs[k].get_all();
    CHECK(out.at("y").tensor().item<float>() == 2 * k + 1);
    CHECK(out.at("remote").tensor().item<float>() == -2 * k);
    CHECK(out.at("halved").tensor().item<float>() == 0.5f * k);
    CHECK(out.at("tag").get<std::string>() == "local");
  }
  CHECK(exec.peak_in_flight() <= 4);
  CHECK_THROWS_AS(exec.run({{"x", 1.0f}}), ValueError);
  CHECK_THROWS_WITH(exec.run({{"x", 1.0f}}), Catch::Contains("input 'x' goes to rank 1: only tensors travel"));
}

TEST_CASE("executor: nodes placed on two ranks run in two processes", "[dataflow]") {
  RankRun run = run_ranks(2, "dataflow rank: two-rank graph");
  check_all_passed(run, 2);
}

TEST_CASE("executor: rank placement needs a group that has the rank", "[dataflow]") {
  Graph g("g");
  g.output("y", g.op("neg", {g.input("x")}).named("far").on_rank(3));
  CHECK_THROWS_AS(Executor(g), GraphError);
  CHECK_THROWS_WITH(Executor(g), Catch::Contains("node 'far' is placed on rank 3, but the executor has no process group"));
  Graph neg("neg");
  neg.output("y", neg.op("neg", {neg.input("x")}).named("n").on_rank(-1));
  CHECK_THROWS_WITH(Executor(neg), Catch::Contains("node 'n' is placed on rank -1"));
}
