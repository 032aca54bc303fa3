#pragma once
// TROUPE_TRACE (actors/profiler.h): each rank's clock offset to rank 0, measured once the
// transport is connected, so the ranks' traces line up in one job trace. Internal to net/.
//
//   if (std::getenv("TROUPE_TRACE")) sync_trace_clock(transport, deadline);  // every rank
#include "net/work.h"

namespace troupe::net {

class Transport;

// Ping-pong with rank 0 over the transport's p2p inbox (a group no process group uses); sets the
// profiler's job clock. TimeoutError when rank 0 or a rank does not answer by the deadline.
void sync_trace_clock(Transport& transport, Deadline deadline);

}  // namespace troupe::net
