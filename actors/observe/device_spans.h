#pragma once
// The ops' spans on their lanes: on a device lane (a GPU actor's stream, or a device's default
// stream) timed by events queued before and after the op; on a host lane, whose ops run on its own
// thread, by the host clock as they run. Internal to actors/observe.
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "devices/device.h"
#include "devices/event.h"

namespace troupe::observe {

struct DeviceSpan {
  std::string lane;
  std::string name;
  Event start, end;
  int64_t host_start = 0, host_end = 0;
};

// Per device: an event and the host time at which it was done, to place device events on the
// host's clock (within the time the device took to reach the event when it was recorded).
struct DeviceClock {
  Event reference;
  int64_t host_ns = 0;
};

struct DeviceSpans {
  std::mutex mutex;
  std::vector<DeviceSpan> spans;
  std::map<std::pair<int, int>, DeviceClock> clocks;
};

DeviceSpans& device_spans();

// An event now on the device's lane for this thread (its lane, else the default stream); names it.
Event mark(Device device, std::string& lane_name);
// The device's clock reference, made once per profiling run (the profiler's own wait, not a sync).
void ensure_clock(Device device);
// A lane's span on the host's clock: a device span's events placed by its device's clock (waiting
// for them: the profiler's own waits, not counted as syncs), a host lane's as it ran. Under
// device_spans().mutex.
std::pair<int64_t, int64_t> host_interval(DeviceSpan& span);

}  // namespace troupe::observe
