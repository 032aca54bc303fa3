#pragma once
// Host events a CUDA lane's stream waits for (Lane::wait of a host lane's event), awaited on a thread
// of the lane's own. Each event gets the next number; once it is done (failed too: the stream must not
// hang) that thread writes the number to `released`, a word of mapped pinned memory that a kernel
// queued on the stream polls (queue_wait_until, cuda_util.h). CUDA's host-function thread serves
// every stream of the process: a host function that blocked there until the event held back every
// other stream's callbacks, and never returned when the awaited host work waited for one of them.
//
//   HostWaits waits(released);               // released: a zeroed word the device reads
//   uint64_t n = waits.add(event.state());   // returns at once
//   queue_wait_until(released, n, stream, device);
//
// No CUDA here, so that a test without a GPU can follow it.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>

#include "devices/event.h"

namespace troupe::cuda {

class HostWaits {
 public:
  explicit HostWaits(uint64_t* released);
  ~HostWaits();  // once every added event is done and its number written
  HostWaits(const HostWaits&) = delete;
  HostWaits& operator=(const HostWaits&) = delete;

  // The number `released` reaches once event is done (and every event added before it).
  uint64_t add(std::shared_ptr<Event::State> event);

 private:
  void run();

  uint64_t* released_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Event::State>> pending_;
  uint64_t added_ = 0;
  bool closing_ = false;
  std::thread thread_;  // last: starts once the rest is made
};

}  // namespace troupe::cuda
