#include <catch2/catch.hpp>

#include <atomic>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <thread>

#include "actors/fork.h"
#include "actors/promise.h"
#include "actors/runtime.h"
#include "support/two_workers.h"
#include "devices/ops.h"

using namespace troupe;

namespace {

int64_t tree(int depth, int fanout) {
  if (depth == 0) return 1;
  std::vector<Future<int64_t>> children;
  for (int i = 0; i < fanout; ++i) children.push_back(fork(tree, depth - 1, fanout));
  int64_t total = 0;
  for (auto& c : children) total += wait(c);
  return total;
}

// Depth 16 along one spine; each level also forks three small subtrees.
int64_t spine(int depth) {
  if (depth == 0) return 1;
  std::vector<Future<int64_t>> children;
  children.push_back(fork(spine, depth - 1));
  for (int i = 0; i < 3; ++i) children.push_back(fork(tree, std::min(depth - 1, 2), 4));
  int64_t total = 0;
  for (auto& c : wait_all(children)) total += c;
  return total;
}

struct Counter {
  int calls = 0;
  std::vector<int> seen;
  int operator()(int x) {
    seen.push_back(x);
    return ++calls;
  }
  int add(int a, int b) const { return a + b; }
};

}  // namespace

TEST_CASE("fork returns at once and wait returns the value", "[fork]") {
  two_workers();
  auto f = fork([](int a, int b) { return a * b; }, 6, 7);
  CHECK(f.valid());
  CHECK(wait(f) == 42);
  CHECK_FALSE(f.valid());
  CHECK_THROWS_AS(f.get(), ValueError);
}

TEST_CASE("the TorchScript tutorial's 100 forks of neg", "[fork]") {
  two_workers();
  Tensor x = Tensor::ones({});
  std::vector<Future<Tensor>> futures;
  for (int i = 0; i < 100; ++i) futures.push_back(fork([](const Tensor& t) { return neg(t); }, x));
  double total = 0;
  for (auto& t : wait_all(futures)) total += t.item<double>();
  CHECK(total == -100.0);
}

TEST_CASE("free functions, member functions, move-only results, void", "[fork]") {
  two_workers();
  Counter c;
  CHECK(wait(fork(&Counter::add, &c, 2, 3)) == 5);
  auto p = fork([] { return std::make_unique<int>(9); });
  CHECK(*wait(p) == 9);
  std::atomic<int> hits{0};
  std::vector<Future<void>> done;
  for (int i = 0; i < 10; ++i) done.push_back(fork([&hits] { ++hits; }));
  wait_all(done);
  CHECK(hits == 10);
}

TEST_CASE("a task's exception is rethrown by wait", "[fork][errors]") {
  two_workers();
  auto f = fork([]() -> int { throw ShapeError("boom: f32[2] vs f32[3]"); });
  CHECK_THROWS_AS(wait(f), ShapeError);
  std::vector<Future<int>> fs;
  fs.push_back(fork([] { return 1; }));
  fs.push_back(fork([]() -> int { throw std::runtime_error("second"); }));
  fs.push_back(fork([] { return 3; }));
  CHECK_THROWS_WITH(wait_all(fs), "second");
}

TEST_CASE("nested fork/wait never deadlocks on 2 workers", "[fork][nested]") {
  two_workers();
  CHECK(tree(7, 4) == 16384);                    // 4^7 leaves, every level waiting on its children
  // Depth 16, fan-out 4 at every level: 1 + 3 + 12 + 14 * 48 leaves.
  CHECK(spine(16) == 688);
}

TEST_CASE("forks from many threads at once", "[fork]") {
  two_workers();
  std::vector<std::thread> threads;
  std::atomic<int64_t> total{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&total] {
      for (int i = 0; i < 50; ++i) total += wait(fork(tree, 2, 3));
    });
  for (auto& t : threads) t.join();
  CHECK(total == 4 * 50 * 9);
}

TEST_CASE("module calls are serialised in fork order", "[fork][module]") {
  two_workers();
  ModuleActor<Counter> counter("counter");
  std::vector<Future<int>> calls;
  for (int i = 0; i < 200; ++i) calls.push_back(fork(counter, i));
  auto results = wait_all(calls);
  for (int i = 0; i < 200; ++i) CHECK(results[i] == i + 1);
  std::vector<int> expected(200);
  std::iota(expected.begin(), expected.end(), 0);
  CHECK(counter->seen == expected);
  CHECK(counter.name() == "counter");
}

TEST_CASE("module calls forked from inside tasks", "[fork][module]") {
  two_workers();
  ModuleActor<Counter> counter("shared");
  std::vector<Future<int>> outer;
  for (int i = 0; i < 8; ++i)
    outer.push_back(fork([&counter, i] {
      std::vector<Future<int>> inner;
      for (int j = 0; j < 10; ++j) inner.push_back(fork(counter, i * 10 + j));
      int last = 0;
      for (auto& f : inner) last = wait(f);
      return last;
    }));
  wait_all(outer);
  CHECK(counter->calls == 80);
  CHECK(counter->seen.size() == 80);
}

TEST_CASE("a module call that waits for a later call of itself is an error, not a hang", "[fork][module][errors]") {
  two_workers();
  struct SelfWaiter {
    ModuleActor<SelfWaiter>* self = nullptr;
    int operator()(int depth) { return depth == 0 ? 0 : wait(fork(*self, depth - 1)); }
  };
  ModuleActor<SelfWaiter> m("self_waiter");
  m->self = &m;
  auto f = fork(m, 1);
  CHECK_THROWS_WITH(wait(f), Catch::Contains("self_waiter") && Catch::Contains("deadlock"));
}

TEST_CASE("a promise completes its future from another thread", "[fork][promise]") {
  two_workers();
  Promise<std::string> p;
  Future<std::string> f = p.future();
  CHECK_THROWS_AS(p.future(), ValueError);
  std::thread producer([p]() mutable { p.set_value("done"); });
  CHECK(wait(f) == "done");
  producer.join();
  CHECK(p.fulfilled());
  CHECK_THROWS_AS(p.set_value("again"), ValueError);
  Promise<int> failing;
  auto g = failing.future();
  failing.set_exception(std::make_exception_ptr(TimeoutError("late")));
  CHECK_THROWS_AS(wait(g), TimeoutError);
}

namespace {

struct Sleeper {
  int operator()(int ms) {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    return ms;
  }
};

}  // namespace

// While a waiting thread runs a module's calls itself, the actor's requests leave them to it (no
// scheduler thread blocks on the module); a call nobody waits for must still run.
TEST_CASE("a module call nobody waits for runs while another thread runs the module's calls", "[fork][module]") {
  two_workers();
  ModuleActor<Sleeper> sleeper("sleeper");
  for (int round = 0; round < 20; ++round) {
    Future<int> slow = fork(sleeper, 30);
    std::thread waiter([&] { CHECK(wait(slow) == 30); });  // runs the slow call itself, mostly
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    Future<int> unwaited = fork(sleeper, 0);  // its request finds the run lock taken
    waiter.join();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!unwaited.ready() && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    REQUIRE(unwaited.ready());
    CHECK(wait(unwaited) == 0);
  }
}
