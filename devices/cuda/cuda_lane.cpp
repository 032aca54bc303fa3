// The CUDA lane: a GPU actor's own stream (with its cuBLAS handle and workspace, cuda/blas.h) and
// CUDA events. enqueue runs the work at once with the stream current, so the work only queues
// kernels; waits between lanes are cudaStreamWaitEvent, on the device.
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "devices/cuda/cuda_util.h"
#include "devices/cuda/host_waits.h"
#include "devices/lane.h"
#include "devices/sync.h"

namespace troupe::cuda {

namespace {

// CUDA events made once and reused: a call to a GPU actor records one, and creating and destroying
// it each time would cost more than the kernel launch. Timed events only while the profiler records.
class EventPool {
 public:
  cudaEvent_t take(int index, bool timed) {
    {
      std::lock_guard lock(mutex_);
      auto& list = free_[{index, timed}];
      if (!list.empty()) {
        cudaEvent_t e = list.back();
        list.pop_back();
        return e;
      }
    }
    DeviceGuard on(index);
    cudaEvent_t e = nullptr;
    check(cudaEventCreateWithFlags(&e, timed ? cudaEventDefault : cudaEventDisableTiming), "cudaEventCreateWithFlags",
          index);
    return e;
  }
  // A re-recorded event does not disturb the waits queued on its earlier record.
  void give_back(int index, bool timed, cudaEvent_t e) {
    std::lock_guard lock(mutex_);
    free_[{index, timed}].push_back(e);
  }

 private:
  std::mutex mutex_;
  std::map<std::pair<int, bool>, std::vector<cudaEvent_t>> free_;
};

EventPool& event_pool() {
  static auto* pool = new EventPool;  // never destroyed: events may be dropped during static teardown
  return *pool;
}

struct CudaEvent final : Event::State {
  CudaEvent(int index, const void* owner) : owner_(owner), timed_(event_timing()) {
    device = Device::cuda(index);
    handle_ = event_pool().take(index, timed_);
  }
  ~CudaEvent() override { event_pool().give_back(device.index, timed_, handle_); }

  bool done() override {
    const cudaError_t err = cudaEventQuery(handle_);
    if (not_ready(err)) return false;
    settle(err);
    return true;
  }
  void wait() override { settle(cudaEventSynchronize(handle_)); }
  std::exception_ptr error() override { return error_; }
  double elapsed_ms(Event::State& later) override {
    auto* other = dynamic_cast<CudaEvent*>(&later);
    if (!other) throw DeviceError("Event::elapsed_ms: a device event and a host event have no common clock");
    if (!timed_ || !other->timed_)
      throw DeviceError("Event::elapsed_ms: events recorded while no profiler recorded carry no timestamps");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, handle_, other->handle_), "cudaEventElapsedTime", device.index);
    return ms;
  }
  const void* lane() const override { return owner_; }
  cudaEvent_t handle() const { return handle_; }

 private:
  // A failure the device reports while the event is awaited becomes the event's DeviceError.
  void settle(cudaError_t err) {
    if (err == cudaSuccess || error_) return;
    try {
      check(err, "the work before this event", device.index);
    } catch (...) {
      error_ = std::current_exception();
    }
  }

  const void* owner_;
  bool timed_;
  cudaEvent_t handle_ = nullptr;
  std::exception_ptr error_;
};

// The word a lane's host waits write and its stream's wait kernels read (cuda/host_waits.h).
struct ReleasedWord {
  uint64_t* host = nullptr;
  const uint64_t* device = nullptr;

  void make(int index) {
    DeviceGuard on(index);
    void* p = nullptr;
    check(cudaHostAlloc(&p, sizeof(uint64_t), cudaHostAllocMapped | cudaHostAllocPortable), "cudaHostAlloc (host waits)",
          index);
    void* seen = nullptr;
    const cudaError_t err = cudaHostGetDevicePointer(&seen, p, 0);
    if (err != cudaSuccess) cudaFreeHost(p);
    check(err, "cudaHostGetDevicePointer (host waits)", index);
    host = static_cast<uint64_t*>(p);
    *host = 0;
    device = static_cast<const uint64_t*>(seen);
  }
  ~ReleasedWord() {
    if (host) cudaFreeHost(host);
  }
};

class CudaLane final : public Lane {
 public:
  CudaLane(int index, std::string name) : Lane(Device::cuda(index), std::move(name)), stream_(index) {}
  // The host waits end first (each once its host event is done), then ~Stream waits for the stream's
  // work, its wait kernels included, then the word they read goes.
  ~CudaLane() override = default;

  void enqueue(std::function<void()> fn) override {
    LaneGuard on(*this);
    fn();
  }

  Event record() override {
    const int index = device().index;
    auto event = std::make_shared<CudaEvent>(index, this);
    DeviceGuard on(index);
    check(cudaEventRecord(event->handle(), stream_.handle()), "cudaEventRecord", index);
    return Event(event);
  }

  void wait(const Event& event) override {
    if (!event.valid() || event.state()->lane() == this || event.done()) return;
    const int index = device().index;
    DeviceGuard on(index);
    if (auto* cuda_event = dynamic_cast<CudaEvent*>(event.state().get())) {
      check(cudaStreamWaitEvent(stream_.handle(), cuda_event->handle(), 0), "cudaStreamWaitEvent", index);
      return;
    }
    // A host lane's event: the stream's later work waits on the device for this lane's host-wait
    // thread, neither on the caller nor on CUDA's host-function thread.
    HostWaits& waits = host_waits();
    queue_wait_until(released_.device, waits.add(event.state()), stream_.handle(), index);
  }

  const void* enter() override { return swap_current_stream(device().index, &stream_); }
  void leave(const void* entered) override {
    swap_current_stream(device().index, static_cast<const Stream*>(entered));
  }

 private:
  // Made on the first wait for a host event: a pinned allocation costs milliseconds.
  HostWaits& host_waits() {
    std::call_once(host_waits_made_, [&] {
      released_.make(device().index);
      host_waits_ = std::make_unique<HostWaits>(released_.host);
    });
    return *host_waits_;
  }

  ReleasedWord released_;
  Stream stream_;
  std::once_flag host_waits_made_;
  std::unique_ptr<HostWaits> host_waits_;
};

// The device's default stream, not this thread's current one (a lane's own, inside its calls). An
// idle default stream has nothing to wait for: no event then (one query instead of a record and a
// wait on every call whose arguments were written there), unless a profiler wants the timestamp.
Event default_stream_mark_on(int index) {
  DeviceGuard on(index);
  const cudaStream_t stream = default_stream(index);
  if (!event_timing() && stream_idle(stream)) return Event();
  auto event = std::make_shared<CudaEvent>(index, nullptr);
  check(cudaEventRecord(event->handle(), stream), "cudaEventRecord", index);
  return Event(event);
}

void current_stream_wait(const Event& event, int index) { stream_wait_event(current_stream(index), event, index); }

const bool registered = [] {
  detail::register_cuda_lane_hooks({
      .make = [](int index, std::string name) -> std::unique_ptr<Lane> {
        return std::make_unique<CudaLane>(index, std::move(name));
      },
      .default_stream_mark = default_stream_mark_on,
      .current_stream_wait = current_stream_wait,
  });
  return true;
}();

}  // namespace

Event record_event(cudaStream_t stream, int device) {
  auto event = std::make_shared<CudaEvent>(device, nullptr);
  check(cudaEventRecord(event->handle(), stream), "cudaEventRecord", device);
  return Event(event);
}

void stream_wait_event(cudaStream_t stream, const Event& event, int device) {
  if (!event.valid() || event.done()) return;
  auto* cuda_event = dynamic_cast<CudaEvent*>(event.state().get());
  if (!cuda_event) return event.synchronize("a device stream waits for a host event");
  DeviceGuard on(device);
  check(cudaStreamWaitEvent(stream, cuda_event->handle(), 0), "cudaStreamWaitEvent", device);
}

}  // namespace troupe::cuda
