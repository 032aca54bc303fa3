#pragma once
// The profiler's OpObserver (devices/registry.h): while the profiler is on, every registry op call
// is a span on the calling thread and, for an op on a device or run by a host lane, a span on that
// lane. Internal to actors/observe.
#include "devices/registry.h"

namespace troupe::observe {

OpObserver& op_recorder();

}  // namespace troupe::observe
