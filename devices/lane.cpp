// What both lane back ends share: making one, the current lane per thread and device, and the
// counted host waits.
#include "devices/lane.h"

#include <atomic>
#include <vector>

#include "devices/backend.h"
#include "devices/error.h"
#include "devices/sync.h"
#include "devices/tensor.h"

namespace troupe {

namespace {

detail::CudaLaneHooks cuda_hooks;  // written once, while the CUDA library loads

// Each thread's current lane per device: few devices per process, so a short list, whose entries
// are cleared rather than removed (setting a lane current allocates nothing after the first time).
thread_local std::vector<std::pair<Device, Lane*>> current_lanes;

Lane*& current_slot(Device device) {
  for (auto& [d, lane] : current_lanes)
    if (d == device) return lane;
  return current_lanes.emplace_back(device, nullptr).second;
}

}  // namespace

void Event::synchronize(std::string_view call) const {
  if (!state_) return;
  if (!state_->done()) {
    note_sync(state_->device, call);
    state_->wait();
  }
  if (std::exception_ptr error = state_->error()) std::rethrow_exception(error);
}

namespace {
std::atomic<bool> timed_events{false};
}  // namespace

void set_event_timing(bool on) { timed_events.store(on, std::memory_order_relaxed); }
bool event_timing() { return timed_events.load(std::memory_order_relaxed); }

double Event::elapsed_ms(const Event& later) const {
  if (!state_ || !later.state_) throw ValueError("Event::elapsed_ms: an event has no work behind it");
  if (!state_->done() || !later.state_->done()) throw ValueError("Event::elapsed_ms: an event is not done yet");
  return state_->elapsed_ms(*later.state_);
}

void Lane::synchronize(std::string_view call) { record().synchronize(call); }

void detail::register_cuda_lane_hooks(CudaLaneHooks hooks) { cuda_hooks = hooks; }

std::unique_ptr<Lane> Lane::make(Device device, std::string name) {
  if (device.is_cpu()) return detail::make_host_lane(std::move(name));
  backend(DeviceType::cuda);  // DeviceError saying why there is no GPU
  if (!cuda_hooks.make) throw DeviceError("Lane::make(" + device.str() + "): this build has no CUDA lanes");
  return cuda_hooks.make(device.index, std::move(name));
}

Event default_stream_mark(Device device) {
  if (device.is_cpu() || !cuda_hooks.default_stream_mark) return Event();
  return cuda_hooks.default_stream_mark(device.index);
}

void await_ready(const Tensor& t) {
  const Device device = t.device();
  if (device.is_cpu()) return;
  Event ready = t.storage()->ready();
  if (!ready.valid()) return;
  if (Lane* lane = Lane::current(device)) return lane->wait(ready);
  if (!ready.done() && cuda_hooks.current_stream_wait) cuda_hooks.current_stream_wait(ready, device.index);
}

Lane* Lane::current(Device device) {
  for (const auto& [d, lane] : current_lanes)
    if (d == device) return lane;
  return nullptr;
}

LaneGuard::LaneGuard(Lane& lane) : lane_(lane), previous_(Lane::current(lane.device())), entered_(lane.enter()) {
  current_slot(lane.device()) = &lane;
}

LaneGuard::~LaneGuard() {
  current_slot(lane_.device()) = previous_;
  lane_.leave(entered_);
}

}  // namespace troupe
