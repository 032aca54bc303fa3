#include "devices/sync.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <tuple>

#include "devices/error.h"

namespace troupe {

namespace {

thread_local std::string_view thread_op;
thread_local std::string thread_actor = "main";

struct Counts {
  std::mutex mutex;
  std::map<std::tuple<std::string, std::string, int, int>, uint64_t> by_site;
  std::atomic<uint64_t> total{0};
};

Counts& counts() {
  static Counts* c = new Counts;  // syncs may be noted during static teardown
  return *c;
}

SyncDebug mode_from_env() {
  const char* v = std::getenv("TROUPE_SYNC_DEBUG");
  if (!v || !*v || std::string_view(v) == "off" || std::string_view(v) == "0") return SyncDebug::off;
  if (std::string_view(v) == "warn" || std::string_view(v) == "1") return SyncDebug::warn;
  if (std::string_view(v) == "error" || std::string_view(v) == "2") return SyncDebug::error;
  std::fprintf(stderr, "troupe: TROUPE_SYNC_DEBUG=%s is not off, warn or error; using warn\n", v);
  return SyncDebug::warn;
}

std::atomic<SyncDebug>& mode() {
  static std::atomic<SyncDebug> m{mode_from_env()};
  return m;
}

std::atomic<SyncListener> listener{nullptr};

}  // namespace

SyncAttribution::OpScope::OpScope(std::string_view op) : previous_(thread_op) { thread_op = op; }
SyncAttribution::OpScope::~OpScope() { thread_op = previous_; }
void SyncAttribution::set_thread_actor(std::string_view actor) {
  if (thread_actor != actor) thread_actor.assign(actor);
}
std::string_view SyncAttribution::current_op() { return thread_op; }

uint64_t sync_count() { return counts().total.load(std::memory_order_relaxed); }

std::vector<SyncSite> sync_sites() {
  std::vector<SyncSite> out;
  {
    std::lock_guard lock(counts().mutex);
    for (const auto& [key, n] : counts().by_site) {
      const auto& [op, actor, type, index] = key;
      out.push_back({op, actor, Device{static_cast<DeviceType>(type), index}, n});
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const SyncSite& a, const SyncSite& b) { return a.count > b.count; });
  return out;
}

void reset_sync_counts() {
  std::lock_guard lock(counts().mutex);
  counts().by_site.clear();
  counts().total.store(0, std::memory_order_relaxed);
}

SyncDebug sync_debug() { return mode().load(std::memory_order_relaxed); }
void set_sync_debug(SyncDebug m) { mode().store(m, std::memory_order_relaxed); }
void set_sync_listener(SyncListener l) { listener.store(l, std::memory_order_release); }

void note_sync(Device device, std::string_view call) {
  SyncSite site{std::string(thread_op.empty() ? call : thread_op), thread_actor, device, 1};
  const SyncDebug m = sync_debug();
  const std::string what = "host waits for " + device.str() + " in " + site.op + " (actor " + site.actor + ")";
  if (m == SyncDebug::error)
    throw DeviceError(what + ": a synchronisation while TROUPE_SYNC_DEBUG=error (read values on the host only "
                             "where you mean to wait)");
  if (m == SyncDebug::warn) std::fprintf(stderr, "troupe: sync: %s\n", what.c_str());
  counts().total.fetch_add(1, std::memory_order_relaxed);
  {
    std::lock_guard lock(counts().mutex);
    ++counts().by_site[{site.op, site.actor, static_cast<int>(device.type), device.index}];
  }
  if (SyncListener l = listener.load(std::memory_order_acquire)) l(site);
}

}  // namespace troupe
