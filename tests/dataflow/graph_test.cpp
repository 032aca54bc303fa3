#include <catch2/catch.hpp>

#include "dataflow/graph.h"
#include "dataflow/placement.h"
#include "dataflow/plan.h"
#include "devices/backend.h"
#include "devices/error_kinds.h"

using namespace troupe;

namespace {

const TensorMeta f32_2x3{DType::f32, {2, 3}, Device::cpu()};
const TensorMeta f32_3x4{DType::f32, {3, 4}, Device::cpu()};

// Every problem check() reports must show up, each naming what it is about.
bool reports(const std::vector<std::string>& problems, const std::string& a, const std::string& b = "") {
  for (const auto& p : problems)
    if (p.find(a) != std::string::npos && p.find(b) != std::string::npos) return true;
  return false;
}

std::string all(const std::vector<std::string>& problems) {
  std::string text;
  for (const auto& p : problems) text += p + "\n";
  return text;
}

// y = relu(x @ w + b): the graph most tests start from.
Graph mlp() {
  Graph g("mlp");
  Port x = g.input("x", f32_2x3);
  Port w = g.constant("w", Tensor::ones({3, 4}));
  Port b = g.constant("b", Tensor::zeros({4}));
  Port h = g.op("matmul", {x, w}).named("h");
  Port z = g.op("add", {h, b}).named("z");
  g.output("y", g.op("relu", {z}).named("y"));
  return g;
}

}  // namespace

TEST_CASE("graph: the builder names nodes and ports", "[dataflow]") {
  Graph g("g");
  Port x = g.input("x");
  NodeRef a = g.op("neg", {x});
  NodeRef b = g.op("neg", {a}).named("b");
  CHECK(a.name() == "neg_1");  // auto-named after the op and the node id
  CHECK(b.name() == "b");
  CHECK(g.node(b.id()).inputs[0].node == a.id());
  NodeRef s = g.switch_("s", x, {x, a});
  CHECK(g.node(s.id()).outputs == 4);
  CHECK(s.out("else.1").index == 3);
  CHECK_THROWS_AS(s.out("nope"), ValueError);
  CHECK_THROWS_WITH(s.out("nope"), Catch::Contains("then.0, then.1, else.0, else.1"));
  CHECK_THROWS_AS(s[4], IndexError);
  CHECK_THROWS_WITH(s[4], Catch::Contains("'s' has 4 outputs"));
  CHECK_THROWS_AS(a.infer_with({}), ValueError);
  CHECK(g.input_nodes() == std::vector<int>{0});
  g.output("y", b);
  CHECK(g.output_nodes() == std::vector<int>{static_cast<int>(g.nodes().size()) - 1});
}

TEST_CASE("graph: a valid graph has no problems and infers its output metas", "[dataflow]") {
  Graph g = mlp();
  CHECK(g.check().empty());
  CHECK_NOTHROW(g.validate());
  auto metas = g.output_metas();
  REQUIRE(metas.at("y"));
  CHECK(metas.at("y")->str() == "f32[2,4]");
  // Metas given at validation win over the declared ones.
  CHECK(g.output_metas({{"x", TensorMeta{DType::f32, {5, 3}, Device::cpu()}}}).at("y")->str() == "f32[5,4]");
}

TEST_CASE("graph: unconnected inputs, connect() and its errors", "[dataflow]") {
  Graph g("g");
  Port x = g.input("x", f32_2x3);
  NodeRef sum = g.op("add", {x, Port{}}).named("sum");
  g.output("y", sum);
  auto problems = g.check();
  CHECK(reports(problems, "node 'sum' input 1 is not connected"));
  CHECK_THROWS_AS(g.validate(), GraphError);
  CHECK_THROWS_WITH(g.validate(), Catch::Contains("graph 'g' is invalid") && Catch::Contains("'sum' input 1"));
  g.connect(x, sum, 1);
  CHECK(g.check().empty());
  CHECK_THROWS_AS(g.connect(x, sum, 1), ValueError);
  CHECK_THROWS_WITH(g.connect(x, sum, 1), Catch::Contains("already connected"));
  CHECK_THROWS_AS(g.connect(x, sum, 2), IndexError);
}

TEST_CASE("graph: ports from another graph", "[dataflow]") {
  Graph other("other");
  Port foreign = other.input("x");
  Graph g("g");
  g.output("y", g.op("neg", {foreign}).named("n"));
  CHECK(reports(g.check(), "node 'n' input 0 comes from another graph"));
}

TEST_CASE("graph: duplicate node and output names", "[dataflow]") {
  Graph g("g");
  Port x = g.input("x");
  Port a = g.op("neg", {x}).named("x");
  g.output("y", a);
  g.output("y", x);
  auto problems = g.check();
  CHECK(reports(problems, "duplicate node name 'x'"));
  CHECK(reports(problems, "duplicate output name 'y'"));
  // An output may share a node's name.
  Graph ok("ok");
  ok.output("n", ok.op("neg", {ok.input("x")}).named("n"));
  CHECK(ok.check().empty());
}

TEST_CASE("graph: cycles are reported with the nodes around them", "[dataflow]") {
  Graph g("g");
  Port x = g.input("x");
  NodeRef a = g.op("add", {x, Port{}}).named("a");
  NodeRef b = g.op("neg", {a}).named("b");
  NodeRef c = g.op("neg", {b}).named("c");
  g.connect(c, a, 1);
  g.output("y", c);
  auto problems = g.check();
  INFO(all(problems));
  CHECK(reports(problems, "cycle: 'a' -> 'b' -> 'c' -> 'a'"));
}

TEST_CASE("graph: unknown ops and bad attributes", "[dataflow]") {
  Graph g("g");
  Port x = g.input("x", f32_2x3);
  Port a = g.op("matmull", {x, x}).named("a");
  Port b = g.op("sum", {x}, {{"dims", std::string("one")}}).named("b");
  Port c = g.op("sum", {x}, {{"keep", true}}).named("c");
  g.output("a", a);
  g.output("b", b);
  g.output("c", c);
  auto problems = g.check();
  INFO(all(problems));
  CHECK(reports(problems, "node 'a'", "matmull"));
  CHECK(reports(problems, "node 'b'", "dims"));
  CHECK(reports(problems, "node 'c'", "keep"));
}

TEST_CASE("graph: shape and dtype mismatches from the registry's inference", "[dataflow]") {
  Graph g("g");
  Port x = g.input("x", f32_2x3);
  Port w = g.input("w", TensorMeta{DType::f32, {4, 5}, Device::cpu()});
  Port i = g.input("i", TensorMeta{DType::f32, {2}, Device::cpu()});
  Port h = g.op("matmul", {x, w}).named("h");
  Port e = g.op("index_select", {x, i}, {{"dim", int64_t{0}}}).named("pick");
  g.output("h", h);
  g.output("e", e);
  auto problems = g.check();
  INFO(all(problems));
  // The node, the op, and each input's port with its meta.
  CHECK(reports(problems, "op 'h' (matmul) on inputs x:f32[2,3], w:f32[4,5]: matmul"));
  CHECK(reports(problems, "op 'pick' (index_select) on inputs x:f32[2,3], i:f32[2]"));
  // Downstream of a failed inference, metas are unknown and nothing more is reported.
  CHECK(problems.size() == 2);
}

TEST_CASE("graph: output ports out of range", "[dataflow]") {
  Graph g("g");
  Port x = g.input("x", TensorMeta{DType::f32, {4}, Device::cpu()});
  NodeRef parts = g.op("split", {x}, {{"size", int64_t{2}}}).named("parts");
  g.output("y", g.op("neg", {parts[3]}).named("z"));
  CHECK(reports(g.check(), "node 'z' input 0 uses output 3 of 'parts' (split), which has 2 outputs"));
  Graph h("h");
  NodeRef s = h.switch_("s", h.input("p"), {h.input("x")});
  h.output("y", Port{h.id(), s.id(), 5});
  CHECK(reports(h.check(), "uses output 5 of 's' (switch), which has 2 outputs"));
}

TEST_CASE("graph: calls check their arity and may infer metas", "[dataflow]") {
  Graph g("g");
  Port x = g.input("x", f32_2x3);
  Port bad = g.call("two", [](const Tensor& a, const Tensor& b) { return a; }, {x});
  Port twice = g.call("twice", [](const Tensor& a) { return a; }, {x}).infer_with([](const std::vector<TensorMeta>& in) {
    TensorMeta m = in[0];
    m.shape[0] *= 2;
    return std::vector<TensorMeta>{m};
  });
  g.output("bad", bad);
  g.output("twice", twice);
  CHECK(reports(g.check(), "call node 'two' takes 2 arguments but has 1 inputs"));
  Graph ok("ok");
  Port y = ok.call("twice", [](const Tensor& a) { return a; }, {ok.input("x", f32_2x3)})
               .infer_with([](const std::vector<TensorMeta>& in) {
                 TensorMeta m = in[0];
                 m.shape[0] *= 2;
                 return std::vector<TensorMeta>{m};
               });
  ok.output("y", ok.op("neg", {y}));
  CHECK(ok.output_metas().at("y")->str() == "f32[4,3]");
}

TEST_CASE("graph: switch, merge and cond are checked", "[dataflow]") {
  Graph g("g");
  Port x = g.input("x", f32_2x3);
  Port p = g.input("p", TensorMeta{DType::boolean, {2}, Device::cpu()});
  NodeRef s = g.switch_("s", p, {x});
  Port y = g.input("y", f32_3x4);
  g.output("m", g.merge("m", {{s[0]}, {y}}));
  g.output("one", g.merge("one", {{x}}));
  g.output("ragged", g.merge("ragged", {{x}, {x, y}}));
  auto problems = g.check();
  INFO(all(problems));
  CHECK(reports(problems, "switch 's': the predicate p is bool[2]; it must have one element"));
  CHECK(reports(problems, "merge 'm' output 0: branch 0 gives f32[2,3] but branch 1 gives f32[3,4]"));
  CHECK(reports(problems, "merge 'one' needs at least two branches"));
  CHECK(reports(problems, "merge 'ragged': branch 0 has 1 values but branch 1 has 2"));

  Graph one("one_out");
  one.output("y", one.input("a"));
  Graph two("two_out");
  Port a = two.input("a");
  two.output("y", a);
  two.output("z", a);
  Graph c("c");
  c.output("r", c.cond("choose", c.input("p"), one, two, {c.input("x")}));
  CHECK(reports(c.check(), "cond 'choose': graph 'one_out' gives 1 outputs but graph 'two_out' gives 2"));
}

TEST_CASE("graph: sub-graphs are checked inside, with their paths", "[dataflow]") {
  Graph body("body");
  Port a = body.input("a");
  body.output("out", body.op("matmul", {a, body.constant("w", Tensor::ones({5, 2}))}).named("h"));
  Graph g("g");
  Port x = g.input("x", f32_2x3);
  g.output("y", g.subgraph("enc", body, {x}));
  g.output("z", g.subgraph("wrong_arity", body, {x, x}));
  auto problems = g.check();
  INFO(all(problems));
  CHECK(reports(problems, "op 'enc/h' (matmul) on inputs x:f32[2,3], enc/w"));
  CHECK(reports(problems, "sub-graph node 'wrong_arity' has 2 inputs but graph 'body' declares 1"));

  Graph fine("fine");
  NodeRef enc = fine.subgraph("enc", body, {fine.input("x", TensorMeta{DType::f32, {7, 5}, Device::cpu()})});
  fine.output("y", enc.out("out"));
  CHECK(fine.output_metas().at("y")->str() == "f32[7,2]");
}

TEST_CASE("graph: loops are checked", "[dataflow]") {
  Graph body("step");
  Port v = body.input("v");
  body.output("v", body.op("sum", {v}, {{"dims", std::vector<int64_t>{0}}}).named("shrink"));
  body.output("continue", body.constant("go", true));
  Graph g("g");
  Port x = g.input("x", f32_2x3);
  g.output("a", g.loop("shrinks", body, {x}, 3));
  g.output("b", g.loop("negative", body, {x}, -1));
  g.output("c", g.loop("arity", body, {x, x}, 3));
  auto problems = g.check();
  INFO(all(problems));
  CHECK(reports(problems, "loop 'shrinks': state 0 enters as f32[2,3] but the body gives back f32[3]"));
  CHECK(reports(problems, "loop 'negative': max_iterations must be >= 0, got -1"));
  CHECK(reports(problems, "loop 'arity' has 2 state values but its body 'step' takes 1 inputs and gives 1 state outputs"));

  Graph broken("broken");
  broken.output("v", broken.op("neg", {Port{}}).named("n"));
  Graph h("h");
  h.output("y", h.loop("l", broken, {h.input("x")}, 2));
  CHECK(reports(h.check(), "loop 'l' body: node 'n' input 0 is not connected"));
}

TEST_CASE("graph: every other problem at once", "[dataflow]") {
  Graph g("g");
  Port x = g.input("x");
  g.op("neg", {x}).named("a/b");
  auto problems = g.check({{"nope", f32_2x3}});
  INFO(all(problems));
  CHECK(reports(problems, "node 'a/b': '/' is reserved"));
  CHECK(reports(problems, "graph 'g' has no outputs"));
  CHECK(reports(problems, "a meta was given for 'nope', which is not an input of graph 'g'"));
  try {
    g.validate({{"nope", f32_2x3}});
    FAIL("validate did not throw");
  } catch (const GraphError& e) {
    CHECK(e.problems().size() == 3);
    CHECK(std::string(e.what()).find("(3 problems)") != std::string::npos);
    // Through the error-kind table (another rank, a node's context) it stays a GraphError.
    try {
      std::rethrow_exception(with_context("rank 1: ", decode_error(encode_error(std::current_exception()))));
    } catch (const GraphError& again) {
      CHECK(again.problems() == e.problems());
      CHECK(std::string(again.what()) == "rank 1: " + std::string(e.what()));
    }
  }
}

TEST_CASE("graph: placement on a device the build cannot reach is reported", "[dataflow]") {
  Graph g("g");
  g.output("y", g.op("neg", {g.input("x", f32_2x3)}).named("n").on(Device::cuda(7)));
  auto problems = g.check();
  REQUIRE(problems.size() == 1);
  CHECK(reports(problems, "node 'n' is placed on cuda:7"));
}

TEST_CASE("graph: to_dot draws nodes, sub-graph clusters, ports and placement", "[dataflow]") {
  Graph body("body");
  body.output("out", body.op("neg", {body.input("a")}).named("inner"));
  Graph g = mlp();
  Port p = g.input("p");
  Port q = g.input("q");
  NodeRef s = g.switch_("s", p, {q});
  g.output("t", g.subgraph("sub", body, {s.out("then.0")}));
  g.output("c", g.op("neg", {g.input("k")}).named("placed").on(Device::cpu()));
  const std::string dot = g.to_dot();
  INFO(dot);
  CHECK(dot.rfind("digraph \"mlp\" {", 0) == 0);
  CHECK(dot.find("n0 [label=\"x\\nf32[2,3]\" shape=\"invhouse\"]") != std::string::npos);
  CHECK(dot.find("[label=\"h\\nmatmul\" shape=\"box\"]") != std::string::npos);
  CHECK(dot.find("n1 [label=\"w\\nconstant\" shape=\"note\"]") != std::string::npos);
  CHECK(dot.find("n0 -> n3;") != std::string::npos);  // x -> h
  CHECK(dot.find("shape=\"diamond\"") != std::string::npos);
  CHECK(dot.find("subgraph cluster_n10 {") != std::string::npos);
  CHECK(dot.find("label=\"sub (graph body)\"") != std::string::npos);
  // The switch's "then.0" port enters the sub-graph's input node; the inner output leaves to "t".
  CHECK(dot.find("n9 -> n10_0 [label=\"then.0\"];") != std::string::npos);
  CHECK(dot.find("n10_2 -> n11 [label=\"out\"];") != std::string::npos);
  CHECK(dot.find("placed\\nneg\\n@cpu") != std::string::npos);
  CHECK(dot.back() == '\n');
}

TEST_CASE("graph: which nodes are pure", "[dataflow]") {
  CHECK(all_pure(mlp()));  // ops only
  Graph inner("inner");
  inner.output("o", inner.call("log", [](const Tensor& t) { return t; }, {inner.input("i")}));
  CHECK_FALSE(all_pure(inner));
  Graph g("g");
  Port x = g.input("x");
  Port a = g.call("a", [](const Tensor& t) { return t; }, {x}).named("a").pure();
  Port s = g.subgraph("s", inner, {a});
  g.output("y", g.op("neg", {s}).named("n"));
  CHECK_FALSE(all_pure(g));  // the sub-graph's call is not marked
  Plan plan = make_plan(g);
  REQUIRE(plan.problems.empty());
  for (const PlanNode& pn : plan.nodes) CHECK(pn.pure == (pn.path != "s/log"));

  Graph marked("marked");
  Port m = marked.subgraph("s", inner, {marked.input("x")}).pure();
  marked.output("y", marked.loop("l", mlp(), {m}, 3).pure());
  CHECK(all_pure(marked));  // a sub-graph or loop marked pure: all of it
}

TEST_CASE("placement: a lost rank's nodes spread over the survivors alike on every rank", "[dataflow]") {
  using detail::without_ranks;
  // Nodes on ranks 0 0 1 2 2 2; rank 2 lost: its three go to the least loaded survivor each time.
  CHECK(without_ranks({0, 0, 1, 2, 2, 2}, {0, 0, 1}) == std::vector<int>{0, 0, 1, 1, 0, 1});
  CHECK(without_ranks({0, 1, 2, 3}, {0, 1, 0, 1}) == std::vector<int>{0, 0, 2, 2});
  CHECK(without_ranks({0, 1}, {0, 0}) == std::vector<int>{0, 1});  // nothing lost: nothing moves
}
