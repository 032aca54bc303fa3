#pragma once
// Bytes on one device, shared by every tensor that views them; freed with the last view.
// Storage either owns an allocation from its device's backend or adopts foreign memory
// (a received message, a mapped file) together with the deleter that releases it.
//
//   auto s = std::make_shared<Storage>(1024, Device::cpu());
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "devices/device.h"
#include "devices/event.h"

namespace troupe {

class Storage {
 public:
  Storage(size_t nbytes, Device device);
  Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() { return data_; }
  const void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  // Counts Tensor::mutable_data() calls on views of these bytes, so that what is derived from them
  // (packed GEMM weights) can tell it is stale. Writes through a pointer obtained before the last
  // such derivation are not counted: write through a fresh mutable_data().
  uint64_t version() const { return version_.load(std::memory_order_acquire); }
  void bump_version() { version_.fetch_add(1, std::memory_order_acq_rel); }

  // The event after the work that last wrote these bytes on a lane (devices/lane.h): a consumer on
  // another lane waits for it on the device before reading. Done (empty) for bytes no lane wrote.
  Event ready() const {
    if (!has_ready_.load(std::memory_order_acquire)) return Event();  // most bytes: no lock
    std::lock_guard lock(ready_mutex_);
    return ready_;
  }
  void set_ready(Event event) {
    std::lock_guard lock(ready_mutex_);
    ready_ = std::move(event);
    has_ready_.store(ready_.valid(), std::memory_order_release);
  }
  // Whether these bytes, which no lane wrote, were found complete on the device (the default
  // stream idle after version `v`) and not written since: a lane then skips its look at the
  // default stream for them (one driver call per call argument).
  bool settled() const { return settled_version_.load(std::memory_order_acquire) == version(); }
  void mark_settled(uint64_t v) { settled_version_.store(v, std::memory_order_release); }
  // The event after a lane's work that read these bytes: freeing them waits for it on the device,
  // so a block is not reused while another lane still reads it. One per lane, the latest.
  void add_use(Event event);

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  std::function<void(void*)> deleter_;  // empty: the backend allocated it
  void* owner_ = nullptr;               // the backend's, for the free (DeviceBackend::allocate)
  std::atomic<uint64_t> version_{0};
  std::atomic<uint64_t> settled_version_{UINT64_MAX};
  mutable std::mutex ready_mutex_;
  std::atomic<bool> has_ready_{false};  // ready_ is set: read without the lock
  Event ready_;
  std::vector<Event> uses_;
};

}  // namespace troupe
