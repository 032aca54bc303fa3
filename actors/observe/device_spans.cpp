#include "actors/observe/device_spans.h"

#include "actors/observe/spans.h"
#include "devices/lane.h"
#include "devices/sync.h"

namespace troupe::observe {

DeviceSpans& device_spans() {
  static DeviceSpans* d = new DeviceSpans;
  return *d;
}

Event mark(Device device, std::string& lane_name) {
  if (Lane* lane = Lane::current(device)) {
    lane_name = device.str() + " " + (lane->name().empty() ? "lane" : lane->name());
    return lane->record();
  }
  lane_name = device.str() + " default stream";
  return default_stream_mark(device);
}

void ensure_clock(Device device) {
  const std::pair<int, int> key{static_cast<int>(device.type), device.index};
  {
    std::lock_guard lock(device_spans().mutex);
    if (device_spans().clocks.contains(key)) return;
  }
  DeviceClock clock{default_stream_mark(device), 0};
  if (clock.reference.valid()) clock.reference.state()->wait();
  clock.host_ns = now_ns();
  std::lock_guard lock(device_spans().mutex);
  device_spans().clocks.emplace(key, std::move(clock));
}

std::pair<int64_t, int64_t> host_interval(DeviceSpan& span) {
  if (!span.start.valid()) return {span.host_start, span.host_end};
  const Device device = span.start.device();
  const DeviceClock& clock = device_spans().clocks.at({static_cast<int>(device.type), device.index});
  span.start.state()->wait();
  span.end.state()->wait();
  return {clock.host_ns + static_cast<int64_t>(clock.reference.elapsed_ms(span.start) * 1e6),
          clock.host_ns + static_cast<int64_t>(clock.reference.elapsed_ms(span.end) * 1e6)};
}

}  // namespace troupe::observe
