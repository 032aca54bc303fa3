// The host lane: a worker thread that runs its lane's work in order, with host events. It plays a
// device's part where there is none: enqueue returns at once, waits between lanes block only the
// waiting lane's own thread, and errors travel along events as a CUDA lane's would.
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "devices/error.h"
#include "devices/lane.h"
#include "devices/sync.h"

namespace troupe {

namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct HostEvent final : Event::State {
  explicit HostEvent(const void* owner) : owner_(owner) { device = Device::cpu(); }

  bool done() override {
    std::lock_guard lock(mutex_);
    return done_;
  }
  void wait() override {
    std::unique_lock lock(mutex_);
    cv_.wait(lock, [&] { return done_; });
  }
  std::exception_ptr error() override {
    std::lock_guard lock(mutex_);
    return error_;
  }
  double elapsed_ms(Event::State& later) override {
    auto* other = dynamic_cast<HostEvent*>(&later);
    if (!other) throw DeviceError("Event::elapsed_ms: a host event and a device event have no common clock");
    return (other->when_ns_ - when_ns_) / 1e6;
  }
  const void* lane() const override { return owner_; }

  void complete(std::exception_ptr error) {
    {
      std::lock_guard lock(mutex_);
      error_ = std::move(error);
      when_ns_ = now_ns();
      done_ = true;
    }
    cv_.notify_all();
  }

 private:
  const void* owner_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
  int64_t when_ns_ = 0;
};

class HostLane final : public Lane {
 public:
  explicit HostLane(std::string name) : Lane(Device::cpu(), std::move(name)), thread_([this] { run(); }) {}

  ~HostLane() override {
    {
      std::lock_guard lock(mutex_);
      closing_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  void enqueue(std::function<void()> fn) override { push({std::move(fn), nullptr, {}, false}); }

  Event record() override { return mark(false); }

  void wait(const Event& event) override {
    if (!event.valid() || event.state()->lane() == this) return;
    push({nullptr, nullptr, event, false});
  }

  void synchronize(std::string_view call) override {
    mark(true).synchronize(call);  // rethrows the lane's error, if any, and the lane goes on without it
  }

 private:
  // One entry of the queue: work, an event to complete, or an event to wait for.
  struct Item {
    std::function<void()> work;
    std::shared_ptr<HostEvent> marks;
    Event awaits;
    bool clears = false;  // a synchronize(): the lane's error ends with this event
  };

  // An idle lane (nothing queued, nothing running) has done all its work: its mark is done at once,
  // with no item for the worker, whose wake-up would cost the caller more than the call (a CPU op
  // in a host-lane actor's call runs on the caller's thread, so this is the common case).
  Event mark(bool clears) {
    auto event = std::make_shared<HostEvent>(this);
    {
      std::lock_guard lock(mutex_);
      if (items_.empty() && !running_) {
        event->complete(failed_);
        if (clears) failed_ = nullptr;
        return Event(event);
      }
      items_.push_back({nullptr, event, {}, clears});
    }
    cv_.notify_one();
    return Event(event);
  }

  void push(Item item) {
    {
      std::lock_guard lock(mutex_);
      items_.push_back(std::move(item));
    }
    cv_.notify_one();
  }

  void run() {
    SyncAttribution::set_thread_actor(name().empty() ? "host lane" : name());
    for (;;) {
      Item item;
      std::exception_ptr failed;
      {
        std::unique_lock lock(mutex_);
        running_ = false;
        cv_.wait(lock, [&] { return closing_ || !items_.empty(); });
        if (items_.empty()) return;
        item = std::move(items_.front());
        items_.pop_front();
        running_ = true;
        failed = failed_;
      }
      if (item.work) {
        if (failed) continue;
        LaneGuard on(*this);
        try {
          item.work();
        } catch (...) {
          set_failed(std::current_exception());
        }
      } else if (item.marks) {
        item.marks->complete(failed);
        if (item.clears) set_failed(nullptr);
      } else if (!failed) {
        // The wait blocks this lane's thread only, never the caller that enqueued it.
        Event::State& awaited = *item.awaits.state();
        if (!awaited.done()) {
          if (awaited.device.is_cuda()) note_sync(awaited.device, "host lane waits for a device event");
          awaited.wait();
        }
        if (std::exception_ptr error = awaited.error()) set_failed(error);
      }
    }
  }

  void set_failed(std::exception_ptr error) {
    std::lock_guard lock(mutex_);
    failed_ = std::move(error);
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Item> items_;
  bool running_ = false;       // the worker is on an item taken from items_
  std::exception_ptr failed_;  // the lane's error: skips work until a synchronize() takes it
  bool closing_ = false;
  std::thread thread_;  // last: starts once the queue exists
};

}  // namespace

std::unique_ptr<Lane> detail::make_host_lane(std::string name) { return std::make_unique<HostLane>(std::move(name)); }

}  // namespace troupe
