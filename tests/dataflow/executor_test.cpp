#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "actors/module_actor.h"
#include "actors/observe/profiler.h"
#include "actors/runtime.h"
#include "dataflow/executor.h"
#include "devices/backend.h"
#include "devices/ops.h"
#include "devices/sync.h"
#include "support/skip.h"
#include "support/two_workers.h"

using namespace troupe;
using namespace std::chrono_literals;

namespace {

Tensor vec(std::vector<float> v) {
  const auto n = static_cast<int64_t>(v.size());
  return Tensor::from_vector(v, {n});
}

// Spins until `flag` or a deadline: tests fail instead of hanging.
bool eventually(const std::function<bool()>& flag) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!flag()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

// A value that counts its live instances: what the pipelining test bounds.
struct Tracked {
  static inline std::atomic<int> live{0}, peak{0};
  int value;
  explicit Tracked(int v) : value(v) { count(); }
  Tracked(const Tracked& o) : value(o.value) { count(); }
  Tracked(Tracked&& o) noexcept : value(o.value) { count(); }
  ~Tracked() { live.fetch_sub(1); }
  static void count() {
    const int now = live.fetch_add(1) + 1;
    int seen = peak.load();
    while (now > seen && !peak.compare_exchange_weak(seen, now)) {
    }
  }
};

// Mutable state in a module actor: a running total.
struct Accumulator {
  float total = 0;
  Tensor operator()(const Tensor& x) {
    total += x.item<float>();
    return Tensor::scalar(total);
  }
};

}  // namespace

TEST_CASE("executor: ops, constants and calls compute the graph", "[dataflow]") {
  two_workers();
  Graph g("mlp");
  Port x = g.input("x", TensorMeta{DType::f32, {2, 3}, Device::cpu()});
  Port h = g.op("matmul", {x, g.constant("w", Tensor::ones({3, 4}))}).named("h");
  Port z = g.op("add", {h, g.constant("b", Tensor::full({4}, -10))}).named("z");
  Port y = g.op("relu", {z}).named("y");
  g.output("y", y);
  g.output("scaled", g.call("scale", [](const Tensor& t, const double& k) { return mul(t, k); },
                            {y, g.constant("k", 0.5)}));
  Executor exec(g);
  CHECK(exec.node_actors() == 4);
  CHECK(exec.input_names() == std::vector<std::string>{"x"});
  CHECK(exec.output_names() == std::vector<std::string>{"y", "scaled"});
  auto out = exec({{"x", Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3})}});
  CHECK(out.at("y").tensor().to_vector<float>() == std::vector<float>{0, 0, 0, 0, 5, 5, 5, 5});
  CHECK(out.at("scaled").tensor().to_vector<float>() == std::vector<float>{0, 0, 0, 0, 2.5, 2.5, 2.5, 2.5});
}

TEST_CASE("executor: other values travel too, and nodes without inputs fire per invocation", "[dataflow]") {
  two_workers();
  Graph g("words");
  Port name = g.input("name");
  Port greeting = g.call("greet", []() { return std::string("hello"); }, {});
  Port both = g.call("join", [](const std::string& a, const std::string& b) { return a + ", " + b; }, {greeting, name});
  NodeRef pair = g.call("split", [](const std::string& s) { return std::make_tuple(s.size(), s); }, {both});
  g.output("length", pair[0]);
  g.output("text", pair[1]);
  g.output("echo", name);  // an input straight to an output
  Executor exec(g);
  for (std::string who : {"ann", "bo"}) {
    auto out = exec({{"name", who}});
    CHECK(out.at("text").get<std::string>() == "hello, " + who);
    CHECK(out.at("length").get<size_t>() == 7 + who.size());
    CHECK(out.at("echo").get<std::string>() == who);
  }
  CHECK_THROWS_AS(exec.run({{"name", 3}}).get("text"), ValueError);
  CHECK_THROWS_WITH(exec.run({{"name", 3}}).get("text"),
                    Catch::Contains("call 'join'") && Catch::Contains("expected std::") && Catch::Contains("holds int"));
}

TEST_CASE("executor: run checks its inputs", "[dataflow]") {
  two_workers();
  Graph g("g");
  g.output("y", g.op("neg", {g.input("x", TensorMeta{DType::f32, {2}, Device::cpu()})}));
  Executor exec(g);
  CHECK_THROWS_AS(exec.run({}), ValueError);
  CHECK_THROWS_WITH(exec.run({}), Catch::Contains("input 'x' is missing"));
  CHECK_THROWS_WITH(exec.run({{"x", vec({1, 2})}, {"q", 1}}), Catch::Contains("has no input 'q' (inputs: x)"));
  CHECK_THROWS_AS(exec.run({{"x", vec({1, 2, 3})}}), ShapeError);
  CHECK_THROWS_WITH(exec.run({{"x", vec({1, 2, 3})}}), Catch::Contains("must be f32[2], got f32[3]"));
  CHECK_THROWS_AS(exec.run({{"x", Tensor::arange(2, DType::i64)}}), DTypeError);
  CHECK_THROWS_AS(exec.run({{"x", 2.0}}), ValueError);
  auto r = exec.run({{"x", vec({1, 2})}});
  CHECK_THROWS_WITH(r.future("nope"), Catch::Contains("no output named 'nope' (outputs: y)"));
  CHECK(r.get("y").tensor().to_vector<float>() == std::vector<float>{-1, -2});
  CHECK(exec.in_flight() == 0);
}

TEST_CASE("executor: construction validates", "[dataflow]") {
  two_workers();
  Graph g("g");
  g.output("y", g.op("neg", {Port{}}).named("n"));
  CHECK_THROWS_AS(Executor(g), GraphError);
  CHECK_THROWS_WITH(Executor(g), Catch::Contains("node 'n' input 0 is not connected"));
  Graph ok("ok");
  ok.output("y", ok.input("x"));
  CHECK_THROWS_AS(Executor(ok, {.max_in_flight = 0}), ValueError);
}

TEST_CASE("executor: independent nodes fire in parallel", "[dataflow]") {
  two_workers();
  std::atomic<int> started{0};
  // Each branch waits until the other has started: only parallel firing lets both finish.
  auto meet = [&](const Tensor& x) {
    started.fetch_add(1);
    return eventually([&] { return started.load() >= 2; }) ? x : Tensor();
  };
  Graph g("fork");
  Port x = g.input("x");
  Port a = g.call("left", meet, {x});
  Port b = g.call("right", meet, {x});
  g.output("sum", g.op("add", {a, b}));
  Executor exec(g);
  auto out = exec({{"x", vec({1, 2})}});
  CHECK(out.at("sum").tensor().to_vector<float>() == std::vector<float>{2, 4});
}

TEST_CASE("executor: pipelined invocations stay bounded by max_in_flight", "[dataflow]") {
  two_workers();
  Tracked::live = 0;
  Tracked::peak = 0;
  Graph g("pipeline");
  Port i = g.input("i");
  Port load = g.call("load", [](const int& v) { return Tracked(v); }, {i});
  Port work = g.call("work", [](const Tracked& t) {
    std::this_thread::sleep_for(1ms);
    return t.value * 2;
  }, {load});
  g.output("out", g.call("post", [](const int& v) { return v + 1; }, {work}));
  const int max_in_flight = 3;
  Executor exec(g, {.max_in_flight = max_in_flight});
  std::vector<Invocation> runs;
  for (int k = 0; k < 40; ++k) {
    runs.push_back(exec.run({{"i", k}}));  // blocks once three are in flight
    CHECK(exec.in_flight() <= max_in_flight);
  }
  for (int k = 0; k < 40; ++k) CHECK(runs[k].get("out").get<int>() == 2 * k + 1);
  exec.wait_idle();
  CHECK(exec.peak_in_flight() == max_in_flight);
  // One Tracked per invocation in flight, plus the moment it is moved into its Value.
  CHECK(Tracked::peak.load() <= 2 * max_in_flight);
  CHECK(Tracked::live.load() == 0);
  std::vector<uint64_t> ids;
  for (auto& r : runs) ids.push_back(r.id());
  CHECK(std::adjacent_find(ids.begin(), ids.end(), [](uint64_t a, uint64_t b) { return b != a + 1; }) == ids.end());
}

TEST_CASE("executor: invocations from several threads keep their own values", "[dataflow]") {
  two_workers();
  Graph g("chain");
  Port v = g.input("x");
  for (int k = 0; k < 20; ++k) v = g.op("add", {v, g.constant("one_" + std::to_string(k), Tensor::scalar(1.0f))});
  g.output("y", v);
  Executor exec(g, {.max_in_flight = 8});
  std::atomic<int> wrong{0};
  auto producer = [&](int base) {
    std::vector<std::pair<float, Invocation>> runs;
    for (int k = 0; k < 30; ++k) runs.emplace_back(base + k, exec.run({{"x", Tensor::scalar(float(base + k))}}));
    for (auto& [x, r] : runs)
      if (r.get("y").tensor().item<float>() != x + 20) wrong.fetch_add(1);
  };
  std::thread a(producer, 0), b(producer, 1000);
  a.join();
  b.join();
  CHECK(wrong.load() == 0);
  CHECK(exec.peak_in_flight() <= 8);
}

TEST_CASE("executor: a node's exception fails its invocation only, naming the node", "[dataflow]") {
  two_workers();
  std::atomic<int> after_runs{0};
  Graph g("checked");
  Port x = g.input("x");
  Port checked = g.call("check", [](const Tensor& t) {
    if (t.item<float>() < 0) throw ValueError("negative input " + std::to_string(t.item<float>()));
    return t;
  }, {x});
  g.output("y", g.call("after", [&](const Tensor& t) {
    after_runs.fetch_add(1);
    return add(t, 1.0);
  }, {checked}));
  g.output("side", g.op("neg", {x}));
  Executor exec(g, {.max_in_flight = 8});
  std::vector<Invocation> runs;
  for (int k = 0; k < 8; ++k) runs.push_back(exec.run({{"x", Tensor::scalar(float(k % 2 ? -k : k))}}));
  for (int k = 0; k < 8; ++k) {
    if (k % 2) {
      CHECK_THROWS_AS(runs[k].get("y"), ValueError);
      // Every output of a failed invocation fails with the same error.
      CHECK_THROWS_WITH(runs[k].get("side"), Catch::Contains("call 'check': negative input -" + std::to_string(k)));
    } else {
      CHECK(runs[k].get("y").tensor().item<float>() == k + 1);
    }
  }
  CHECK(after_runs.load() == 4);

  Graph shapes("shapes");  // no metas declared: the op's error comes at run time, typed
  shapes.output("h", shapes.op("matmul", {shapes.input("a"), shapes.input("b")}).named("h"));
  Executor bad(shapes);
  CHECK_THROWS_AS(bad.run({{"a", Tensor::ones({2, 3})}, {"b", Tensor::ones({4, 5})}}).get("h"), ShapeError);
  CHECK_THROWS_WITH(bad.run({{"a", Tensor::ones({2, 3})}, {"b", Tensor::ones({4, 5})}}).get("h"),
                    Catch::StartsWith("op 'h' (matmul): matmul"));
  CHECK(bad.run({{"a", Tensor::ones({1, 3})}, {"b", Tensor::ones({3, 1})}}).get("h").tensor().item<float>() == 3);
}

TEST_CASE("executor: cancelling an invocation skips its pending nodes", "[dataflow]") {
  two_workers();
  std::atomic<bool> entered{false}, release{false};
  std::atomic<int> downstream{0};
  Graph g("gate");
  Port gate = g.call("gate", [&](const Tensor& t) {
    entered = true;
    eventually([&] { return release.load(); });
    return t;
  }, {g.input("x")});
  g.output("y", g.call("next", [&](const Tensor& t) {
    downstream.fetch_add(1);
    return t;
  }, {gate}));
  Executor exec(g);
  Invocation r = exec.run({{"x", vec({1})}});
  REQUIRE(eventually([&] { return entered.load(); }));
  r.cancel();
  release = true;
  CHECK_THROWS_AS(r.get("y"), CancelledError);
  CHECK(exec.run({{"x", vec({1})}}).get("y").tensor().item<float>() == 1);
  CHECK(downstream.load() == 1);  // the second invocation only
  CHECK(r.done());
}

TEST_CASE("executor: sub-graphs run inlined, nested and reused", "[dataflow]") {
  two_workers();
  Graph twice("twice");
  twice.output("y", twice.op("mul", {twice.input("a"), twice.constant("two", Tensor::scalar(2.0f))}).named("m"));
  Graph quad("quad");
  quad.output("y", quad.subgraph("second", twice, {quad.subgraph("first", twice, {quad.input("a")})}));
  Graph g("g");
  Port x = g.input("x");
  g.output("x4", g.subgraph("q", quad, {x}));
  g.output("x2", g.subgraph("t", twice, {x}));
  Executor exec(g);
  CHECK(exec.node_actors() == 3);  // q/first/m, q/second/m, t/m
  auto out = exec({{"x", vec({1, -2})}});
  CHECK(out.at("x4").tensor().to_vector<float>() == std::vector<float>{4, -8});
  CHECK(out.at("x2").tensor().to_vector<float>() == std::vector<float>{2, -4});
}

TEST_CASE("executor: cond takes one branch by a runtime value", "[dataflow]") {
  two_workers();
  std::atomic<int> else_runs{0};
  Graph times10("times10");
  times10.output("y", times10.op("mul", {times10.input("a"), times10.constant("ten", Tensor::scalar(10.0f))}));
  Graph negate("negate");
  negate.output("y", negate.call("neg", [&](const Tensor& t) {
    else_runs.fetch_add(1);
    return neg(t);
  }, {negate.input("a")}));
  Graph g("g");
  Port x = g.input("x");
  Port positive = g.op("gt", {x, g.constant("zero", Tensor::scalar(0.0f))}).named("positive");
  g.output("y", g.cond("pick", positive, times10, negate, {x}));
  Executor exec(g);
  CHECK(exec({{"x", Tensor::scalar(3.0f)}}).at("y").tensor().item<float>() == 30);
  CHECK(else_runs.load() == 0);
  CHECK(exec({{"x", Tensor::scalar(-3.0f)}}).at("y").tensor().item<float>() == 3);
  CHECK(else_runs.load() == 1);

  // A plain bool works as the predicate; an output behind an untaken switch is not produced.
  Graph s("s");
  NodeRef sw = s.switch_("sw", s.input("p"), {s.input("x")});
  s.output("when_true", sw.out("then.0"));
  Executor bare(s);
  CHECK(bare.run({{"p", true}, {"x", 1}}).get("when_true").get<int>() == 1);
  CHECK_THROWS_AS(bare.run({{"p", false}, {"x", 1}}).get("when_true"), ValueError);
  CHECK_THROWS_WITH(bare.run({{"p", false}, {"x", 1}}).get("when_true"),
                    Catch::Contains("output 'when_true' was not produced") && Catch::Contains("branch was not taken"));
  CHECK_THROWS_WITH(bare.run({{"p", std::string("yes")}, {"x", 1}}).get("when_true"),
                    Catch::Contains("switch 'sw': the predicate must be a bool or a one-element tensor"));
}

TEST_CASE("executor: bounded loops run until their condition or their bound", "[dataflow]") {
  two_workers();
  Graph body("double");
  Port v = body.input("v");
  Port next = body.op("mul", {v, body.constant("two", Tensor::scalar(2.0f))}).named("next");
  body.output("v", next);
  body.output("continue", body.op("lt", {next, body.constant("limit", Tensor::scalar(100.0f))}));
  auto run_loop = [&](float start, int64_t max_iterations) {
    Graph g("g");
    g.output("y", g.loop("grow", body, {g.input("x")}, max_iterations));
    Executor exec(g, {.max_in_flight = 4});
    return exec({{"x", Tensor::scalar(start)}}).at("y").tensor().item<float>();
  };
  CHECK(run_loop(3, 100) == 192);  // 6 12 24 48 96 192: stops after the first >= 100
  CHECK(run_loop(3, 3) == 24);     // the bound wins
  CHECK(run_loop(3, 0) == 3);
  CHECK(run_loop(200, 100) == 400);  // the body runs once before its condition is read

  // Several invocations loop at once, each with its own state and count.
  Graph counter_body("count");
  Port n = counter_body.input("n");
  Port i = counter_body.input("i");
  Port i1 = counter_body.call("inc", [](const int& k) { return k + 1; }, {i});
  counter_body.output("n", n);
  counter_body.output("i", i1);
  counter_body.output("continue", counter_body.call("below", [](const int& limit, const int& k) { return k < limit; }, {n, i1}));
  Graph g("g");
  NodeRef loop = g.loop("count", counter_body, {g.input("n"), g.constant("zero", 0)}, 50);
  g.output("i", loop.out("i"));
  Executor exec(g, {.max_in_flight = 8});
  std::vector<Invocation> runs;
  for (int k = 1; k <= 8; ++k) runs.push_back(exec.run({{"n", k * 5}}));
  for (int k = 1; k <= 8; ++k) CHECK(runs[k - 1].get("i").get<int>() == std::min(k * 5, 50));

  Graph failing("failing");
  failing.output("v", failing.call("boom", [](const int& k) {
    if (k == 2) throw IndexError("no step " + std::to_string(k));
    return k + 1;
  }, {failing.input("v")}));
  Graph h("h");
  h.output("y", h.loop("l", failing, {h.input("x")}, 10));
  Executor bad(h);
  CHECK_THROWS_AS(bad.run({{"x", 0}}).get("y"), IndexError);
  CHECK_THROWS_WITH(bad.run({{"x", 0}}).get("y"), Catch::StartsWith("loop 'l': call 'boom': no step 2"));
  CHECK(bad.run({{"x", 3}}).get("y").get<int>() == 13);
}

TEST_CASE("executor: module nodes run in the module's actor, in order", "[dataflow]") {
  two_workers();
  ModuleActor<Accumulator> acc("accumulator");
  Graph g("g");
  g.output("total", g.module("acc", acc, {g.input("x")}));
  Executor exec(g);
  std::vector<float> totals;
  for (float k = 1; k <= 5; ++k) totals.push_back(exec({{"x", Tensor::scalar(k)}}).at("total").tensor().item<float>());
  CHECK(totals == std::vector<float>{1, 3, 6, 10, 15});
  CHECK(acc->total == 15);
  Graph wrong("wrong");
  Port x = wrong.input("x");
  wrong.output("y", wrong.module("acc", acc, {x, x}));
  CHECK_THROWS_WITH(Executor(wrong), Catch::Contains("module 'accumulator' cannot be called with 2 tensors"));
}

TEST_CASE("executor: the profiler shows one lane per node actor", "[dataflow]") {
  two_workers();
  Graph g("g");
  Port h = g.op("neg", {g.input("x")}).named("negate");
  g.output("y", g.call("post", [](const Tensor& t) { return t; }, {h}));
  Executor exec(g);
  Profiler::global().start();
  exec({{"x", vec({1})}});
  Profiler::global().stop();
  const std::string table = Profiler::global().table();
  INFO(table);
  CHECK(table.find("negate") != std::string::npos);
  CHECK(table.find("post") != std::string::npos);
}

TEST_CASE("executor: nodes placed on a device get their inputs there", "[dataflow]") {
  two_workers();
  if (!has_backend(DeviceType::cuda)) SKIP_TEST("no GPU here: " << cuda_unavailable_reason());
  Graph g("g");
  Port on_gpu = g.op("mul", {g.input("x"), g.input("y")}).named("gpu_mul").on(Device::cuda(0));
  g.output("z", g.call("back", [](const Tensor& t) { return t.to(Device::cpu()); }, {on_gpu}));
  g.output("raw", on_gpu);
  Executor exec(g);
  auto out = exec({{"x", vec({1, 2})}, {"y", vec({3, 4})}});
  CHECK(out.at("raw").tensor().device() == Device::cuda(0));
  CHECK(out.at("z").tensor().to_vector<float>() == std::vector<float>{3, 8});
}

TEST_CASE("executor: GPU nodes own lanes, take constants uploaded once, and hand tensors on by events",
          "[dataflow][cuda]") {
  two_workers();
  if (!has_backend(DeviceType::cuda)) SKIP_TEST("no GPU here: " << cuda_unavailable_reason());
  const Device gpu = Device::cuda(0);
  Graph g("two_layers");
  Tensor w = Tensor::from_vector<float>({1, -1, 2, 0.5f}, {2, 2});
  Port h = g.op("matmul", {g.input("x"), g.constant("w", w)}).named("layer1").on(gpu);
  Port y = g.op("relu", {h}).named("act").on(gpu);
  g.output("y", y);
  Executor exec(g);
  const Tensor x = Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2});
  const std::vector<float> want = relu(matmul(x, w)).to_vector<float>();
  for (int i = 0; i < 3; ++i) {
    reset_sync_counts();
    Tensor out = exec({{"x", x.to(gpu)}}).at("y").tensor();
    CHECK(sync_count() == 0);  // the nodes' lanes waited on each other on the device
    CHECK(out.device() == gpu);
    CHECK(out.to_vector<float>() == want);
  }
}

TEST_CASE("executor: cuda_graph takes only ops and calls on one CUDA device, and says which node is not",
          "[dataflow]") {
  two_workers();
  Graph on_host("on_host");
  on_host.output("y", on_host.op("relu", {on_host.input("x")}).named("act"));
  CHECK_THROWS_AS(Executor(on_host, {.cuda_graph = true}), ValueError);
  CHECK_THROWS_WITH(Executor(on_host, {.cuda_graph = true}),
                    Catch::Contains("node 'act' runs on cpu") && Catch::Contains("one CUDA device"));

  Graph with_switch("with_switch");
  NodeRef sw = with_switch.switch_("sw", with_switch.input("p"), {with_switch.input("x")});
  with_switch.output("y", with_switch.merge("m", {{sw.out("then.0")}, {sw.out("else.0")}}));
  CHECK_THROWS_WITH(Executor(with_switch, {.cuda_graph = true}),
                    Catch::Contains("node 'sw' is a switch node") && Catch::Contains("only ops and calls"));

  Graph on_gpu("on_gpu");
  on_gpu.output("y", on_gpu.op("relu", {on_gpu.input("x")}).named("act").on(Device::cuda(0)));
  if (!has_backend(DeviceType::cuda))
    CHECK_THROWS_WITH(Executor(on_gpu, {.cuda_graph = true}), Catch::Contains("node 'act' is placed on cuda:0"));  // no GPU
}

TEST_CASE("executor: a captured CUDA graph replays with new inputs, and other shapes run on the actors",
          "[dataflow][cuda]") {
  two_workers();
  if (!has_backend(DeviceType::cuda)) SKIP_TEST("no GPU here: " << cuda_unavailable_reason());
  const Device gpu = Device::cuda(0);
  Graph g("mlp");
  Tensor w = Tensor::from_vector<float>({1, -1, 2, 0.5f, -0.25f, 3}, {3, 2});
  Port h = g.op("matmul", {g.input("x"), g.constant("w", w)}).named("layer").on(gpu);
  g.output("y", g.op("relu", {h}).named("act").on(gpu));
  Executor exec(g, {.cuda_graph = true});
  for (float scale : {1.0f, -2.0f, 0.5f}) {  // captured, then replayed twice
    const Tensor x = Tensor::from_vector<float>({scale, 2 * scale, -scale, 4 * scale, scale, -scale}, {2, 3});
    const std::vector<float> want = relu(matmul(x, w)).to_vector<float>();
    CHECK(exec({{"x", x.to(gpu)}}).at("y").tensor().to_vector<float>() == want);
  }
  const Tensor wide = Tensor::ones({5, 3});  // another shape: the node actors run it
  CHECK(exec({{"x", wide}}).at("y").tensor().to_vector<float>() == relu(matmul(wide, w)).to_vector<float>());
}
