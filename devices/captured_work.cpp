#include "devices/captured_work.h"

#include "devices/error.h"

namespace troupe {

namespace {
detail::CaptureHooks hooks;  // written once, while the CUDA library loads
}  // namespace

void detail::register_capture_hooks(CaptureHooks h) { hooks = h; }

std::unique_ptr<CapturedWork> CapturedWork::capture(Lane& lane, size_t arena_bytes, const std::function<void()>& fn) {
  if (lane.device().is_cpu())
    throw DeviceError("CapturedWork::capture: lane '" + lane.name() + "' is a host lane; CUDA graphs capture CUDA lanes");
  if (!hooks.capture) throw DeviceError("CapturedWork::capture: this build has no CUDA graphs");
  return hooks.capture(lane, arena_bytes, fn);
}

size_t measure_device_allocations(Device device, const std::function<void()>& fn) {
  if (device.is_cpu() || !hooks.measure)
    throw DeviceError("measure_device_allocations: " + device.str() + " has no CUDA allocator in this build");
  return hooks.measure(device.index, fn);
}

}  // namespace troupe
