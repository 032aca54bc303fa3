// A call to an idle actor that owns a lane runs on the forking thread (actors/fork.h, fork_module):
// the actor's order and exclusivity hold as for queued calls, errors reach wait(), nested forks do
// not deadlock. Host lanes here; the CUDA cases check which waits still need a recorded event.
#include <catch2/catch.hpp>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "actors/fork.h"
#include "devices/backend.h"
#include "devices/lane.h"
#include "devices/ops.h"
#include "support/close.h"
#include "support/skip.h"

using namespace troupe;

namespace {

// Holds a call until the test opens it, and says when a call has reached it.
class Latch {
 public:
  void arrive_and_hold() {
    std::unique_lock lock(mutex_);
    arrived_ = true;
    cv_.notify_all();
    cv_.wait(lock, [&] { return open_; });
  }
  void wait_arrived() {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return arrived_; });
  }
  void open() {
    std::lock_guard lock(mutex_);
    open_ = true;
    cv_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool arrived_ = false, open_ = false;
};

// Notes each call's argument and thread; call 1 waits at the latch when there is one; a negative
// argument fails the call.
struct Recorder {
  std::mutex mutex;
  std::vector<int> order;
  std::vector<std::thread::id> threads;
  Latch* latch = nullptr;
  int operator()(int i) {
    if (i < 0) throw DTypeError("recorder: negative argument " + std::to_string(i));
    {
      std::lock_guard lock(mutex);
      order.push_back(i);
      threads.push_back(std::this_thread::get_id());
    }
    if (i == 1 && latch) latch->arrive_and_hold();
    return 10 * i;
  }
};

const ActorOptions host_lane(const char* name) { return ActorOptions{.name = name, .host_lane = true}; }

}  // namespace

TEST_CASE("a call to an idle lane actor runs on the forking thread and is done when fork returns", "[lane][inline]") {
  ModuleActor<Recorder> actor(host_lane("recorder"));
  Future<int> f = fork(actor, 4);
  CHECK(f.ready());
  CHECK(f.event().valid());  // the lane's mark after the call
  CHECK(wait(f) == 40);
  CHECK_FALSE(f.valid());  // taken
  CHECK_THROWS_WITH(f.get(), Catch::Contains("empty"));
  REQUIRE(actor->threads.size() == 1);
  CHECK(actor->threads[0] == std::this_thread::get_id());
  Future<int> g = fork(actor, 5);
  Future<int> moved = std::move(g);
  CHECK_FALSE(g.valid());  // a moved-from future is empty, as a task's is
  CHECK(wait(moved) == 50);
}

TEST_CASE("a call forked while an inline call runs queues behind it and runs after it, in order", "[lane][inline]") {
  Latch latch;
  ModuleActor<Recorder> actor(host_lane("ordered"));
  actor->latch = &latch;
  int first = 0;
  std::thread other([&] { first = wait(fork(actor, 1)); });  // runs inline on `other`, held at the latch
  latch.wait_arrived();
  Future<int> second = fork(actor, 2);  // the actor is busy: queued
  Future<int> third = fork(actor, 3);
  CHECK_FALSE(second.ready());
  CHECK_FALSE(third.ready());
  latch.open();
  other.join();
  CHECK(wait(third) == 30);
  CHECK(wait(second) == 20);
  CHECK(first == 10);
  CHECK(actor->order == std::vector<int>{1, 2, 3});
  // Idle again: the next call runs here once more.
  CHECK(wait(fork(actor, 4)) == 40);
  CHECK(actor->threads.back() == std::this_thread::get_id());
}

TEST_CASE("an inline call's error is rethrown by wait, with its type, and the actor goes on", "[lane][inline]") {
  ModuleActor<Recorder> actor(host_lane("failing"));
  Future<int> failed = fork(actor, -2);
  CHECK(failed.ready());
  CHECK_THROWS_AS(wait(failed), DTypeError);
  Future<int> again = fork(actor, -3);
  CHECK_THROWS_WITH(again.get(), Catch::Contains("negative argument -3"));
  CHECK(wait(fork(actor, 6)) == 60);
  CHECK(actor->order == std::vector<int>{6});
}

namespace {

// A lane actor whose call forks another lane actor and waits for it.
struct Chain {
  ModuleActor<Recorder>* next = nullptr;
  int operator()(int i) { return wait(fork(*next, i)) + 1; }
};

// A lane actor whose call forks itself: the nested call can only run after this one.
struct SelfForker {
  ModuleActor<SelfForker>* self = nullptr;
  std::vector<Future<int>> later;
  std::vector<int> order;
  int operator()(int i) {
    order.push_back(i);
    if (i > 0) later.push_back(fork(*self, i - 1));
    return i;
  }
};

// A lane actor whose call waits for a later call of itself: a deadlock, refused as before.
struct SelfWaiter {
  ModuleActor<SelfWaiter>* self = nullptr;
  int operator()(int i) { return i > 0 ? wait(fork(*self, i - 1)) : 0; }
};

}  // namespace

TEST_CASE("nested forks from an inline call do not deadlock", "[lane][inline]") {
  ModuleActor<Recorder> last(host_lane("last"));
  ModuleActor<Chain> chain(host_lane("chain"), Chain{&last});
  CHECK(wait(fork(chain, 7)) == 71);
  CHECK(last->threads.back() == std::this_thread::get_id());  // both inline, on this thread

  ModuleActor<SelfForker> forker(host_lane("self forker"));
  forker->self = &forker;
  CHECK(wait(fork(forker, 2)) == 2);
  // The nested calls queued behind the one that forked them; each ran after it.
  while (!forker->later.empty()) {
    Future<int> f = std::move(forker->later.front());
    forker->later.erase(forker->later.begin());
    wait(f);
  }
  CHECK(forker->order == std::vector<int>{2, 1, 0});

  ModuleActor<SelfWaiter> waiter(host_lane("self waiter"));
  waiter->self = &waiter;
  CHECK_THROWS_WITH(wait(fork(waiter, 1)), Catch::Contains("deadlock"));
}

namespace {
// A plain CPU actor (no lane: its calls run in its own actor) that calls a lane actor.
struct Caller {
  ModuleActor<Recorder>* callee = nullptr;
  std::thread::id thread;
  int operator()(int i) {
    thread = std::this_thread::get_id();
    return wait(fork(*callee, i));
  }
};
}  // namespace

TEST_CASE("another actor's call runs a lane actor's call inline on its own thread", "[lane][inline]") {
  ModuleActor<Recorder> callee(host_lane("callee"));
  ModuleActor<Caller> caller("caller", Caller{&callee, {}});
  Future<int> f = fork(caller, 8);
  CHECK(wait(f) == 80);
  REQUIRE(callee->threads.size() == 1);
  CHECK(callee->threads[0] == caller->thread);
}

// On a GPU: a call's mark is recorded only where something needs it, and those waits still hold.
namespace {
struct Scale {
  Tensor factor;
  Tensor operator()(const Tensor& x) const { return mul(x, factor); }
  void to(Device d) { factor = factor.to(d); }
};
}  // namespace

TEST_CASE("a GPU actor's result read on another lane waits for its mark, recorded then", "[lane][inline][cuda]") {
  if (!has_backend(DeviceType::cuda)) SKIP_TEST("no GPU here: " << cuda_unavailable_reason());
  const Device gpu = Device::cuda(0);
  // Large enough that the first kernel is still running when the second lane queues its own.
  const int64_t n = int64_t(1) << 24;
  Tensor x = Tensor::full({n}, 1.5f).to(gpu);
  ModuleActor<Scale> first(ActorOptions{.name = "first", .device = gpu}, Scale{Tensor::full({1}, 2.0f)});
  ModuleActor<Scale> second(ActorOptions{.name = "second", .device = gpu}, Scale{Tensor::full({1}, -1.0f)});
  for (int round = 0; round < 3; ++round) {
    Tensor y = wait(fork(first, x));
    Tensor z = wait(fork(second, y));  // second's stream waits for first's mark, on the device
    Tensor twice = wait(fork(second, z));  // its own result: no event needed, the stream's order holds
    const std::vector<float> got = twice.to_vector<float>();
    REQUIRE(got.size() == static_cast<size_t>(n));
    CHECK(got.front() == 3.0f);
    CHECK(got.back() == 3.0f);
    CHECK(got[n / 2] == 3.0f);
  }
}

TEST_CASE("a block freed on another stream waits for the lane that read it", "[lane][inline][cuda]") {
  if (!has_backend(DeviceType::cuda)) SKIP_TEST("no GPU here: " << cuda_unavailable_reason());
  const Device gpu = Device::cuda(0);
  const int64_t n = int64_t(1) << 24;
  ModuleActor<Scale> reader(ActorOptions{.name = "reader", .device = gpu}, Scale{Tensor::full({1}, 3.0f)});
  for (int round = 0; round < 3; ++round) {
    Tensor y;
    {
      Tensor x = Tensor::full({n}, 2.0f).to(gpu);  // on this thread's (the default) stream
      y = wait(fork(reader, x));
    }  // x is freed here, on the default stream, while the reader's kernel may still read it
    // Likely the same block again, overwritten on the default stream: the free waited for the reader.
    Tensor overwrite = Tensor::full({n}, -7.0f).to(gpu);
    const std::vector<float> got = y.to_vector<float>();
    CHECK(got.front() == 6.0f);
    CHECK(got.back() == 6.0f);
    CHECK(got[n / 3] == 6.0f);
  }
}
