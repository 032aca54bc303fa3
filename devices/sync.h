#pragma once
// Host-device synchronisations, made visible. Every time the host waits for a device (reading a
// device tensor's values, Stream::synchronize, Event::synchronize, Lane::synchronize) it is
// counted with the op and the actor that caused it, as the GatherNd seed found by hand.
//
//   reset_sync_counts();
//   float v = gpu_tensor.item<float>();           // one sync, op "item"
//   sync_count();                                  // 1
//   for (const SyncSite& s : sync_sites()) std::cout << s.op << " in " << s.actor << ": " << s.count;
//
// TROUPE_SYNC_DEBUG=warn prints each sync with its op and actor to stderr; =error makes it a
// DeviceError instead (torch.cuda.set_sync_debug_mode's "warn" and "error"); set_sync_debug()
// changes it at run time.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "devices/device.h"

namespace troupe {

enum class SyncDebug { off, warn, error };

struct SyncSite {
  std::string op;     // what waited: the op running then, else the call that waited ("item", "Lane::synchronize")
  std::string actor;  // the actor running on that thread ("main" outside any)
  Device device;
  uint64_t count = 0;
};

uint64_t sync_count();               // since the process started or the last reset
std::vector<SyncSite> sync_sites();  // counts per (op, actor, device), largest first
void reset_sync_counts();

SyncDebug sync_debug();  // from TROUPE_SYNC_DEBUG at first use, then set_sync_debug's
void set_sync_debug(SyncDebug mode);

// Called by a backend just before the host waits for `device`; `call` names the waiting call.
// DeviceError in error mode (nothing has waited yet then).
void note_sync(Device device, std::string_view call);

// Who is running on this thread, for attribution. call_op sets the op; actors set their name.
class SyncAttribution {
 public:
  // The innermost op of this thread (a string literal or the op table's name: it must outlive the scope).
  class OpScope {
   public:
    explicit OpScope(std::string_view op);
    ~OpScope();
    OpScope(const OpScope&) = delete;
    OpScope& operator=(const OpScope&) = delete;

   private:
    std::string_view previous_;
  };
  static void set_thread_actor(std::string_view actor);
  static std::string_view current_op();
};

// What a profiler does with each sync (one at a time; nullptr for none).
using SyncListener = void (*)(const SyncSite& site);
void set_sync_listener(SyncListener listener);

}  // namespace troupe
