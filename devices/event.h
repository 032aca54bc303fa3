#pragma once
// Event: a point in a lane's work (devices/lane.h). Done once all work queued before it is done;
// it then carries the error, if any, that the work raised. Copies share the one event.
//
//   Event e = lane->record();
//   other->wait(e);       // other's later work runs after e, on the device: the host does not wait
//   e.synchronize();      // the host waits (counted: devices/sync.h); rethrows the work's error
#include <cstdint>
#include <exception>
#include <memory>
#include <string_view>

#include "devices/device.h"

namespace troupe {

class Event {
 public:
  // What a back end implements: a host event (a flag and a condition) or a CUDA event.
  struct State {
    virtual ~State() = default;
    virtual bool done() = 0;                        // does not block
    virtual void wait() = 0;                        // blocks until done; not counted
    virtual std::exception_ptr error() = 0;         // after done: the work's error, or none
    virtual double elapsed_ms(State& later) = 0;    // both done: time between them on the device
    virtual const void* lane() const = 0;           // the lane that recorded it (identity only)
    Device device;
  };

  Event() = default;  // no work behind it: done
  explicit Event(std::shared_ptr<State> state) : state_(std::move(state)) {}

  bool valid() const { return state_ != nullptr; }
  bool done() const { return !state_ || state_->done(); }
  Device device() const { return state_ ? state_->device : Device::cpu(); }
  // Blocks the host until done (a counted sync naming `call` unless already done), then rethrows
  // the error of the work before it, with its type.
  void synchronize(std::string_view call = "Event::synchronize") const;
  // Milliseconds from this event to `later` as the device timed them; both must be done.
  double elapsed_ms(const Event& later) const;
  const std::shared_ptr<State>& state() const { return state_; }

 private:
  std::shared_ptr<State> state_;
};

// Whether device events take timestamps (Event::elapsed_ms): the profiler turns it on while it
// records, for its device lanes; off, a CUDA event records faster and is reused from a pool.
void set_event_timing(bool on);
bool event_timing();

}  // namespace troupe
