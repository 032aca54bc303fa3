#include "devices/captured_work.h"

#include "devices/backend.h"
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

void copy_into(Tensor& dst, const Tensor& src) {
  if (dst.dtype() != src.dtype() || dst.shape() != src.shape() || !dst.is_contiguous())
    throw ShapeError("copy_into: " + src.meta().str() + " into " + dst.meta().str() +
                     ": needs the same dtype and shape, and a contiguous destination");
  Tensor from = src.device() == dst.device() ? src.contiguous() : src.to(dst.device());
  await_ready(from);
  backend(dst.device().type)
      .copy(const_cast<void*>(dst.raw_data()), dst.device(), from.raw_data(), from.device(), dst.nbytes());
  dst.storage()->bump_version();
}

}  // namespace troupe
