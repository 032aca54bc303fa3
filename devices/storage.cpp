#include "devices/storage.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>

#include "devices/backend.h"
#include "devices/error.h"
#include "devices/host_allocator.h"
#include "devices/tensor.h"

namespace troupe {

namespace {

class CpuBackend final : public DeviceBackend {
 public:
  void* allocate(size_t nbytes, int, void**) override { return host_allocate(nbytes); }
  void deallocate(void* ptr, size_t nbytes, int, void*) override { host_deallocate(ptr, nbytes); }
  void copy(void* dst, Device, const void* src, Device, size_t nbytes) override {
    if (nbytes) std::memcpy(dst, src, nbytes);
  }
  int device_count() override { return 1; }
  std::string describe() override { return "host memory: 64-byte aligned, huge pages and a reuse cache for blocks >= 1 MiB"; }
};

// Read on every allocation and free without the lock: set once each, as the libraries load.
struct Backends {
  std::mutex mutex;
  std::atomic<DeviceBackend*> by_type[2] = {nullptr, nullptr};
  std::string cuda_reason = "Troupe was built without CUDA (nvcc was not found at configure time)";
};

Backends& backends() {
  static CpuBackend cpu;
  static Backends* b = [] {
    auto* x = new Backends;  // never destroyed: storages may be freed during static destruction
    x->by_type[0] = &cpu;
    return x;
  }();
  return *b;
}

}  // namespace

Tensor DeviceBackend::to_host(const Tensor& contiguous) { return contiguous.to(Device::cpu()); }
Tensor DeviceBackend::to_host_async(const Tensor& contiguous, uint64_t, std::vector<std::pair<uint64_t, Event>>&) {
  return to_host(contiguous);
}

Tensor DeviceBackend::unstage_shared(std::span<const uint8_t>, Device device) {
  throw DeviceError("unstage_shared: " + device.str() + "'s backend stages nothing in shared memory");
}

void register_backend(DeviceType type, DeviceBackend* backend) {
  std::lock_guard lock(backends().mutex);
  backends().by_type[static_cast<int>(type)] = backend;
}

bool has_backend(DeviceType type) {
  return backends().by_type[static_cast<int>(type)].load(std::memory_order_acquire) != nullptr;
}

DeviceBackend& backend(DeviceType type) {
  if (auto* b = backends().by_type[static_cast<int>(type)].load(std::memory_order_acquire)) return *b;
  std::lock_guard lock(backends().mutex);
  throw DeviceError(std::string("no ") + name(type) + " backend: " + backends().cuda_reason);
}

std::string cuda_unavailable_reason() {
  std::lock_guard lock(backends().mutex);
  return backends().by_type[1].load() ? "" : backends().cuda_reason;
}

void set_cuda_unavailable_reason(std::string reason) {
  std::lock_guard lock(backends().mutex);
  backends().cuda_reason = std::move(reason);
}

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  DeviceBackend& b = backend(device.type);
  if (device.index < 0 || device.index >= b.device_count())
    throw DeviceError("no device " + device.str() + " (this machine has " + std::to_string(b.device_count()) +
                      " " + name(device.type) + " device(s))");
  data_ = b.allocate(nbytes, device.index, &owner_);
}

Storage::Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter)
    : data_(data), nbytes_(nbytes), device_(device), deleter_(std::move(deleter)) {}

Storage::~Storage() {
  if (deleter_) {
    deleter_(data_);
  } else if (data_) {
    DeviceBackend& b = backend(device_.type);
    if (uses_.empty())
      b.deallocate(data_, nbytes_, device_.index, owner_);
    else
      b.deallocate_after(data_, nbytes_, device_.index, owner_, uses_);
  }
}

void Storage::add_use(Event event) {
  if (!event.valid()) return;
  std::lock_guard lock(ready_mutex_);
  for (Event& e : uses_)
    if (e.state()->lane() == event.state()->lane()) {
      e = std::move(event);
      return;
    }
  uses_.push_back(std::move(event));
}

}  // namespace troupe
