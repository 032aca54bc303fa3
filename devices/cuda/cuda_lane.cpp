// The CUDA lane: a GPU actor's own stream (with its cuBLAS handle and workspace, cuda/blas.h) and
// CUDA events. enqueue runs the work at once with the stream current, so the work only queues
// kernels; waits between lanes are cudaStreamWaitEvent, on the device. A call's mark (Lane::mark)
// is a number until someone needs its CUDA event: most calls' results are read on the same stream,
// where the stream's order is enough.
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

struct CudaEvent;
// The recorded event behind a device event: the event itself, or a lane mark's once recorded
// (nullptr: the mark's lane is gone, and with it its work).
CudaEvent* device_event(Event::State& state);
// The stream a device event was recorded on, or will be (a mark): a wait on the same stream is
// ordered by the stream itself. nullptr for host events and marks of lanes gone.
cudaStream_t recorded_on(Event::State& state);

struct CudaEvent final : Event::State {
  CudaEvent(int index, const void* owner, cudaStream_t stream)
      : owner_(owner), stream_(stream), timed_(event_timing()) {
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
    auto* other = device_event(later);
    if (!other) throw DeviceError("Event::elapsed_ms: a device event and a host event have no common clock");
    if (!timed_ || !other->timed_)
      throw DeviceError("Event::elapsed_ms: events recorded while no profiler recorded carry no timestamps");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, handle_, other->handle_), "cudaEventElapsedTime", device.index);
    return ms;
  }
  const void* lane() const override { return owner_; }
  cudaEvent_t handle() const { return handle_; }
  cudaStream_t stream() const { return stream_; }

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
  cudaStream_t stream_;
  bool timed_;
  cudaEvent_t handle_ = nullptr;
  std::exception_ptr error_;
};

// What a CUDA lane's marks share with it: the marks counted so far and the latest event recorded
// for one. Outlives the lane while marks do; a lane that goes first has done its work.
struct Timeline {
  Timeline(int index, const void* lane, cudaStream_t stream) : index(index), lane(lane), stream(stream) {}

  // The event after the work up to mark `number` at least: the last one recorded when it covers
  // that mark, else one recorded now on the lane's stream (from any thread: CUDA allows it).
  std::shared_ptr<CudaEvent> event_covering(uint64_t number) {
    std::lock_guard lock(mutex);
    if (!stream) return nullptr;
    if (recorded && recorded_marks >= number) return recorded;
    auto event = std::make_shared<CudaEvent>(index, lane, stream);
    DeviceGuard on(index);
    check(cudaEventRecord(event->handle(), stream), "cudaEventRecord", index);
    recorded = std::move(event);
    recorded_marks = marks.load(std::memory_order_acquire);
    return recorded;
  }

  const int index;
  const void* const lane;
  std::atomic<uint64_t> marks{0};  // made so far; written by the lane's calls
  std::mutex mutex;                // recording one: rare
  cudaStream_t stream;             // nullptr once the lane is gone
  std::shared_ptr<CudaEvent> recorded;
  uint64_t recorded_marks = 0;
};

// A lane's mark: mark number `number` of its timeline, recorded on first need.
struct LaneMark final : Event::State {
  LaneMark(std::shared_ptr<Timeline> timeline, uint64_t number) : timeline_(std::move(timeline)), number_(number) {
    device = Device::cuda(timeline_->index);
  }

  bool done() override {
    CudaEvent* e = recorded();
    return !e || e->done();
  }
  void wait() override {
    if (CudaEvent* e = recorded()) e->wait();
  }
  std::exception_ptr error() override {
    CudaEvent* e = recorded();
    return e ? e->error() : nullptr;
  }
  double elapsed_ms(Event::State&) override {
    throw DeviceError("Event::elapsed_ms: a lane's mark carries no timestamp (marks are timed events only while a "
                      "profiler records)");
  }
  const void* lane() const override { return timeline_->lane; }

  CudaEvent* recorded() {
    std::call_once(recorded_once_, [&] { event_ = timeline_->event_covering(number_); });
    return event_.get();
  }
  const Timeline& timeline() const { return *timeline_; }
  const std::shared_ptr<Timeline>& shared_timeline() const { return timeline_; }
  uint64_t number() const { return number_; }

 private:
  std::shared_ptr<Timeline> timeline_;
  uint64_t number_;
  std::once_flag recorded_once_;
  std::shared_ptr<CudaEvent> event_;
};

CudaEvent* device_event(Event::State& state) {
  if (auto* mark = dynamic_cast<LaneMark*>(&state)) return mark->recorded();
  return dynamic_cast<CudaEvent*>(&state);
}

cudaStream_t recorded_on(Event::State& state) {
  if (auto* mark = dynamic_cast<LaneMark*>(&state)) {
    Timeline& timeline = *mark->shared_timeline();
    std::lock_guard lock(timeline.mutex);
    return timeline.stream;
  }
  if (auto* event = dynamic_cast<CudaEvent*>(&state)) return event->stream();
  return nullptr;
}

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
  CudaLane(int index, std::string name)
      : Lane(Device::cuda(index), std::move(name)),
        stream_(index),
        timeline_(std::make_shared<Timeline>(index, this, stream_.handle())) {}
  // Marks still held find the lane gone, its work done. Then the host waits end (each once its host
  // event is done), ~Stream waits for the stream's work, its wait kernels included, and the word
  // they read goes.
  ~CudaLane() override {
    cudaStreamSynchronize(stream_.handle());
    std::lock_guard lock(timeline_->mutex);
    timeline_->stream = nullptr;
  }

  void enqueue(std::function<void()> fn) override {
    LaneGuard on(*this);
    fn();
  }

  Event record() override {
    const int index = device().index;
    auto event = std::make_shared<CudaEvent>(index, this, stream_.handle());
    DeviceGuard on(index);
    check(cudaEventRecord(event->handle(), stream_.handle()), "cudaEventRecord", index);
    return Event(event);
  }

  // A number, no driver call; timed events (a profiler records) at once, for their timestamps.
  Event mark() override {
    if (event_timing()) return record();
    return Event(std::make_shared<LaneMark>(timeline_, timeline_->marks.fetch_add(1, std::memory_order_acq_rel) + 1));
  }

  void wait(const Event& event) override {
    if (!event.valid() || event.state()->lane() == this) return;
    auto* mark = dynamic_cast<LaneMark*>(event.state().get());
    if (mark && waited_for(*mark)) return;  // awaited already (a call's argument, then its op's input)
    if (event.done()) return;
    const int index = device().index;
    DeviceGuard on(index);
    if (CudaEvent* cuda_event = device_event(*event.state())) {
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

  // Whether this lane's stream waits already for a mark at least as late on the same timeline;
  // notes this one otherwise (the caller then waits for it). A few timelines: the last ones seen.
  bool waited_for(const LaneMark& mark) {
    std::lock_guard lock(waited_mutex_);
    for (auto& [timeline, number] : waited_)
      if (timeline.get() == &mark.timeline()) {
        if (number >= mark.number()) return true;
        number = mark.number();
        return false;
      }
    if (waited_.size() == kWaitedTimelines) waited_.erase(waited_.begin());
    // The mark's timeline stays alive while listed: its address cannot name another lane's.
    waited_.emplace_back(mark.shared_timeline(), mark.number());
    return false;
  }

  static constexpr size_t kWaitedTimelines = 8;
  ReleasedWord released_;
  Stream stream_;
  std::shared_ptr<Timeline> timeline_;
  std::mutex waited_mutex_;  // this lane's own: calls forked onto one lane may run on two threads
  std::vector<std::pair<std::shared_ptr<Timeline>, uint64_t>> waited_;
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
  auto event = std::make_shared<CudaEvent>(index, nullptr, stream);
  check(cudaEventRecord(event->handle(), stream), "cudaEventRecord", index);
  return Event(event);
}

void current_stream_wait(const Event& event, int index) { stream_wait_event(current_stream(index), event, index); }

const bool lane_hooks_registered = [] {
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
  auto event = std::make_shared<CudaEvent>(device, nullptr, stream);
  check(cudaEventRecord(event->handle(), stream), "cudaEventRecord", device);
  return Event(event);
}

// A lane's mark on the same stream needs no event: the stream's order is enough (a block freed on
// the stream of the lane that read it last).
void stream_wait_event(cudaStream_t stream, const Event& event, int device) {
  if (!event.valid() || recorded_on(*event.state()) == stream || event.done()) return;
  CudaEvent* cuda_event = device_event(*event.state());
  if (!cuda_event) return event.synchronize("a device stream waits for a host event");
  DeviceGuard on(device);
  check(cudaStreamWaitEvent(stream, cuda_event->handle(), 0), "cudaStreamWaitEvent", device);
}

}  // namespace troupe::cuda
