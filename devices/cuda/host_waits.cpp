#include "devices/cuda/host_waits.h"

#include <atomic>

namespace troupe::cuda {

HostWaits::HostWaits(uint64_t* released) : released_(released), thread_([this] { run(); }) {}

HostWaits::~HostWaits() {
  {
    std::lock_guard lock(mutex_);
    closing_ = true;
  }
  cv_.notify_one();
  thread_.join();
}

uint64_t HostWaits::add(std::shared_ptr<Event::State> event) {
  uint64_t number;
  {
    std::lock_guard lock(mutex_);
    pending_.push_back(std::move(event));
    number = ++added_;
  }
  cv_.notify_one();
  return number;
}

void HostWaits::run() {
  for (uint64_t done = 0;;) {
    std::shared_ptr<Event::State> event;
    {
      std::unique_lock lock(mutex_);
      cv_.wait(lock, [&] { return closing_ || !pending_.empty(); });
      if (pending_.empty()) return;
      event = std::move(pending_.front());
      pending_.pop_front();
    }
    event->wait();
    // Release: what the host work wrote before its event is visible to whoever sees the number.
    std::atomic_ref<uint64_t>(*released_).store(++done, std::memory_order_release);
  }
}

}  // namespace troupe::cuda
