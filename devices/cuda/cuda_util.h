#pragma once
// Internal to the CUDA backend and its kernels: error checks and the current device.
//
//   DeviceGuard on(x.device().index);
//   check(cudaMemsetAsync(p, 0, n, current_stream(on.index())), "cudaMemsetAsync", on.index());
#include <cuda_runtime.h>

#include <vector>

#include "devices/cuda/stream.h"
#include "devices/dtype.h"
#include "devices/error.h"
#include "devices/event.h"

#include "devices/tensor.h"

namespace troupe::cuda {

// The most CUDA devices a process uses: the size of the per-device tables (streams, handles, error words).
constexpr int kMaxDevices = 64;

// DeviceError "cuda:N: <call>: <CUDA's message>" unless err is cudaSuccess.
void check(cudaError_t err, const char* call, int device);
// The error of the last kernel launch, if any, as a DeviceError naming the kernel.
inline void check_launch(const char* kernel, int device) { check(cudaGetLastError(), kernel, device); }
// Whether a query (cudaEventQuery, cudaStreamQuery) answered "not yet". That answer is cleared from
// the thread's last error, so that the next launch's check_launch does not report it as its own.
inline bool not_ready(cudaError_t err) {
  if (err != cudaErrorNotReady) return false;
  cudaGetLastError();
  return true;
}
// Whether stream has no work pending, without throwing (frees run from destructors): an error
// counts as pending and is cleared, since the caller's next call on the stream reports it.
bool stream_idle(cudaStream_t stream);

// Makes `device` the calling thread's CUDA device while in scope.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  int index() const { return device_; }

 private:
  int device_;
  int previous_ = -1;
};

// Later work on stream waits, on the device, for the work before event (a host lane's event: the
// host waits for it here).
void stream_wait_event(cudaStream_t stream, const Event& event, int device);
// An event after the work queued on stream so far (pooled; timed only while a profiler records).
Event record_event(cudaStream_t stream, int device);
// Later work on stream waits, on the device, until *released (mapped pinned memory, the device's
// pointer to it) reaches value (cuda/host_waits.h).
void queue_wait_until(const uint64_t* released, uint64_t value, cudaStream_t stream, int device);

// Where this thread's device allocations go while a CUDA graph is measured or captured
// (devices/captured_work.h): an arena the capture owns, or the pool with every byte counted.
struct AllocationArena {
  char* base = nullptr;
  size_t size = 0;
  size_t used = 0;
};
// A free, asked for while this thread captures, of a block from outside the capture's arena (a
// tensor made before the capture and dropped inside it): done once the capture has ended. Inside it,
// the free would order streams under capture (which ends the capture in an error) or be captured
// itself, and then run at every replay.
struct DeferredFree {
  void* ptr = nullptr;
  size_t nbytes = 0;
  int device = 0;
  std::vector<Event> readers;
  void* owner = nullptr;  // DeviceBackend::allocate's
};
struct ThreadAllocation {
  AllocationArena* arena = nullptr;                 // set while capturing
  std::vector<DeferredFree>* deferred = nullptr;    // likewise
  size_t* meter = nullptr;                          // set while measuring
};
ThreadAllocation& thread_allocation();
// The frees a capture deferred, done now, on the calling thread's current streams.
void free_deferred(std::vector<DeferredFree>& frees);
// Whether p lies in an arena still alive (its blocks are freed with the arena, not one by one).
bool in_arena(const void* p);
void add_arena(const AllocationArena* arena);
void remove_arena(const AllocationArena* arena);

// Writes src's elements (any strides) converted to dst's dtype into dst (contiguous, same device
// and numel), on the current stream. False when src has too many dims for the kernel.
bool copy_elements_on_device(const Tensor& src, Tensor& dst);

// A device tensor's elements for a kernel of its device (data<T>() and mutable_data<T>() are for
// host code and refuse device memory). DTypeError when T is not the tensor's dtype.
void check_kernel_dtype(const Tensor& t, DType expected);
template <class T>
const T* device_read(const Tensor& t) {
  check_kernel_dtype(t, dtype_of<T>());
  return static_cast<const T*>(t.raw_data());
}
template <class T>
T* device_write(Tensor& t) {
  check_kernel_dtype(t, dtype_of<T>());
  return static_cast<T*>(t.mutable_raw_data());
}

}  // namespace troupe::cuda
