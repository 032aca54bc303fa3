#pragma once
// Lane: an ordered, asynchronous queue of work on one device. A GPU actor owns a CUDA lane (its
// stream, that stream's cuBLAS handle and workspace); a host lane (a worker thread) follows the same
// protocol, for CPU actors and to test the protocol without a GPU.
//
//   std::unique_ptr<Lane> a = Lane::make(Device::cuda(0)), b = Lane::make(Device::cuda(0));
//   Tensor y, z;
//   a->enqueue([&] { y = relu(matmul(x, w)); });   // returns once queued
//   b->wait(a->record());                           // b's later work runs after a's so far; no host wait
//   b->enqueue([&] { z = softmax(y, -1); });
//   b->synchronize();                               // the host waits here only: one counted sync
//
// The protocol, on both back ends:
// - work runs in the order it was enqueued; enqueue() never waits for earlier work;
// - record() marks all work enqueued so far (mark() too, recorded on the device only once needed);
//   wait(e) orders later work after e without blocking the caller;
// - host-lane work that throws fails its lane: later work is skipped, and every later event of the
//   lane, and of lanes that wait on one of them, carries the exception; Event::synchronize and
//   Lane::synchronize rethrow it with its type, and the lane's synchronize clears it;
// - a CUDA lane runs fn at once on the calling thread with its stream current (fn queues kernels), so
//   a launch error is thrown by enqueue() itself; what the device reports later (a fault, an index
//   out of range) is a DeviceError at the next synchronize.
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "devices/event.h"

namespace troupe {

class Lane {
 public:
  // A CUDA lane for cuda:N (DeviceError without that device), a host lane for cpu.
  static std::unique_ptr<Lane> make(Device device, std::string name = "");
  // The calling thread's current lane for the device (LaneGuard), or nullptr.
  static Lane* current(Device device);

  virtual ~Lane() = default;  // back ends wait for their work first
  Lane(const Lane&) = delete;
  Lane& operator=(const Lane&) = delete;

  Device device() const { return device_; }
  const std::string& name() const { return name_; }

  virtual void enqueue(std::function<void()> fn) = 0;
  virtual Event record() = 0;
  // An event after the work enqueued so far, as record(), but cheap where the device's own is not:
  // a CUDA lane counts the mark and records a CUDA event only once another lane waits for it, the
  // host asks whether it is done or waits, or a free on another stream orders after it; that event
  // then marks the lane's work up to then (at least this far). A call to a GPU actor ends with one.
  virtual Event mark() { return record(); }
  virtual void wait(const Event& event) = 0;  // no-op for events of this lane
  // The host waits for all work so far (a counted sync naming `call`) and rethrows its error.
  virtual void synchronize(std::string_view call = "Lane::synchronize");

  // What LaneGuard does as the lane becomes current and stops being so: a CUDA lane makes its stream
  // the thread's current one; enter returns what leave restores (no allocation: a call to a GPU
  // actor does this every time).
  virtual const void* enter() { return nullptr; }
  virtual void leave(const void* entered) {}

 protected:
  Lane(Device device, std::string name) : device_(device), name_(std::move(name)) {}

 private:
  Device device_;
  std::string name_;
};

// Makes a lane the calling thread's current lane for its device while in scope: for a CUDA lane,
// every kernel, copy and allocation on that device goes on its stream.
class LaneGuard {
 public:
  explicit LaneGuard(Lane& lane);
  ~LaneGuard();
  LaneGuard(const LaneGuard&) = delete;
  LaneGuard& operator=(const LaneGuard&) = delete;

 private:
  Lane& lane_;
  Lane* previous_;
  const void* entered_;
};

class Tensor;

// An event after the work queued so far on the device's default stream, where threads without a
// lane queue theirs (done, empty, for cpu, and for an idle default stream unless a profiler records).
Event default_stream_mark(Device device);
// Orders the calling thread's later work on t's device after the lane work that wrote t: its
// current lane, or else its current stream, waits for t's ready event on the device. The registry
// does this for every op's device inputs, and Tensor::to for a device source.
void await_ready(const Tensor& t);

namespace detail {
// What the CUDA back end provides, registered when its library loads.
struct CudaLaneHooks {
  std::unique_ptr<Lane> (*make)(int device, std::string name) = nullptr;
  Event (*default_stream_mark)(int device) = nullptr;
  void (*current_stream_wait)(const Event& event, int device) = nullptr;
};
void register_cuda_lane_hooks(CudaLaneHooks hooks);
std::unique_ptr<Lane> make_host_lane(std::string name);
}  // namespace detail

}  // namespace troupe
