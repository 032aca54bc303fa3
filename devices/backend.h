#pragma once
// One backend per device type allocates its memory and copies bytes to and from the host.
// cpu is always there; cuda registers itself when Troupe was built with nvcc and a GPU is present.
//
//   DeviceBackend& cuda = backend(DeviceType::cuda);   // DeviceError saying why when unavailable
//   void* owner = nullptr;
//   void* p = cuda.allocate(bytes, 0, &owner);        // and later cuda.deallocate(p, bytes, 0, owner)
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "devices/device.h"
#include "devices/dtype.h"
#include "devices/event.h"

namespace troupe {

class Tensor;

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  // *owner: what the backend needs back to free the block without looking it up (a CUDA block: its
  // stream's share of the pool), kept by the Storage; nullptr when it needs nothing.
  virtual void* allocate(size_t nbytes, int index, void** owner) = 0;
  virtual void deallocate(void* ptr, size_t nbytes, int index, void* owner) = 0;
  // Frees once the work before each event is done (the lanes that read the block). A device orders
  // the free after them on its own; here the host holds the bytes until the readers are done.
  virtual void deallocate_after(void* ptr, size_t nbytes, int index, void* owner, const std::vector<Event>& events) {
    for (const Event& e : events)
      if (e.valid()) e.state()->wait();
    deallocate(ptr, nbytes, index, owner);
  }
  // Copies nbytes between any two devices this backend can reach (one side may be the host).
  // Ordered after all work queued on the current stream; returns once the host side is safe.
  virtual void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) = 0;
  // Writes src's elements, converted to dst's dtype, into dst (contiguous, same device and numel).
  // Returns false when the backend has no kernel for it; the caller then goes through the host.
  virtual bool copy_elements(const Tensor& src, Tensor& dst) { return false; }
  // A contiguous tensor of this backend's as a host tensor (host_contiguous(): the device's pinned
  // staging memory where it has some).
  virtual Tensor to_host(const Tensor& contiguous);
  // The same without waiting (devices/host_staging.h): the copy is queued on the calling thread's
  // stream in pieces of piece_bytes, and `pieces` gets (bytes copied so far, event) after each.
  // A backend that cannot queue it copies at once and leaves `pieces` empty.
  virtual Tensor to_host_async(const Tensor& contiguous, uint64_t piece_bytes,
                               std::vector<std::pair<uint64_t, Event>>& pieces);
  // Large tensors between processes of one host through pinned shared memory, neither host waiting
  // (cuda/shared_staging.h): queues the copy out of `contiguous` and returns the descriptor the
  // receiving process passes to unstage_shared; nullopt when this backend cannot stage it now (then
  // send the bytes another way). `channel` names one sender-receiver pair.
  virtual std::optional<std::vector<uint8_t>> stage_shared(const Tensor& contiguous, const std::string& channel) {
    return std::nullopt;
  }
  // The tensor a descriptor describes, on `device`. ValueError for a malformed descriptor.
  virtual Tensor unstage_shared(std::span<const uint8_t> descriptor, Device device);
  virtual int device_count() = 0;
  virtual std::string describe() = 0;  // one line for `troupe info`
};

void register_backend(DeviceType type, DeviceBackend* backend);
// The backend for type; DeviceError explaining why when it is absent (not built, no device).
DeviceBackend& backend(DeviceType type);
bool has_backend(DeviceType type);
// Why cuda is unavailable in this build or on this machine ("" when it is available).
std::string cuda_unavailable_reason();
void set_cuda_unavailable_reason(std::string reason);

}  // namespace troupe
