// Lanes (devices/lane.h) and calls of actors that own one (actors/lane_call.h): the protocol on the
// host lane here, the same hand-offs on CUDA lanes where a GPU is present. Work on a host lane is
// held back by a Gate, so each test sees what happens while the lane has not run it yet: nothing
// that only queues may wait for it (a test that waited would hang at the gate and fail by timeout).
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <vector>

#include "actors/fork.h"
#include "devices/backend.h"
#include "devices/lane.h"
#include "devices/ops.h"
#include "devices/sync.h"
#include "support/skip.h"

using namespace troupe;

namespace {

// Work that waits for the test to open it.
class Gate {
 public:
  void open() {
    {
      std::lock_guard lock(mutex_);
      open_ = true;
    }
    cv_.notify_all();
  }
  void pass() {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return open_; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool open_ = false;
};

// A "kernel" on the calling thread's host lane: out = 2 * x, once the lane gets to it.
struct Doubler {
  std::shared_ptr<Gate> gate;
  Tensor operator()(const Tensor& x) {
    Tensor out = Tensor::empty(x.shape());
    float* o = out.mutable_data<float>();
    const float* in = x.data<float>();
    const int64_t n = x.numel();
    Lane::current(Device::cpu())->enqueue([gate = gate, o, in, n] {
      if (gate) gate->pass();
      for (int64_t i = 0; i < n; ++i) o[i] = 2 * in[i];
    });
    return out;
  }
};

// A consumer on its own host lane: out[0] = sum(x), read on its lane after x's producer.
struct Summer {
  Tensor operator()(const Tensor& x) {
    Tensor out = Tensor::zeros({1});
    float* o = out.mutable_data<float>();
    const float* in = x.data<float>();
    const int64_t n = x.numel();
    Lane::current(Device::cpu())->enqueue([o, in, n] {
      for (int64_t i = 0; i < n; ++i) o[0] += in[i];
    });
    return out;
  }
};

}  // namespace

TEST_CASE("a host lane runs its work in order and enqueue never waits for it", "[lane]") {
  auto lane = Lane::make(Device::cpu(), "ordered");
  Gate gate;
  std::vector<int> order;
  lane->enqueue([&] {
    gate.pass();
    order.push_back(1);
  });
  lane->enqueue([&] { order.push_back(2); });
  Event both = lane->record();
  CHECK_FALSE(both.done());  // the first work is still held at the gate: enqueue returned anyway
  gate.open();
  both.synchronize();
  CHECK(order == std::vector<int>{1, 2});
  CHECK(both.done());
}

TEST_CASE("a lane waits for another lane's event without blocking the caller", "[lane]") {
  auto producer = Lane::make(Device::cpu(), "producer");
  auto consumer = Lane::make(Device::cpu(), "consumer");
  Gate gate;
  std::atomic<int> value{0};
  int seen = -1;
  producer->enqueue([&] {
    gate.pass();
    value = 42;
  });
  consumer->wait(producer->record());  // returns at once
  consumer->enqueue([&] { seen = value.load(); });
  Event read = consumer->record();
  CHECK_FALSE(read.done());
  gate.open();
  read.synchronize();
  CHECK(seen == 42);
  // An event of the lane itself is no wait at all.
  consumer->wait(consumer->record());
  consumer->synchronize();
}

TEST_CASE("an error inside a lane reaches every waiter with its type", "[lane]") {
  auto a = Lane::make(Device::cpu(), "a");
  auto b = Lane::make(Device::cpu(), "b");
  bool later_ran = false;
  a->enqueue([] { throw ShapeError("matmul: f32[2,3] @ f32[4,5]"); });
  a->enqueue([&] { later_ran = true; });  // skipped: the lane has failed
  Event failed = a->record();
  b->wait(failed);
  bool b_ran = false;
  b->enqueue([&] { b_ran = true; });
  CHECK_THROWS_AS(failed.synchronize(), ShapeError);
  CHECK_THROWS_WITH(b->synchronize(), Catch::Contains("f32[2,3] @ f32[4,5]"));
  CHECK_FALSE(later_ran);
  CHECK_FALSE(b_ran);
  CHECK_THROWS_AS(a->synchronize(), ShapeError);  // every later event carries it, until a synchronize
  // Each lane's synchronize took its error: both run work again.
  bool again = false;
  a->enqueue([&] { again = true; });
  a->synchronize();
  CHECK(again);
  b->synchronize();
}

TEST_CASE("an idle host lane's events are done at once, with its error until a synchronize takes it", "[lane]") {
  auto lane = Lane::make(Device::cpu(), "idle");
  // The worker goes idle a moment after its last item: an event recorded then is done when made.
  // Each try waits for its own event first, so that the tries do not keep the worker busy.
  const auto idle_event = [&] {
    for (int tries = 0;; ++tries) {
      Event e = lane->record();
      if (e.done() || tries == 10000) return e;
      try {
        e.synchronize();
      } catch (const DTypeError&) {  // the lane's error, which the events carry
      }
    }
  };
  reset_sync_counts();
  CHECK(lane->record().done());  // nothing ever queued
  CHECK(sync_count() == 0);
  lane->enqueue([] { throw DTypeError("add: f32 and i64"); });
  CHECK_THROWS_AS(lane->record().synchronize(), DTypeError);
  Event idle = idle_event();
  REQUIRE(idle.done());
  CHECK_THROWS_WITH(idle.synchronize(), Catch::Contains("f32 and i64"));  // done, and failed
  bool skipped = true;
  lane->enqueue([&] { skipped = false; });
  CHECK_THROWS_AS(lane->synchronize(), DTypeError);  // takes the error
  CHECK(skipped);
  Event clean = idle_event();
  REQUIRE(clean.done());
  CHECK_NOTHROW(clean.synchronize());
  bool ran = false;
  lane->enqueue([&] { ran = true; });
  lane->synchronize();
  CHECK(ran);
}

TEST_CASE("host waits are counted with the op and actor, and TROUPE_SYNC_DEBUG=error refuses them", "[lane]") {
  auto lane = Lane::make(Device::cpu(), "counted");
  Gate gate;
  lane->enqueue([&] { gate.pass(); });
  reset_sync_counts();
  set_sync_debug(SyncDebug::error);
  CHECK_THROWS_WITH(lane->synchronize(), Catch::Contains("TROUPE_SYNC_DEBUG=error") && Catch::Contains("Lane::synchronize"));
  set_sync_debug(SyncDebug::off);
  CHECK(sync_count() == 0);  // refused before anything waited
  gate.open();
  Event done = lane->record();
  done.synchronize();  // waits (or finds it done already: then not counted)
  const uint64_t waited = sync_count();
  CHECK(waited <= 1);
  for (const SyncSite& site : sync_sites()) {
    CHECK(site.op == "Event::synchronize");
    CHECK(site.actor == "main");
    CHECK(site.device == Device::cpu());
  }
  done.synchronize();  // done: no wait, not counted
  CHECK(sync_count() == waited);
}

TEST_CASE("an actor's call on its lane completes when queued and hands its result on by event", "[lane]") {
  auto gate = std::make_shared<Gate>();
  ModuleActor<Doubler> doubler(ActorOptions{.name = "doubler", .host_lane = true}, Doubler{gate});
  ModuleActor<Summer> summer(ActorOptions{.name = "summer", .host_lane = true});
  REQUIRE(doubler.lane() != nullptr);
  Tensor x = Tensor::from_vector<float>({1, 2, 3, 4}, {4});

  Future<Tensor> doubled = fork(doubler, x);
  Event doubled_ready = doubled.event();
  CHECK_FALSE(doubled_ready.done());        // the doubling is held at the gate...
  Tensor y = wait(doubled);                 // ...yet the call is done: its work is queued
  CHECK(y.storage()->ready().valid());      // y's bytes are marked with that event
  Future<Tensor> total = fork(summer, y);   // the summer's lane waits for it, not this thread
  Event total_ready = total.event();
  CHECK_FALSE(total_ready.done());
  Tensor s = wait(total);
  gate->open();
  total_ready.synchronize();
  CHECK(s.data<float>()[0] == 20.0f);
  CHECK(y.to_vector<float>() == std::vector<float>{2, 4, 6, 8});
}

TEST_CASE("fork onto a lane runs the task with the lane current", "[lane]") {
  std::shared_ptr<Lane> lane = Lane::make(Device::cpu(), "forked");
  Future<bool> f = fork(lane, [&] { return Lane::current(Device::cpu()) == lane.get(); });
  Event e = f.event();
  CHECK(wait(f));
  e.synchronize();
  Future<void> none = fork([] {});
  CHECK_FALSE(none.event().valid());  // a plain task carries no event
  wait(none);
}

TEST_CASE("a CPU actor without a lane runs as before", "[lane]") {
  ModuleActor<Summer> plain("plain");
  CHECK(plain.lane() == nullptr);
}

// The same hand-offs on CUDA lanes: two GPU actors on different streams, no host sync between them.
namespace {
struct GpuLayer {
  Tensor w;
  Tensor operator()(const Tensor& x) const { return relu(matmul(x, w)); }
  void to(Device d) { w = w.to(d); }
};
}  // namespace

TEST_CASE("GPU actors hand tensors between streams by events, with no host sync", "[lane][cuda]") {
  if (!has_backend(DeviceType::cuda)) SKIP_TEST("no GPU here: " << cuda_unavailable_reason());
  const Device gpu = Device::cuda(0);
  Tensor w1 = Tensor::from_vector<float>({1, -1, 2, 0.5f}, {2, 2});
  Tensor w2 = Tensor::from_vector<float>({0.5f, 1, -2, 1}, {2, 2});
  ModuleActor<GpuLayer> first(ActorOptions{.name = "first", .device = gpu}, GpuLayer{w1});
  ModuleActor<GpuLayer> second(ActorOptions{.name = "second", .device = gpu}, GpuLayer{w2});
  CHECK(first->w.device() == gpu);  // uploaded once, at construction
  Tensor x = Tensor::from_vector<float>({1, 2, 3, 4}, {2, 2}).to(gpu);
  reset_sync_counts();
  Tensor h = wait(fork(first, x));
  Future<Tensor> out = fork(second, h);
  Event done = out.event();
  Tensor y = wait(out);
  CHECK(sync_count() == 0);  // queued, handed over, queued: the host never waited
  CHECK(y.device() == gpu);
  const std::vector<float> got = y.to_vector<float>();  // the one wait
  CHECK(sync_count() == 1);
  const std::vector<float> want = relu(matmul(relu(matmul(x.to(Device::cpu()), w1)), w2)).to_vector<float>();
  CHECK(got == want);
  CHECK(done.done());
  CHECK_THROWS_AS(y.data<float>(), DeviceError);  // host code cannot touch device memory
}
