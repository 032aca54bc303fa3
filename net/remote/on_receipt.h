#pragma once
// Actor types whose calls run at once on the thread that receives them (the transport's), not in a
// mailbox in turn (internal to net/remote/; hosting.cpp): for handlers that never wait and may run
// on several threads at once, as the actor meshes' relays, which so forward a call without a hop
// through a scheduler's thread.
#include "net/remote/actor_type.h"

namespace troupe::net::detail {

// Marks a registered type; at static initialization, next to its registration (read unlocked).
void run_on_receipt(const ActorType& type);
bool runs_on_receipt(const ActorType& type);

}  // namespace troupe::net::detail
